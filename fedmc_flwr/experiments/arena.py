"""The joint arena: every region's policy at once, on one shared estate.

Alone, each region's policy is judged on worlds where only its own workload arrives
(`evaluation.evaluate`). A deployment meets something else: every region dispatches its
own jobs at the same time, and they all compete for the same nodes. The arena is that
world (`MultiCloudSim(joint=True)`): the regions' workloads superposed, each job routed by
the policy of the region it entered at (the federated global policy, each region's
local-only policy, the one centralised policy, or a dispatcher for all), with the estate
as a whole offered `world.load`: what the busiest region alone offered it in training.

Arena worlds have seeds of their own (`seeds.arena_seeds`), the same for every policy and
training seed, so the arena's per-world values pair like the held-out ones. Each world is
one stratum (`client = "arena"`): its regions share queues, so their values are not
independent strata. The values land in per_seed.csv's schema, which `report` already
pools over training seeds and pairs against a baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fedmc_flwr.config import ExperimentConfig, learner_plan, shares_one_estate
from fedmc_flwr.evaluation import rollout
from fedmc_flwr.policies.base import Policy
from fedmc_flwr.seeds import arena_seeds, heldout_phases
from fedmc_flwr.sim.signals import region_catalogue
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim

CLIENT = "arena"
"""The `client` of every arena row: the whole estate is one stratum."""
ARENA_FILE = "arena.csv"
"""A run's arena rows, in per_seed.csv's schema, beside its per_seed.csv."""


def _act(
    policies: Sequence[Policy], ingress: np.ndarray, obs: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """Each job's action from its own region's policy. A policy serving every region acts
    on the whole batch at once (dispatchers may keep per-env state, like round-robin)."""
    if all(policy is policies[0] for policy in policies):
        return policies[0].act(obs, mask)
    actions = np.empty(len(ingress), dtype=np.int64)
    for region, policy in enumerate(policies):
        rows = np.flatnonzero(ingress == region)
        if len(rows):
            actions[rows] = policy.act(obs[rows], mask[rows])
    return actions


def evaluate_arena(
    make_policies: Callable[[MultiCloudSim], Sequence[Policy]],
    cfg: ExperimentConfig,
    name: str,
    jobs: int | None = None,
) -> list[dict]:
    """Run `make_policies(sim)` (one policy per region, in region order) in the arena.

    Each of `cfg.eval.seeds` arena worlds dispatches `jobs` jobs (default
    `cfg.eval.steps`), starting at stratified phases of the day. The estate then carries
    the load, and covers the span of the day, of the busiest region's worlds alone; with
    `jobs` per region instead, it would stay at the daily peak three times as long.
    Returns one per_seed.csv row per world (without the experiment's keys: experiment,
    train_seed, round, train_steps), the means over all the world's jobs.
    """
    if not shares_one_estate(cfg):
        raise ValueError(
            f"{name}: the joint arena needs one estate all regions share; "
            "world.region_estates gives each region its own"
        )
    steps = cfg.eval.steps if jobs is None else jobs
    count = cfg.eval.seeds
    seeds = arena_seeds(cfg.eval.split, count)
    phases = heldout_phases(count)
    sim = MultiCloudSim(cfg.world, cfg.reward, np.zeros(count, dtype=np.int64), joint=True)
    policies = list(make_policies(sim))
    if len(policies) != sim.num_regions:
        raise ValueError(f"{name}: {len(policies)} policies for {sim.num_regions} regions")
    sim.reset(seeds, phases=phases)
    reward_sum, metric_sum, latencies = rollout(
        sim, lambda obs, mask: _act(policies, sim.state.ingress, obs, mask), steps
    )
    p95 = np.percentile(latencies, 95, axis=0)
    return [
        {
            "split": cfg.eval.split,
            "client": CLIENT,
            "policy": name,
            "eval_seed": int(seeds[w]),
            "start_phase": float(phases[w]),
            "jobs": steps,
            "reward": reward_sum[w] / steps,
            **{metric: metric_sum[w, j] / steps for j, metric in enumerate(METRIC_NAMES)},
            "latency_p95_ms": float(p95[w]),
        }
        for w in range(count)
    ]


def dispatcher_rows(cfg: ExperimentConfig, names: Sequence[str] | None = None) -> list[dict]:
    """Every named dispatcher (default: all) in the arena, as round-0 rows (like
    per_seed.csv's dispatchers): one instance serves every region's jobs."""
    from fedmc_flwr.policies.heuristics import DISPATCHERS

    rows = []
    for name in DISPATCHERS if names is None else names:
        factory = DISPATCHERS[name]
        rows += evaluate_arena(lambda sim, f=factory: [f(sim)] * sim.num_regions, cfg, name)
    key = {"experiment": cfg.name, "train_seed": cfg.seed, "round": 0, "train_steps": 0}
    return [{**key, **row} for row in rows]


def trained_policies(
    cfg: ExperimentConfig, run_dir: Path, kind: str, name: str
) -> Callable[[MultiCloudSim], Sequence[Policy]]:
    """A factory of one greedy policy per region from a finished run's checkpoints:
    'federated' (the last round's global weights, for every region), 'centralised' (one
    learner for every region) or 'local' (each region's own learner)."""
    from fedmc_flwr.policies.checkpoints import (
        learner_checkpoint,
        read_checkpoint,
        round_checkpoint,
    )
    from fedmc_flwr.policies.ppo import PPOLearner

    regions = [region.name for region in region_catalogue(cfg.world.regions)]

    def greedy(path: Path) -> Policy:
        learner = PPOLearner(learner_plan(cfg, [0]), seed=0)
        learner.set_weights(read_checkpoint(path))
        return learner.policy(name)

    if kind == "federated":
        policies = [greedy(round_checkpoint(run_dir, cfg.train.rounds))] * len(regions)
    elif kind == "centralised":
        policies = [greedy(learner_checkpoint(run_dir, "ppo-centralised"))] * len(regions)
    elif kind == "local":
        policies = [greedy(learner_checkpoint(run_dir, f"ppo-local-{r}")) for r in regions]
    else:
        raise ValueError(f"unknown kind {kind!r}; expected federated, centralised or local")
    return lambda sim: policies


def learner_rows(
    cfg: ExperimentConfig, run_dir: Path, kind: str, name: str, train_steps: int
) -> list[dict]:
    """The trained policies of `run_dir` in the arena, keyed as its last round."""
    rows = evaluate_arena(trained_policies(cfg, run_dir, kind, name), cfg, name)
    key = {
        "experiment": cfg.name,
        "train_seed": cfg.seed,
        "round": cfg.train.rounds,
        "train_steps": train_steps,
    }
    return [{**key, **row} for row in rows]
