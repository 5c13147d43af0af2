"""Time to quality: training wall-clock and environment steps until a learner's greedy
policy beats a dispatcher (`--baseline`, SED unless told) on validation worlds (the paired
95% CI of its reward minus the dispatcher's, over the same worlds, lies above 0).

Learners, each at the config's settings:
- our centralised PPO (one learner on every region's workload, `fedmc train`'s budget),
- our federated PPO (FedAvg over the regions, one learner per region, aggregated in this
  process with the federation's own `aggregate`, so Flower's and Ray's start-up is not
  counted; its clock is the serial sum of the regions' training and, beside it, the
  slowest region of each round, which is what a federation with one machine per region
  waits for),
- Stable-Baselines3 PPO with its default hyperparameters plus `VecNormalize`, on
  `fedmc/MultiCloud-v0` with 8 envs spread over the regions (what an SB3 user would write),
  each env made from the same config, `--set` overrides included.

Every learner trains in chunks (one round of ours; `--sb3-chunk` steps of SB3); after each
chunk its greedy policy is judged on `--worlds` validation worlds per region of
`--steps` jobs, paired with the baseline on the same worlds. Only training is timed. A learner stops
at the first interval above 0, after its planned rounds (ours), or at `--cap-s` seconds of
training. Prints a table, then one JSON line of the figures.

    python bench/bench_time_to_quality.py [--config conf/small_demo.yaml] [--cap-s 1200]
        [--baseline sed] [--kinds two-tier,mlp,node-scorer] [--no-sb3] [--set KEY=VALUE ...]

The target: the federated default network (`ppo.policy`'s default) beats the baseline
within `TARGET_SERIAL_S` seconds of the serial clock.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from fedmc_flwr.analysis.statistics import Estimate, paired_difference
from fedmc_flwr.config import ExperimentConfig, PPOConfig, learner_plan, load_config
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.experiments.training import matched_config
from fedmc_flwr.federation.aggregation import RegionUpdate, aggregate
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import STATISTICS, PPOLearner
from fedmc_flwr.seeds import learner_seed
from fedmc_flwr.sim import ENV_ID
from fedmc_flwr.sim.signals import region_catalogue

SB3_ENVS = 8
TARGET_SERIAL_S = 60.0
Act = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass
class Outcome:
    """Where a learner stood when it stopped."""

    learner: str
    reached: bool
    train_s: float
    env_steps: int
    vs_baseline: Estimate
    parallel_s: float | None = None
    """For the federation: the slowest region's training time, summed over rounds."""


class Judge:
    """A greedy policy against a dispatcher on the validation worlds, paired world by world."""

    def __init__(self, cfg: ExperimentConfig, worlds: int, steps: int, baseline: str) -> None:
        self.cfg = replace(
            cfg, eval=replace(cfg.eval, split="validation", seeds=worlds, steps=steps)
        )
        self.regions = range(cfg.world.regions)
        self.baseline = baseline
        dispatcher = DISPATCHERS[baseline]
        self.reference = [evaluate(dispatcher, self.cfg, r).per_seed_reward for r in self.regions]

    def __call__(self, act_of_region: Callable[[int], Act]) -> Estimate:
        rewards = []
        for r in self.regions:
            act = act_of_region(r)
            rewards.append(evaluate(lambda sim, act=act: _Acting(act), self.cfg, r).per_seed_reward)
        return paired_difference(rewards, self.reference)

    def label(self, estimate: Estimate) -> str:
        return f"vs {self.baseline} {_fmt(estimate)}"


class _Acting:
    name = "candidate"

    def __init__(self, act: Act) -> None:
        self.act = act


def centralised(cfg: ExperimentConfig, judge: Judge, cap_s: float) -> Outcome:
    """Our centralised learner, judged after every round."""
    matched = matched_config(cfg, "centralised")
    learner = PPOLearner(learner_plan(matched, list(judge.regions)), learner_seed(cfg.seed))
    clock, steps, estimate = 0.0, 0, Estimate(float("nan"), float("nan"), 0)
    for _ in range(cfg.train.rounds):
        start = time.perf_counter()
        steps += int(learner.train_round(matched.train.steps_per_round)["env_steps"])
        clock += time.perf_counter() - start
        policy = learner.policy()
        estimate = judge(lambda r, policy=policy: policy.act)
        print(f"  centralised {steps:>10,} steps {clock:7.1f} s  {judge.label(estimate)}")
        if estimate.low > 0 or clock >= cap_s:
            break
    return Outcome(f"ours centralised ({cfg.ppo.policy})", estimate.low > 0, clock, steps, estimate)


def federated(cfg: ExperimentConfig, judge: Judge, cap_s: float) -> Outcome:
    """Our FedAvg over the regions, in this process, judged after every round."""
    regions = list(judge.regions)
    learners = [PPOLearner(learner_plan(cfg, [r]), learner_seed(cfg.seed, r)) for r in regions]
    judged = PPOLearner(learner_plan(cfg, [0]), learner_seed(cfg.seed))  # holds each round's global
    weights = judged.get_weights()
    clock, parallel, steps = 0.0, 0.0, 0
    estimate = Estimate(float("nan"), float("nan"), 0)
    for _ in range(cfg.train.rounds):
        updates, slowest = [], 0.0
        for r, learner in zip(regions, learners, strict=True):
            start = time.perf_counter()
            learner.set_weights(weights)
            stats = learner.train_round(cfg.train.steps_per_round)
            took = time.perf_counter() - start
            clock, slowest = clock + took, max(slowest, took)
            updates.append(RegionUpdate(r, learner.get_update(), int(stats["env_steps"])))
            steps += int(stats["env_steps"])
        parallel += slowest
        weights = aggregate(updates, weights, cfg.federation, len(STATISTICS))
        judged.set_weights(weights)
        policy = judged.policy()
        estimate = judge(lambda r, policy=policy: policy.act)
        print(f"  federated   {steps:>10,} steps {clock:7.1f} s  {judge.label(estimate)}")
        if estimate.low > 0 or clock >= cap_s:
            break
    return Outcome(
        f"ours federated ({cfg.ppo.policy})", estimate.low > 0, clock, steps, estimate, parallel
    )


def stable_baselines(cfg: ExperimentConfig, judge: Judge, cap_s: float, chunk: int) -> Outcome:
    """SB3 PPO with its defaults and VecNormalize, 8 envs over the regions."""
    names = [r.name for r in region_catalogue(cfg.world.regions)]
    envs = VecNormalize(
        DummyVecEnv(
            [
                lambda k=k: gym.make(ENV_ID, config=cfg, ingress=names[k % len(names)])
                for k in range(SB3_ENVS)
            ]
        )
    )
    model = PPO("MlpPolicy", envs, seed=cfg.seed, device="cpu", verbose=0)

    def act(obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return model.predict(envs.normalize_obs(obs), deterministic=True)[0].astype(np.int64)

    clock, steps = 0.0, 0
    estimate = Estimate(float("nan"), float("nan"), 0)
    while clock < cap_s:
        start = time.perf_counter()
        model.learn(total_timesteps=chunk, reset_num_timesteps=False)
        clock += time.perf_counter() - start
        steps = model.num_timesteps
        envs.training = False
        estimate = judge(lambda r: act)
        envs.training = True
        print(f"  sb3         {steps:>10,} steps {clock:7.1f} s  {judge.label(estimate)}")
        if estimate.low > 0:
            break
    return Outcome("stable-baselines3 PPO (defaults)", estimate.low > 0, clock, steps, estimate)


def _fmt(estimate: Estimate) -> str:
    return f"{estimate.mean:+.4f} ± {estimate.half_width:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="conf/small_demo.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument(
        "--kinds", default=PPOConfig().policy, help="our networks to time ('' for none)"
    )
    parser.add_argument("--worlds", type=int, default=20, help="validation worlds per region")
    parser.add_argument("--steps", type=int, default=1000, help="jobs per validation world")
    parser.add_argument("--cap-s", type=float, default=1200.0, help="training seconds at most")
    parser.add_argument("--sb3-chunk", type=int, default=100_000, help="SB3 steps per check")
    parser.add_argument("--no-sb3", action="store_true", help="time our learners only")
    parser.add_argument(
        "--baseline", default="sed", choices=sorted(DISPATCHERS), help="the dispatcher to beat"
    )
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides)
    torch.set_num_threads(cfg.ppo.torch_threads)
    judge = Judge(cfg, args.worlds, args.steps, args.baseline)
    outcomes = []
    for kind in filter(None, args.kinds.split(",")):
        # only the two-tier network has a privileged critic
        privileged_critic = cfg.ppo.privileged_critic and kind == "two-tier"
        ppo = replace(cfg.ppo, policy=kind, privileged_critic=privileged_critic)
        kind_cfg = replace(cfg, ppo=ppo)
        outcomes.append(centralised(kind_cfg, judge, args.cap_s))
        outcomes.append(federated(kind_cfg, judge, args.cap_s))
    if not args.no_sb3:
        outcomes.append(stable_baselines(cfg, judge, args.cap_s, args.sb3_chunk))

    print(
        f"Time to beat {args.baseline} on {cfg.name} ({args.worlds} validation worlds x "
        f"{args.steps} jobs "
        f"per region; cap {args.cap_s:.0f} s of training); load {os.getloadavg()[0]:.2f}"
    )
    print(f"{'learner':<36}{'beats it':>10}{'train s':>10}{'env steps':>13}  difference at stop")
    for o in outcomes:
        print(
            f"{o.learner:<36}{'yes' if o.reached else 'no':>10}{o.train_s:>10.1f}"
            f"{o.env_steps:>13,}  {_fmt(o.vs_baseline)}"
            + (f"  (slowest region per round: {o.parallel_s:.1f} s)" if o.parallel_s else "")
        )
    default_name = f"ours federated ({PPOConfig().policy})"
    default = next((o for o in outcomes if o.learner == default_name), None)
    met = default is not None and default.reached and default.train_s <= TARGET_SERIAL_S
    if default is not None:
        print(
            f"target: the federated default beats {args.baseline} within {TARGET_SERIAL_S:.0f} s "
            f"of the serial clock: {'met' if met else 'NOT met'} ({default.train_s:.1f} s)"
        )
    print(
        json.dumps(
            {
                "bench": "time_to_quality",
                "target_met": met,
                "config": cfg.name,
                "worlds_per_region": args.worlds,
                "jobs_per_world": args.steps,
                "cap_s": args.cap_s,
                "baseline": args.baseline,
                "overrides": args.overrides,
                "learners": [
                    {
                        "learner": o.learner,
                        "beats_baseline": o.reached,
                        "train_s": round(o.train_s, 1),
                        "parallel_s": None if o.parallel_s is None else round(o.parallel_s, 1),
                        "env_steps": o.env_steps,
                        "vs_baseline": round(o.vs_baseline.mean, 4),
                        "vs_baseline_ci95": round(o.vs_baseline.half_width, 4),
                    }
                    for o in outcomes
                ],
                "load_avg_1min": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
