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


@njit(cache=True)
def column_moments(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population variance of each column of a `[n, dim]` batch, in float64, in
    two passes (the mean, then the squared deviations from it). Compiled: a learner
    takes the moments of every step's returns, where numpy's calls would cost more
    than the arithmetic. Any float dtype and strides: float32 columns are summed in
    float64 as they are read, exactly as a float64 copy of them would be."""
    dim = batch.shape[1]
    mean = np.zeros(dim)
    var = np.zeros(dim)
    block_moments(batch, 0, 1, dim, mean, var)
    return mean, var


@njit(cache=True)
def block_moments(
    batch: np.ndarray, start: int, blocks: int, width: int, mean: np.ndarray, var: np.ndarray
) -> None:
    """`column_moments` of the `[n * blocks, width]` rows that each row of `batch` holds
    side by side from column `start`, read in place, into the zeroed `mean` and `var`:
    a batch of observations keeps each node's features as one such block, which no
    `[n * nodes, width]` view expresses without a copy (on a 10,000-node estate, a copy
    of every observation each step). Row by row, block by block: the sums of the
    stacked rows' `column_moments`, in their order, so the same numbers."""
    count = batch.shape[0] * blocks
    for b in range(batch.shape[0]):
        for i in range(blocks):
            for f in range(width):
                mean[f] += batch[b, start + i * width + f]
    for f in range(width):
        mean[f] /= count
    for b in range(batch.shape[0]):
        for i in range(blocks):
            for f in range(width):
                deviation = batch[b, start + i * width + f] - mean[f]
                var[f] += deviation * deviation
    for f in range(width):
        var[f] /= count


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


# --- what the other regions say: one region's statistics judged against theirs ------------

MIN_PARTS_TO_JUDGE = 3
"""Regions a round needs before any is judged against the others: with two, nothing tells
which of them is the odd one."""
POOLED_SPREADS = 2.0
"""How far from the other regions' median (in their spreads, `Band`) a region's mean, and
its standard deviation upward, is pooled as sent; beyond, it is pooled at that edge
(`bounded`). The honest regions of the attack table's clean federations
(`bench/bench_attacks.py`, 5 and 10 regions) lay within 1.04 and 1.34 spreads of the
others' median on every feature for the mean, 1.67 and 1.38 for the standard deviation
(docs/security.md), so a clean run pools exactly."""
REJECTED_SPREADS = 8.0
"""Beyond this many spreads the region's statistics are turned away (`outliers`): far
beyond any honest difference measured, so that a region whose workload differs from the
others' is pooled at the band's edge rather than dropped."""
LOG_STD_SPREAD_FLOOR = 0.5
"""The least spread of the log standard deviations: the other regions may agree exactly
(static features), and a standard deviation up to e (2.7) times the others' median is
then pooled as sent."""
MAD_TO_STD = 1.4826
"""The median absolute deviation of a normal sample times this estimates its std."""
POOLED_STD_RATIO = 1.25
"""The most a round's pooled standard deviation may exceed, per feature, the median
region's standard deviation about the regions' median mean (`centre`: between-region
spread included), under the rules that claim a breakdown point (`held`). The band alone
lets each hostile region weigh its share of e times the others' standard deviation, and
those shares add up: two regions of five that scaled their variances by 100 lifted the
pooled standard deviation to about 1.9 times the honest one, and the global policy lost
9.8% (docs/security.md). The median region's figure is one that a minority cannot lift,
so a minority's variance can widen the pooled scale by a quarter at most, whatever it
sends and however many rounds. The attack table's clean federations pooled up to 1.37
(5 regions) and 1.20 (10 regions) times that figure on their widest feature (its
header), so the cap trims a clean 5-region run's widest features a little; a looser cap
would leave more of the hostile regions' shares (two of five reach about 1.9)."""


def _floor(parts: Sequence[Moments]) -> np.ndarray:
    """Per feature, a millionth of its typical size: a feature constant everywhere has no
    spread at all, and this keeps a band of it finite, far below any honest difference."""
    return 1e-6 * np.median(np.stack([scale(p) for p in parts]), axis=0) + 1e-300


def typical(
    parts: Sequence[Moments], floor: np.ndarray | float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per feature, what `parts` say together: the median of their means and its spread
    (the larger of how far their means lie apart, as a scaled median absolute deviation,
    and their median standard deviation, so that parts which agree closely still leave
    room for sampling noise), and the median of the log of their standard deviations
    (each at least `floor`) and its spread (at least LOG_STD_SPREAD_FLOOR)."""
    means = np.stack([p.mean for p in parts])
    stds = np.sqrt(np.stack([p.var for p in parts]))
    centre = np.median(means, axis=0)
    between = MAD_TO_STD * np.median(np.abs(means - centre), axis=0)
    spread = np.maximum(np.maximum(between, np.median(stds, axis=0)), floor)
    logs = np.log(np.maximum(stds, floor))
    log_centre = np.median(logs, axis=0)
    log_spread = MAD_TO_STD * np.median(np.abs(logs - log_centre), axis=0)
    return centre, spread, log_centre, np.maximum(log_spread, LOG_STD_SPREAD_FLOOR)


@dataclass(frozen=True)
class Band:
    """Per region and feature (`[n, dim]` each), what the OTHER regions of the round say
    (`typical`). A region's own figures never enter its band, so an attacker cannot
    widen its own, and it cannot widen an honest region's beyond the honest regions'
    spread while it is one of several others."""

    centre: np.ndarray
    spread: np.ndarray
    log_std_centre: np.ndarray
    log_std_spread: np.ndarray

    @classmethod
    def of(cls, parts: Sequence[Moments]) -> Band:
        floor = _floor(parts)
        rows = [typical([*parts[:k], *parts[k + 1 :]], floor) for k in range(len(parts))]
        return cls(*(np.stack(column) for column in zip(*rows, strict=True)))

    def mean_spreads(self, parts: Sequence[Moments]) -> np.ndarray:
        """How many spreads each part's mean lies from the others' median (signed)."""
        return (np.stack([p.mean for p in parts]) - self.centre) / self.spread

    def std_limit(self, spreads: float) -> np.ndarray:
        """The standard deviation `spreads` log-spreads above the others' median."""
        return np.exp(self.log_std_centre + spreads * self.log_std_spread)


def outliers(parts: Sequence[Moments]) -> dict[int, str]:
    """The parts whose mean lies more than REJECTED_SPREADS spreads from the other parts'
    median on some feature, or whose standard deviation lies that many log-spreads above
    theirs (`Band`), each with the feature and the figures; none with fewer than
    MIN_PARTS_TO_JUDGE parts. A smaller standard deviation is no outlier: it can shrink the
    pooled variance by the part's share at most."""
    if len(parts) < MIN_PARTS_TO_JUDGE:
        return {}
    band = Band.of(parts)
    shifts = np.abs(band.mean_spreads(parts))
    limits = band.std_limit(REJECTED_SPREADS)
    out = {}
    for k, part in enumerate(parts):
        std = np.sqrt(part.var)
        if np.any(shifts[k] > REJECTED_SPREADS):
            d = int(np.argmax(shifts[k]))
            out[k] = (
                f"feature {d} has mean {part.mean[d]:.4g}, {shifts[k][d]:.3g} spreads from the "
                f"other regions' median {band.centre[k][d]:.4g} (spread {band.spread[k][d]:.3g}; "
                f"at most {REJECTED_SPREADS:g} allowed)"
            )
        elif np.any(std > limits[k]):
            d = int(np.argmax(std / limits[k]))
            out[k] = (
                f"feature {d} has standard deviation {std[d]:.4g}, "
                f"{std[d] / np.exp(band.log_std_centre[k][d]):.3g} times the other regions' "
                f"median {np.exp(band.log_std_centre[k][d]):.4g} (at most "
                f"{limits[k][d] / np.exp(band.log_std_centre[k][d]):.3g} times allowed)"
            )
    return out


def bounded(parts: Sequence[Moments]) -> list[Moments]:
    """Each part with its mean held within POOLED_SPREADS spreads of the other parts'
    median and its standard deviation at most POOLED_SPREADS log-spreads above theirs
    (`Band`); parts inside that band, as every honest region of a clean run, are returned
    as they are, so they pool exactly. One part of n can then move the pooled mean by at
    most its share of POOLED_SPREADS spreads of the others, and the pooled variance
    accordingly, however far it lies and in however many rounds; fewer than
    MIN_PARTS_TO_JUDGE parts are returned as they are."""
    if len(parts) < MIN_PARTS_TO_JUDGE:
        return list(parts)
    band = Band.of(parts)
    low = band.centre - POOLED_SPREADS * band.spread
    high = band.centre + POOLED_SPREADS * band.spread
    std_high = band.std_limit(POOLED_SPREADS)
    out = []
    for k, part in enumerate(parts):
        mean = np.clip(part.mean, low[k], high[k])
        var = np.minimum(part.var, std_high[k] ** 2)
        inside = np.array_equal(mean, part.mean) and np.array_equal(var, part.var)
        out.append(part if inside else Moments(part.count, mean, var))
    return out


def std_ratio(parts: Sequence[Moments]) -> np.ndarray:
    """Per feature, the standard deviation `parts` pool to over the median part's about
    their median mean (`centre`), each at least the parts' floor (`_floor`): how far their
    spread reaches beyond a typical region's."""
    floor = _floor(parts)
    return np.maximum(np.sqrt(pool(parts).var), floor) / np.maximum(
        np.sqrt(centre(parts).var), floor
    )


def held(parts: Sequence[Moments]) -> list[Moments]:
    """The parts as the rules that claim a breakdown point pool them: each `bounded`, and,
    where the bounded parts' pooled standard deviation exceeds POOLED_STD_RATIO times the
    median part's (`std_ratio`) on some feature, their pooled moments with that feature's
    standard deviation held at that limit. Parts inside both, as most honest regions of a
    clean run, are returned as they are, so they pool exactly; fewer than
    MIN_PARTS_TO_JUDGE parts are returned as they are."""
    inside = bounded(parts)
    if len(parts) < MIN_PARTS_TO_JUDGE:
        return inside
    excess = std_ratio(inside) / POOLED_STD_RATIO
    if np.all(excess <= 1.0):
        return inside
    together = pool(inside)
    return [Moments(together.count, together.mean, together.var / np.maximum(excess, 1.0) ** 2)]


def centre(parts: Sequence[Moments]) -> Moments:
    """Per feature, the median of the parts' means, and the median of their variances
    about it (each part's variance plus its mean's squared distance from that median), at
    the parts' total count: moments that one part of three or more cannot move outside
    what the others report, whatever it sends."""
    means = np.stack([p.mean for p in parts])
    middle = np.median(means, axis=0)
    spread = np.stack([p.var for p in parts]) + (means - middle) ** 2
    return Moments(float(sum(p.count for p in parts)), middle, np.median(spread, axis=0))
