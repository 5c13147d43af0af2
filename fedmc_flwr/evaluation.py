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

from fedmc_flwr import seeds as seed_spaces
from fedmc_flwr.analysis.statistics import ci95, mean_over_regions
from fedmc_flwr.config import ExperimentConfig, region_world
from fedmc_flwr.metrics import POINT_METRICS
from fedmc_flwr.policies.base import PolicyFactory
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.progress_bars import progress_bar
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim

LATENCY = METRIC_NAMES.index("latency_ms")
P95 = "latency_p95_ms"


def heldout_seeds(cfg: ExperimentConfig, region: int) -> np.ndarray:
    """The evaluation seeds of one region in the configured split (`fedmc_flwr.seeds`)."""
    return seed_spaces.heldout_seeds(cfg.eval.split, region, cfg.eval.seeds)


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
    """Mean over the seeds of each seed's 95th percentile of job latency (`metrics`)."""
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
            **{
                m.csv_column: self.latency_p95_ms if m.name == P95 else self.means[m.name]
                for m in POINT_METRICS
            },
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


PER_SEED_METRICS = (*METRIC_NAMES, P95)
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
    p95 = np.percentile(latencies, 95, axis=0)
    return EvalResult(
        policy=policy.name,
        region=region,
        seeds=len(seeds),
        steps=steps,
        per_seed_reward=reward_sum / steps,
        means={name: float(per_seed[:, j].mean()) for j, name in enumerate(METRIC_NAMES)},
        latency_p95_ms=float(p95.mean()),
        split=cfg.eval.split,
        eval_seeds=np.asarray(seeds, dtype=np.uint64),
        start_phases=np.asarray(phases, dtype=np.float64),
        per_seed={
            **{name: per_seed[:, j].copy() for j, name in enumerate(METRIC_NAMES)},
            P95: p95,
        },
    )


_AVERAGED = tuple(metric.csv_column for metric in POINT_METRICS)
"""Columns of a `client="all"` row that are the mean over regions."""


def evaluate_dispatchers(
    cfg: ExperimentConfig, names: Sequence[str] | None = None, progress: bool = True
) -> list[EvalResult]:
    """Each named dispatcher (default: all, in DISPATCHERS order) on each region, in turn."""
    names = list(DISPATCHERS) if names is None else list(names)
    unknown = [name for name in names if name not in DISPATCHERS]
    if unknown:
        raise ValueError(f"unknown dispatchers {unknown}; expected some of {list(DISPATCHERS)}")
    jobs = [(name, region) for name in names for region in range(cfg.world.regions)]
    results = []
    with progress_bar(len(jobs), "eval", disable=not progress) as bar:
        for name, region in jobs:
            bar.set_description(f"{name} @ region {region}")
            results.append(evaluate(DISPATCHERS[name], cfg, region))
            bar.update()
    return results


def summary_rows(results: list[EvalResult], region_names: list[str]) -> list[dict]:
    """One row per (policy, region), then per policy one `client="all"` row: the mean over
    regions of every metric, with the reward's CI from `mean_over_regions`.
    """
    rows: list[dict] = []
    policies = list(dict.fromkeys(result.policy for result in results))
    for policy in policies:
        mine = [result for result in results if result.policy == policy]
        regional = [{"client": region_names[r.region], **r.row()} for r in mine]
        reward, half_width = mean_over_regions([r.per_seed_reward for r in mine])
        overall = {
            "client": "all",
            "policy": policy,
            "seeds": sum(row["seeds"] for row in regional),
            "steps": sum(row["steps"] for row in regional),
            "reward": reward,
            "reward_ci95": half_width,
        }
        overall.update({key: float(np.mean([row[key] for row in regional])) for key in _AVERAGED})
        rows.extend([*regional, overall])
    return rows
