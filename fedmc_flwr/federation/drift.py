"""How far the regions' updates pull apart in a round: the federation's client drift.

Each region's update is its change of the network this round; the mean update is what
FedAvg applies. Two figures say how much of the regions' work survives the averaging:

- `spread`: the root mean square distance of the region updates from their mean, over the
  mean's norm (0: every region moved alike; above 1: they disagree more than they agree);
- `shrink`: the mean update's norm over the regions' mean update norm (1: the updates add
  up; near 1/sqrt(n) for n updates in unrelated directions, so most of the work cancels).

The server writes them per round to `drift.csv` (`DRIFT_COLUMNS`) beside metrics.csv: a
diagnosis of the federation, not a result of the policy, so metrics.csv keeps its schema.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DRIFT_FILE = "drift.csv"
DRIFT_COLUMNS = ("round", "regions", "mean_update_norm", "region_update_norm", "spread", "shrink")


def flat(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The arrays as one float64 vector, in order: a network as the point its updates move."""
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])


def update_drift(
    previous: Sequence[np.ndarray], networks: Sequence[Sequence[np.ndarray]]
) -> dict[str, float]:
    """The round's drift figures (module docstring) from the previous global network and
    each region's trained one (the same arrays, in float64, unweighted)."""
    if not networks:
        raise ValueError("no region updates to measure")
    base = flat(previous)
    updates = np.stack([flat(n) - base for n in networks])
    mean = updates.mean(axis=0)
    mean_norm = float(np.linalg.norm(mean))
    region_norm = float(np.linalg.norm(updates, axis=1).mean())
    distance = float(np.sqrt(np.mean(np.sum((updates - mean) ** 2, axis=1))))
    return {
        "regions": len(networks),
        "mean_update_norm": mean_norm,
        "region_update_norm": region_norm,
        "spread": distance / mean_norm if mean_norm > 0 else float("nan"),
        "shrink": mean_norm / region_norm if region_norm > 0 else float("nan"),
    }
