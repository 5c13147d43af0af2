"""The observation's layout, defined once: the kernel, the spaces and the docs read it here.

A policy that must work on any estate cannot learn a node's speed or distance from its
index, so every node carries its own row: the static facts a dispatcher reads from the
estate's description (speed, power, price factor, round-trip time from the ingress) beside
the dynamic ones (queue, live flag, expected delay, its region's price, carbon intensity
and background load). Rows are node-major (node 0's features, then node 1's, ...), nodes
numbered region by region, and the few global features follow the last row. The flat
vector is what Gymnasium and the flat MLP see; `ObsLayout.nodes` views it as a
`[..., nodes, features]` table without a copy, which a per-node network reads.

Changing this table changes the kernel's writes (`observation.observe` indexes by the
constants below), the Gymnasium bounds (`gym.observation_space` names one bound per
feature) and the lists in the docstrings of `world.py` and `gym.MultiCloudEnv`, which
`feature_list` renders (`tests/test_gym.py` holds them in step).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

MAX_BACKGROUND = 0.95
"""Other tenants never take more than this share of a node: the kernel caps their load at
it, and it bounds the observation's `background` feature."""


@dataclass(frozen=True)
class Feature:
    """One column of the observation, as the docs and the learners need to know it."""

    name: str
    meaning: str
    unit: str
    low: str
    """The lower bound, in words (the Gymnasium space holds the number)."""
    high: str
    """The upper bound, in words."""
    standardised: bool
    """Learners standardise it; flags and the clock's sin and cos pass through as they are,
    so a feature constant in one region is never blown up by a variance near 0."""


NODE_FEATURES: tuple[Feature, ...] = (
    Feature(
        "queue", "jobs in the node's queue (incl. in service)", "jobs", "0", "hard capacity", True
    ),
    Feature(
        "up",
        "the share of its speed the node serves at: 1 when live, world.slowdown_share "
        "while slowed, 0 during an outage",
        "share",
        "0",
        "1",
        False,
    ),
    Feature(
        "expected_delay",
        "RTT from the ingress + queue mean jobs and the waiting job (a mean job, or its "
        "declared size with world.declared_size) at the node's effective speed "
        "(shortest expected delay's estimate); log(1 + it / the mean service time) with "
        "world.log_delay",
        "s",
        "0",
        "full slowest node (none with declared sizes)",
        True,
    ),
    Feature(
        "price",
        "hourly price of a speed-1.0 node in the node's region",
        "USD/h",
        "0",
        "peak price",
        True,
    ),
    Feature(
        "carbon",
        "grid carbon intensity of the node's region",
        "gCO2eq/kWh",
        "0",
        "peak carbon",
        True,
    ),
    Feature(
        "background",
        "share of the region's capacity used by other tenants",
        "0..1",
        "0",
        str(MAX_BACKGROUND),
        True,
    ),
    Feature(
        "speed",
        "relative service speed of the node's instance type (static)",
        "x 1.0",
        "0",
        "fastest type",
        True,
    ),
    Feature(
        "power",
        "dynamic power of the node at full use (static)",
        "W",
        "0",
        "most powerful type",
        True,
    ),
    Feature(
        "price_mult",
        "the node's price over a speed-1.0 node's (static)",
        "x 1.0",
        "0",
        "dearest type",
        True,
    ),
    Feature(
        "rtt",
        "round-trip time from the ingress region to the node's region (static)",
        "s",
        "0",
        "longest RTT",
        True,
    ),
    Feature("local", "1 if the node sits in the ingress region", "flag", "0", "1", False),
)
GLOBAL_FEATURES: tuple[Feature, ...] = (
    Feature("clock_sin", "sin of the (compressed) time of day", "-1..1", "-1", "1", False),
    Feature("clock_cos", "cos of the (compressed) time of day", "-1..1", "-1", "1", False),
)
NODE_WIDTH = len(NODE_FEATURES)
GLOBAL_WIDTH = len(GLOBAL_FEATURES)

_NODE_INDEX = {f.name: i for i, f in enumerate(NODE_FEATURES)}
_GLOBAL_INDEX = {f.name: i for i, f in enumerate(GLOBAL_FEATURES)}

# Column of each feature inside a node's row, and of each global after the last row: plain
# ints, which the compiled kernel reads as constants.
(QUEUE, UP, EXPECTED_DELAY, PRICE, CARBON, BACKGROUND, SPEED, POWER, PRICE_MULT, RTT, LOCAL) = (
    _NODE_INDEX[name]
    for name in (
        "queue",
        "up",
        "expected_delay",
        "price",
        "carbon",
        "background",
        "speed",
        "power",
        "price_mult",
        "rtt",
        "local",
    )
)
CLOCK_SIN, CLOCK_COS = (_GLOBAL_INDEX[name] for name in ("clock_sin", "clock_cos"))


def feature_list(bounds: bool = False) -> str:
    """The layout as the docstrings of `world.py` and `gym.MultiCloudEnv` write it out, one
    entry per feature (with its bounds if asked), wrapped to 88 columns."""
    lines = []
    for scope, features in (("node", NODE_FEATURES), ("global", GLOBAL_FEATURES)):
        for f in features:
            extent = f"; {f.low} to {f.high}" if bounds else ""
            entry = f"- {scope}.{f.name} ({f.unit}{extent}): {f.meaning}"
            lines += textwrap.wrap(entry, 88, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines)


@dataclass(frozen=True)
class ObsLayout:
    """Where each feature of an estate of `num_nodes` nodes sits in the flat vector."""

    num_nodes: int
    num_regions: int = 0
    """Unknown (0) when read back from a vector's width; nothing here needs it."""

    @classmethod
    def of_width(cls, width: int) -> ObsLayout:
        """The layout of a flat observation `width` entries wide (any estate)."""
        nodes, rest = divmod(width - GLOBAL_WIDTH, NODE_WIDTH)
        if rest or nodes < 1:
            raise ValueError(f"no estate has an observation {width} wide")
        return cls(nodes)

    @property
    def size(self) -> int:
        return self.num_nodes * NODE_WIDTH + GLOBAL_WIDTH

    def node(self, name: str) -> slice:
        """One node feature of every node, in node order (a strided slice of the vector)."""
        return slice(_NODE_INDEX[name], self.num_nodes * NODE_WIDTH, NODE_WIDTH)

    def region(self, name: str) -> slice:
        """A feature every node of a region shares (price, carbon, background, rtt,
        local), once per region: the value in each region's first node's row."""
        if self.num_regions < 1:
            raise ValueError("this layout does not know its regions (read from a width)")
        per_region = self.num_nodes // self.num_regions
        return slice(_NODE_INDEX[name], self.num_nodes * NODE_WIDTH, per_region * NODE_WIDTH)

    def global_(self, name: str) -> int:
        """The index of one global feature."""
        return self.num_nodes * NODE_WIDTH + _GLOBAL_INDEX[name]

    @property
    def globals_span(self) -> slice:
        return slice(self.num_nodes * NODE_WIDTH, self.size)

    def nodes(self, obs: np.ndarray) -> np.ndarray:
        """`[..., size]` -> `[..., num_nodes, NODE_WIDTH]` view of the node rows."""
        rows = obs[..., : self.num_nodes * NODE_WIDTH]
        return rows.reshape(*obs.shape[:-1], self.num_nodes, NODE_WIDTH)
