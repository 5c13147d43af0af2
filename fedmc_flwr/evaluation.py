"""Held-out evaluation: any policy, the same seeds, the same metrics.

Dispatchers, centralised and local PPO and the federated global policy are all judged
here, on seeds that no learner trains on, so their rows in metrics.csv compare like with
like. A region's held-out seeds are run as one batch of worlds; the per-seed means give
the spread behind each confidence interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import stdtrit

from fedmc_flwr import seeds as seed_spaces
from fedmc_flwr.config import ExperimentConfig, region_world
from fedmc_flwr.policies.base import PolicyFactory
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim

LATENCY = METRIC_NAMES.index("latency_ms")


def heldout_seeds(cfg: ExperimentConfig, region: int) -> np.ndarray:
    """The evaluation seeds of one region in the configured split (`fedmc_flwr.seeds`)."""
    return seed_spaces.heldout_seeds(cfg.eval.split, region, cfg.eval.seeds)


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


@dataclass
class EvalResult:
    """A policy's held-out performance in one region, kept per seed for paired comparisons."""

    policy: str
    region: int
    seeds: int
    steps: int
    per_seed_reward: np.ndarray
    """[seeds] mean reward per job of each held-out seed."""
    means: dict[str, float]
    """Mean per job over all seeds of every metric in METRIC_NAMES."""
    latency_p95_ms: float
    """95th percentile of latency over every job of every seed."""
    split: str = "test"
    """The held-out split the seeds come from."""
    eval_seeds: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    """[seeds] the held-out world seeds, in `per_seed_reward` order."""
    start_phases: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """[seeds] where in the day each seed's episode starts (fraction of the day)."""
    per_seed: dict[str, np.ndarray] = field(default_factory=dict)
    """PER_SEED_METRICS -> [seeds]: each seed's mean per job of every metric, and its
    latency_p95_ms."""

    def row(self) -> dict[str, float | int | str]:
        """The metrics.csv columns this evaluation fills."""
        return {
            "policy": self.policy,
            "seeds": self.seeds,
            "steps": self.steps * self.seeds,
            "reward": float(self.per_seed_reward.mean()),
            "reward_ci95": ci95(self.per_seed_reward),
            "latency_ms": self.means["latency_ms"],
            "latency_p95_ms": self.latency_p95_ms,
            "slo_violation_rate": self.means["slo_violation"],
            "cost_usd": self.means["cost_usd"],
            "carbon_g": self.means["carbon_g"],
            "energy_kwh": self.means["energy_kwh"],
        }

    def seed_rows(self) -> list[dict[str, float | int | str]]:
        """One per_seed.csv row per held-out seed (without the experiment, training seed,
        round, client and training steps, which the caller knows)."""
        columns = {"reward": self.per_seed_reward, **self.per_seed}
        if len(self.eval_seeds) != self.seeds or len(self.start_phases) != self.seeds:
            raise ValueError(f"{self.policy} @ region {self.region}: per-seed identities missing")
        missing = set(PER_SEED_METRICS) - set(self.per_seed)
        if missing:
            raise ValueError(f"{self.policy} @ region {self.region}: no per-seed {sorted(missing)}")
        return [
            {
                "split": self.split,
                "policy": self.policy,
                "eval_seed": int(self.eval_seeds[k]),
                "start_phase": float(self.start_phases[k]),
                "jobs": self.steps,
                **{name: float(values[k]) for name, values in columns.items()},
            }
            for k in range(self.seeds)
        ]


PER_SEED_METRICS = (*METRIC_NAMES, "latency_p95_ms")
"""The per-seed values an EvalResult keeps besides the reward."""


def per_seed_rows(
    results: Sequence[EvalResult], region_names: Sequence[str], **key: object
) -> list[dict]:
    """per_seed.csv rows of `results` (client = region name), each with `key`'s columns
    (experiment, train_seed, round, train_steps)."""
    return [
        {**key, "client": region_names[result.region], **row}
        for result in results
        for row in result.seed_rows()
    ]


def rollout(
    sim: MultiCloudSim, act: Callable[[np.ndarray, np.ndarray], np.ndarray], steps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`steps` jobs of a freshly reset `sim`, each dispatched by `act(obs, mask)`: every
    world's reward sum [B], metric sums [B, M] and each job's latency [steps, B]."""
    obs, mask = sim.obs, sim.mask
    reward_sum = np.zeros(sim.num_envs)
    metric_sum = np.zeros((sim.num_envs, len(METRIC_NAMES)))
    latencies = np.empty((steps, sim.num_envs))
    for k in range(steps):
        result = sim.step(act(obs, mask))
        reward_sum += result.reward
        metric_sum += result.metrics
        latencies[k] = result.metrics[:, LATENCY]
        obs, mask = result.obs, result.mask
    return reward_sum, metric_sum, latencies


def evaluate(
    make_policy: PolicyFactory, cfg: ExperimentConfig, region: int, steps: int | None = None
) -> EvalResult:
    """Run a policy for `steps` jobs (default cfg.eval.steps) on each held-out seed of
    `region`, each starting at its stratified phase of the day (`seeds.heldout_phases`)."""
    steps = cfg.eval.steps if steps is None else steps
    seeds = heldout_seeds(cfg, region)
    phases = seed_spaces.heldout_phases(len(seeds))
    sim = MultiCloudSim(region_world(cfg.world, region), cfg.reward, np.full(len(seeds), region))
    policy = make_policy(sim)
    sim.reset(seeds, phases=phases)
    reward_sum, metric_sum, latencies = rollout(sim, policy.act, steps)
    per_seed = metric_sum / steps
    return EvalResult(
        policy=policy.name,
        region=region,
        seeds=len(seeds),
        steps=steps,
        per_seed_reward=reward_sum / steps,
        means={name: float(per_seed[:, j].mean()) for j, name in enumerate(METRIC_NAMES)},
        latency_p95_ms=float(np.percentile(latencies, 95)),
        split=cfg.eval.split,
        eval_seeds=np.asarray(seeds, dtype=np.uint64),
        start_phases=np.asarray(phases, dtype=np.float64),
        per_seed={
            **{name: per_seed[:, j].copy() for j, name in enumerate(METRIC_NAMES)},
            "latency_p95_ms": np.percentile(latencies, 95, axis=0),
        },
    )
