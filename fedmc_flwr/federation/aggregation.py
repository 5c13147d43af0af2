"""How the server combines the regions' weights: plain numpy, testable without Flower.

`check_update` rejects malformed updates, `by_region` fixes the order of the survivors
(float sums depend on order; replies arrive in any order), and `aggregate` builds the next
global weights from the healthy updates:

1. optionally clips each region's update (its change of the network weights this round)
   to `federation.clip` times the round's median update norm, so one region cannot drag
   the model by the size of its step;
2. combines the networks per `federation.aggregation`: the mean weighted by environment
   steps (FedAvg), or per coordinate the trimmed mean or the median of the regions
   (unweighted, as in Yin et al. 2018), which a minority of broken or hostile regions
   cannot move arbitrarily far;
3. shrinks the result toward the previous global weights for strategy 'shrink';
4. pools the running observation and return moments exactly: the global moments plus each
   region's moments of this round, between-region spread included (`policies/moments.py`).

Sums run in float64 and every array keeps its own dtype (float32 network weights, float64
moments), so one round's result does not depend on how many virtual clients served the
regions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
from flwr.common import Scalar
from scipy.stats import trim_mean

from fedmc_flwr.config import FederationConfig
from fedmc_flwr.policies.moments import MOMENT_ARRAYS, Moments, pool

Weights = list[np.ndarray]


@dataclass
class RegionUpdate:
    """One region's trained weights, as reported after a round of local PPO."""

    region: int
    """Region index (the partition id when every virtual client serves one region)."""
    weights: Weights
    num_examples: int
    """Environment steps behind the update: its weight in the mean."""
    metrics: dict[str, Scalar] = field(default_factory=dict)


def check_update(weights: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> str | None:
    """Why `weights` cannot be averaged with arrays shaped like `reference`, or None if it can."""
    if len(weights) != len(reference):
        return f"{len(weights)} arrays, expected {len(reference)}"
    for k, (array, ref) in enumerate(zip(weights, reference, strict=True)):
        array = np.asarray(array)
        if array.shape != ref.shape:
            return f"array {k} has shape {array.shape}, expected {ref.shape}"
        if array.dtype != ref.dtype:
            return f"array {k} has dtype {array.dtype}, expected {ref.dtype}"
        if not np.all(np.isfinite(array)):
            return f"array {k} holds NaN or inf"
    return None


def by_region(updates: Sequence[RegionUpdate]) -> list[RegionUpdate]:
    """Updates in region order; two updates for one region are an error, not a choice."""
    ordered = sorted(updates, key=lambda u: u.region)
    for first, second in pairwise(ordered):
        if first.region == second.region:
            raise ValueError(f"two updates for region {first.region}")
    return ordered


def weighted_mean(updates: Sequence[Sequence[np.ndarray]], weights: Sequence[float]) -> Weights:
    """Mean of several weight lists, weighted by `weights`, summed in the order given."""
    if not updates:
        raise ValueError("nothing to average")
    if len(updates) != len(weights):
        raise ValueError(f"{len(updates)} updates but {len(weights)} weights")
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all zero, got {list(weights)}")
    w = w / w.sum()
    out = []
    for k, ref in enumerate(updates[0]):
        total = np.zeros(np.shape(ref), dtype=np.float64)
        for share, update in zip(w, updates, strict=True):
            total += share * np.asarray(update[k], dtype=np.float64)
        out.append(total.astype(np.asarray(ref).dtype))
    return out


def coordinatewise(updates: Sequence[Sequence[np.ndarray]], how: str, trim: float) -> Weights:
    """Per coordinate over the regions: the 'median', or the 'trimmed-mean' that drops the
    `trim` share of regions at each end first."""
    if not updates:
        raise ValueError("nothing to combine")
    out = []
    for k, ref in enumerate(updates[0]):
        stacked = np.stack([np.asarray(u[k], dtype=np.float64) for u in updates])
        if how == "median":
            combined = np.median(stacked, axis=0)
        elif how == "trimmed-mean":
            combined = trim_mean(stacked, trim, axis=0)
        else:
            raise ValueError(f"unknown coordinate-wise rule {how!r}")
        out.append(np.asarray(combined).astype(np.asarray(ref).dtype))
    return out


def clip_to_median(
    networks: Sequence[Sequence[np.ndarray]], previous: Sequence[np.ndarray], factor: float
) -> list[Weights]:
    """Each network moved back toward `previous` so that its update's L2 norm (over all
    arrays) is at most `factor` times the median of the updates' norms."""
    base = [np.asarray(p, dtype=np.float64) for p in previous]
    deltas = [
        [np.asarray(a, np.float64) - b for a, b in zip(n, base, strict=True)] for n in networks
    ]
    norms = np.array([np.sqrt(sum(float(np.sum(d * d)) for d in delta)) for delta in deltas])
    limit = factor * float(np.median(norms))
    out = []
    for delta, norm, network in zip(deltas, norms, networks, strict=True):
        scale = 1.0 if norm <= limit else limit / norm
        out.append(
            [(b + scale * d).astype(a.dtype) for a, b, d in zip(network, base, delta, strict=True)]
        )
    return out


def shrink(average: Sequence[np.ndarray], previous: Sequence[np.ndarray], mu: float) -> Weights:
    """The server shrink: `(1 - mu) * average + mu * previous`, array by array (a damped FedAvg)."""
    if not 0.0 <= mu < 1.0:
        raise ValueError(f"mu must lie in [0, 1), got {mu}")
    return [
        ((1.0 - mu) * np.asarray(a, np.float64) + mu * np.asarray(p, np.float64)).astype(a.dtype)
        for a, p in zip(average, previous, strict=True)
    ]


def pool_statistics(
    previous: Sequence[np.ndarray], fresh: Sequence[Sequence[np.ndarray]]
) -> Weights:
    """Running moments (`[count, mean, var]` groups) pooled: the global ones plus what each
    region saw this round, with the between-region spread (never a plain average)."""
    out: Weights = []
    for k in range(0, len(previous), MOMENT_ARRAYS):
        parts = [Moments.from_arrays(previous[k : k + MOMENT_ARRAYS])]
        parts += [Moments.from_arrays(f[k : k + MOMENT_ARRAYS]) for f in fresh]
        out += pool(parts).arrays()
    return out


def aggregate(
    updates: Sequence[RegionUpdate],
    previous: Sequence[np.ndarray],
    federation: FederationConfig,
    statistics: int,
) -> Weights:
    """The next global weights from healthy updates (see the module docstring).

    The last `statistics` groups of `MOMENT_ARRAYS` arrays are running moments, pooled;
    the arrays before them are the network, combined (and shrunk for 'shrink').
    """
    ordered = by_region(updates)
    cut = len(previous) - statistics * MOMENT_ARRAYS
    if cut < 0:
        raise ValueError(f"{len(previous)} arrays cannot hold {statistics} statistics")
    networks: Sequence[Sequence[np.ndarray]] = [u.weights[:cut] for u in ordered]
    if federation.clip > 0:
        networks = clip_to_median(networks, previous[:cut], federation.clip)
    if federation.aggregation == "mean":
        combined = weighted_mean(networks, [u.num_examples for u in ordered])
    else:
        combined = coordinatewise(networks, federation.aggregation, federation.trim_fraction)
    if federation.strategy == "shrink":
        combined = shrink(combined, previous[:cut], federation.mu)
    return combined + pool_statistics(previous[cut:], [u.weights[cut:] for u in ordered])
