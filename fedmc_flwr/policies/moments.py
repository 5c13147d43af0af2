"""Running means and variances that can be pooled exactly across regions.

A learner normalises its observations and scales its rewards by running statistics. In a
federation those statistics must mean the same thing in every region, or the averaged
network would read its inputs (and its critic its targets) in different units. Averaging
the regions' means and variances as plain arrays is wrong: it drops the spread *between*
regions. A feature that is constant inside each region but differs between them (a region
flag, a region-specific queue level) has a local variance near 0 and a pooled variance
that is not. So statistics travel as `Moments` (count, mean, variance) and are combined
with the parallel formula of Chan, Golub and LeVeque (1979), whose between-group term
restores that spread: pooling gives exactly the moments of the concatenated data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from fedmc_flwr.sim import compile_cache

compile_cache.install()  # before the first @njit: numba picks the cache locator then

MOMENT_ARRAYS = 3
"""Arrays of one `Moments` on the wire: count, mean, var."""


@dataclass(frozen=True)
class Moments:
    """Count, mean and (population) variance of a stream of feature vectors, in float64."""

    count: float
    mean: np.ndarray
    var: np.ndarray

    @classmethod
    def empty(cls, dim: int) -> Moments:
        """No data yet: pooling with it changes nothing (mean 0, variance 1 until data)."""
        return cls(0.0, np.zeros(dim), np.ones(dim))

    @classmethod
    def of(cls, batch: np.ndarray) -> Moments:
        """The moments of a [n, dim] batch."""
        batch = np.ascontiguousarray(batch, dtype=np.float64)
        mean, var = column_moments(batch)
        return cls(float(batch.shape[0]), mean, var)

    def merge(self, other: Moments) -> Moments:
        """The moments of both streams together (the between-stream term included)."""
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        mean, var = _merged(self.count, self.mean, self.var, other.count, other.mean, other.var)
        return Moments(self.count + other.count, mean, var)

    def arrays(self) -> list[np.ndarray]:
        """`[count (1,), mean (dim,), var (dim,)]`, float64: the form that travels."""
        return [np.array([self.count]), self.mean.copy(), self.var.copy()]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> Moments:
        """Inverse of `arrays()`."""
        count, mean, var = (np.asarray(a, dtype=np.float64) for a in arrays)
        return cls(float(count.reshape(-1)[0]), mean.copy(), var.copy())


def column_moments(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population variance of each column of a `[n, dim]` batch, in float64, in
    two passes (the mean, then the squared deviations from it). Compiled: a learner
    takes the moments of every step's observations, where numpy's calls would cost more
    than the arithmetic. Any float dtype and strides: float32 columns are summed in
    float64 as they are read, exactly as a float64 copy of them would be."""
    return stacked_moments(batch[np.newaxis])


@njit(cache=True)
def stacked_moments(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`column_moments` of the `[g * n, dim]` rows that `[g, n, dim]` blocks stack to,
    read in place: a batch's node rows are `[B, nodes, features]` slices of its
    observations, which no `[B * nodes, features]` view can express without a copy (on
    a 10,000-node estate, a copy of every observation each step)."""
    groups, n, dim = blocks.shape
    mean = np.zeros(dim)
    var = np.zeros(dim)
    for g in range(groups):
        for i in range(n):
            for d in range(dim):
                mean[d] += blocks[g, i, d]
    mean /= groups * n
    for g in range(groups):
        for i in range(n):
            for d in range(dim):
                deviation = blocks[g, i, d] - mean[d]
                var[d] += deviation * deviation
    var /= groups * n
    return mean, var


@njit(cache=True)
def _merged(
    count_a: float,
    mean_a: np.ndarray,
    var_a: np.ndarray,
    count_b: float,
    mean_b: np.ndarray,
    var_b: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Chan, Golub and LeVeque's parallel formula: the mean and variance of two streams."""
    total = count_a + count_b
    delta = mean_b - mean_a
    mean = mean_a + delta * (count_b / total)
    m2 = var_a * count_a + var_b * count_b + delta**2 * (count_a * count_b / total)
    return mean, m2 / total


def pool(parts: Sequence[Moments]) -> Moments:
    """All parts together, merged in the order given (float sums depend on order)."""
    if not parts:
        raise ValueError("nothing to pool")
    total = parts[0]
    for part in parts[1:]:
        total = total.merge(part)
    return total


ABSURD_FACTOR = 1e4
"""How far past the round's typical scale a region's statistics may lie on any feature
before they are taken as absurd (`absurd`): far beyond any honest difference between
regions, far below what overflows the pooled variance."""


def scale(moments: Moments) -> np.ndarray:
    """Per feature, `|mean| + std`: the size of what a stream saw."""
    return np.abs(moments.mean) + np.sqrt(moments.var)


def absurd(parts: Sequence[Moments], reference: Moments) -> dict[int, str]:
    """The parts whose scale on some feature exceeds ABSURD_FACTOR times the typical one,
    each with the feature and the figures. Typical: the lower median over the parts (so
    a minority cannot lift it, as for counts), at least the `reference`'s own scale when it
    holds data (the global moments so far: so a minority cannot push it down either), and
    at least 1. Finite values pass every other check; a region's means of 1e200 would make
    the pooled variance overflow, and every region would then refuse the global weights."""
    sizes = np.stack([scale(p) for p in parts])
    typical = np.sort(sizes, axis=0)[(len(parts) - 1) // 2]
    if reference.count > 0:
        typical = np.maximum(typical, scale(reference))
    limit = ABSURD_FACTOR * np.maximum(typical, 1.0)
    out = {}
    for k, size in enumerate(sizes):
        ratio = size / limit
        if np.any(ratio > 1.0):
            d = int(np.argmax(ratio))
            out[k] = (
                f"feature {d} has |mean| + std {size[d]:.3g}, over {ABSURD_FACTOR:g} x the "
                f"round's typical {max(typical[d], 1.0):.3g}"
            )
    return out
