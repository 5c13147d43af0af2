"""Held-out evaluation: any policy, the same seeds, the same metrics.

Dispatchers, centralised and local PPO and the federated global policy are all judged
here, on seeds that no learner trains on, so their rows in metrics.csv compare like with
like. A region's held-out seeds are run as one batch of worlds; the per-seed means give
the spread behind each confidence interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from fedmc_flwr import seeds as seed_spaces
from fedmc_flwr.config import ExperimentConfig
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
    return float(stats.t.ppf(0.975, n - 1) * sem)


def mean_over_regions(per_region: list[np.ndarray]) -> tuple[float, float]:
    """Mean over regions of the regional means, and its 95% confidence half-width.

    Regions are strata, not draws from one population: their means differ by design
    (non-IID workloads), so pooling their seeds would count that spread as noise. The
    half-width combines the within-region variances (stratified estimator, df = n - R).
    """
    means = np.array([np.mean(seeds) for seeds in per_region])
    if any(len(seeds) < 2 for seeds in per_region):
        return float(means.mean()), float("nan")
    variance = sum(np.var(seeds, ddof=1) / len(seeds) for seeds in per_region)
    dof = sum(len(seeds) - 1 for seeds in per_region)
    half_width = stats.t.ppf(0.975, dof) * np.sqrt(variance) / len(per_region)
    return float(means.mean()), float(half_width)


@dataclass
class EvalResult:
    """A policy's held-out performance in one region."""

    policy: str
    region: int
    seeds: int
    steps: int
    per_seed_reward: np.ndarray
    """[seeds] mean reward per job of each held-out seed."""
    means: dict[str, float]
    """Mean per job over all seeds of every metric in METRIC_NAMES."""
    latency_p95_ms: float

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


def evaluate(
    make_policy: PolicyFactory, cfg: ExperimentConfig, region: int, steps: int | None = None
) -> EvalResult:
    """Run a policy for `steps` jobs (default cfg.eval.steps) on each held-out seed of `region`."""
    steps = cfg.eval.steps if steps is None else steps
    seeds = heldout_seeds(cfg, region)
    sim = MultiCloudSim(cfg.world, cfg.reward, np.full(len(seeds), region))
    policy = make_policy(sim)
    obs, mask = sim.reset(seeds)
    reward_sum = np.zeros(len(seeds))
    metric_sum = np.zeros((len(seeds), len(METRIC_NAMES)))
    latencies = np.empty((steps, len(seeds)))
    for k in range(steps):
        actions = policy.act(obs, mask)
        result = sim.step(actions)
        reward_sum += result.reward
        metric_sum += result.metrics
        latencies[k] = result.metrics[:, LATENCY]
        obs, mask = result.obs, result.mask
    per_seed = metric_sum / steps
    return EvalResult(
        policy=policy.name,
        region=region,
        seeds=len(seeds),
        steps=steps,
        per_seed_reward=reward_sum / steps,
        means={name: float(per_seed[:, j].mean()) for j, name in enumerate(METRIC_NAMES)},
        latency_p95_ms=float(np.percentile(latencies, 95)),
    )
