"""docs/design.md's layer diagram is the one `lint-imports` checks.

The contract itself runs in `make test` (`make lint`); this test keeps the drawing a
reader sees and the contract the linter reads from drifting apart.
"""

from __future__ import annotations

import re
import tomllib

from conftest import REPO

NAME = re.compile(r"\b([a-z_]+)(?:/|\.py)(?=\s|$)")
"""A module (`config.py`) or a package (`sim/`) as the diagram names it."""


def drawn_layers() -> list[set[str]]:
    """The diagram's rows, top first: a row starts at the line's first column, and lines
    indented under it continue it."""
    text = (REPO / "docs" / "design.md").read_text()
    drawing = text.split("## Layers", 1)[1].split("```")[1]
    rows: list[set[str]] = []
    for line in drawing.strip("\n").splitlines():
        names = set(NAME.findall(line))
        if not line.startswith(" "):
            rows.append(names)
        elif names:
            rows[-1] |= names
    return rows


def contract_layers() -> list[set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [set(re.split(r"\s*[|:]\s*", row)) for row in layers["layers"]]


def test_the_layers_drawn_in_the_design_are_the_layers_checked():
    assert drawn_layers() == contract_layers()
    assert len(drawn_layers()) >= 5, "the drawing was not found"
