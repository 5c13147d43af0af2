"""The names of the choices a config makes among implementations that live above it: the
dispatchers (`policies/heuristics.py`) and the aggregation rules
(`federation/aggregation.py`).

Each name is declared once, in its implementing module's registry, and that module hands
its registry to one of the `Names` here as it loads. The config sits below every
implementation (docs/design.md, Layers) and reads the names from here, so it refuses an
unknown one when a config is loaded without importing anything above it. Only names whose
module is loaded can be read: every entry point loads them all
(`federation.load_choices`) before it loads a config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

Fact = TypeVar("Fact")
Implementation = TypeVar("Implementation")

Breakdown = Callable[[int, float, int], int]
"""(regions, trim_fraction, min_regions) -> the most hostile regions a rule holds against."""


class Names(Generic[Fact]):
    """One choice's names, in their registry's order, each with the one fact the config
    checks of it. The registry is read each time, never copied: an entry added to it is a
    name the config accepts."""

    def __init__(self) -> None:
        self._read: Callable[[], dict[str, Fact]] = dict

    def implemented_by(
        self,
        registry: Mapping[str, Implementation],
        fact: Callable[[Implementation], Fact],
    ) -> None:
        """Reads the names from `registry` and each name's fact with `fact` (called by the
        implementing module, beside its registry)."""
        self._read = lambda: {name: fact(entry) for name, entry in registry.items()}

    def facts(self) -> dict[str, Fact]:
        """Name -> fact; empty until the implementing module is loaded."""
        return self._read()

    def names(self, keep: Callable[[Fact], bool] = lambda _: True) -> tuple[str, ...]:
        """The names whose fact `keep` accepts (all by default)."""
        return tuple(name for name, fact in self.facts().items() if keep(fact))


DISPATCHERS: Names[bool] = Names()
"""Every dispatcher, and whether it is an oracle (reads what the observation hides)."""
AGGREGATIONS: Names[Breakdown | None] = Names()
"""Every aggregation rule, and its breakdown point (None: it makes no claim)."""
