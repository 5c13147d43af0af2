"""The statistics every table and plot of results reads: means, intervals, paired differences.

They are plain functions over per-seed arrays, apart from the simulator and the learners,
so that the evaluation rows written during a run and the reports read afterwards use one
definition of each interval. Rewards are higher-is-better; a paired difference A - B is
taken per held-out world, which both policies saw with the same arrivals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtrit


def ci95(per_seed: np.ndarray) -> float:
    """Half-width of the 95% Student-t confidence interval of the mean over seeds."""
    n = len(per_seed)
    if n < 2:
        return float("nan")
    sem = float(np.std(per_seed, ddof=1)) / np.sqrt(n)
    return float(stdtrit(n - 1, 0.975) * sem)


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95% confidence half-width (NaN when it cannot be estimated)."""

    mean: float
    half_width: float
    n: int
    """How many units the interval is over (evaluation seeds, or training seeds)."""

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def verdict(self) -> str:
        """For a difference A - B of rewards (higher is better): is A better or worse?"""
        if np.isnan(self.half_width):
            return "no interval"
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        return "no difference at 95%"


def stratified_mean(per_region: Sequence[np.ndarray]) -> Estimate:
    """Mean over regions of the regional means, and its 95% confidence half-width.

    Regions are strata, not draws from one population: their means differ by design
    (non-IID workloads), so pooling their seeds would count that spread as noise. The
    standard error is sqrt(sum_r s_r^2 / n_r) / R (the within-region variances summed over
    strata), with a Student-t quantile at df = sum_r (n_r - 1).
    """
    if not per_region:
        raise ValueError("no regions to average over")
    arrays = [np.asarray(seeds, dtype=np.float64) for seeds in per_region]
    means = np.array([a.mean() for a in arrays])
    n = sum(len(a) for a in arrays)
    if any(len(a) < 2 for a in arrays):
        return Estimate(float(means.mean()), float("nan"), n)
    variance = sum(np.var(a, ddof=1) / len(a) for a in arrays)
    dof = sum(len(a) - 1 for a in arrays)
    half_width = stdtrit(dof, 0.975) * np.sqrt(variance) / len(arrays)
    return Estimate(float(means.mean()), float(half_width), n)


def mean_over_regions(per_region: list[np.ndarray]) -> tuple[float, float]:
    """`stratified_mean` as (mean, 95% half-width)."""
    estimate = stratified_mean(per_region)
    return estimate.mean, estimate.half_width


def paired_difference(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> Estimate:
    """A - B paired per evaluation seed, stratified over regions.

    `a[r][k]` and `b[r][k]` are two policies' values on the same held-out world (region r,
    seed k): the world's arrivals do not depend on the actions, so the per-seed difference
    removes the seed-to-seed spread both share. Its mean over regions and CI come from
    `stratified_mean` of the per-seed differences.
    """
    if len(a) != len(b):
        raise ValueError(f"{len(a)} regions against {len(b)}")
    diffs = []
    for r, (x, y) in enumerate(zip(a, b, strict=True)):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if x.shape != y.shape:
            raise ValueError(f"region {r}: {x.shape} seeds against {y.shape}; cannot pair")
        diffs.append(x - y)
    return stratified_mean(diffs)


def paired_over_seeds_and_worlds(diffs: Sequence[Sequence[np.ndarray]]) -> Estimate:
    """A - B over several training seeds, judged on the same held-out worlds.

    `diffs[s][r][k]` is the paired difference of training seed s on world k of region r.
    Two independent sources of error: which training seeds were drawn (the spread of the
    per-seed stratified means d_s) and which held-out worlds were drawn (shared by every
    seed, so it does not average out over seeds: the stratified spread of the per-world
    differences averaged over seeds). The interval adds both variances (conservative: the
    seed-by-world noise is counted in each) and takes the Student-t quantile at the
    smaller of the two degrees of freedom. With a dispatcher as B, the seed term alone
    would only say how reproducible training is, not whether A beats B on new worlds.
    """
    runs = [[np.asarray(d, dtype=np.float64) for d in run] for run in diffs]
    if len(runs) < 2:
        raise ValueError("need two or more training seeds")
    per_seed = np.array([np.mean([d.mean() for d in run]) for run in runs])
    per_world = [np.mean([run[r] for run in runs], axis=0) for r in range(len(runs[0]))]
    world = stratified_mean(per_world)
    world_dof = sum(len(w) - 1 for w in per_world)
    world_var = (world.half_width / stdtrit(world_dof, 0.975)) ** 2
    seed_var = np.var(per_seed, ddof=1) / len(per_seed)
    dof = min(len(per_seed) - 1, world_dof)
    half_width = stdtrit(dof, 0.975) * np.sqrt(seed_var + world_var)
    return Estimate(float(per_seed.mean()), float(half_width), int(sum(map(len, per_world))))


def over_training_seeds(values: Sequence[float]) -> Estimate:
    """Mean over training seeds of one per-seed figure (a level or a paired difference
    d_s), with the Student-t 95% half-width over those seeds (df = n - 1): the spread of
    the method, not of one trained policy."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no training seeds")
    return Estimate(float(x.mean()), ci95(x), int(x.size))
