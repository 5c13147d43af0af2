"""`fedmc train`: PPO without federation, the two references of the federated ablation.

`centralised` trains one learner on the pooled workloads of every region (its envs are
spread over the ingress regions); `local` trains one learner per region on that region's
workload alone, with no aggregation. After every round each learner is judged on every
region's held-out seeds next to the classic dispatchers (evaluated once, their metrics.csv
rows repeated each round so every round of metrics.csv is a complete comparison, their
per_seed.csv rows written once as round 0). Results go to `results/<experiment>-<mode>/`
so they never overwrite the federated run's.

Budgets are matched: the federation and `local` run one learner of `ppo.num_envs` envs
per region, so the centralised learner (`ppo.num_envs` envs over all regions) takes
`train.steps_per_round * regions` steps per env and round. With the same envs and
hyperparameters it then sees the same environment steps and makes the same number of
gradient updates as the regions together, and its learning rate anneals over its own
planned steps. The steps each policy was trained on so far are in the `steps` column of
the train rows and the `train_steps` column of per_seed.csv.

The tables and TensorBoard's event files are written by `recording.Recorder`, the writer
of the federation's too, so `fedmc train` and `fedmc run` write the same columns and tags
(`fedmc_flwr.tracking`): each learner's PPO updates and training return in the run of its
metrics.csv client (`all` for the centralised learner, a region's name for a local one),
each round's held-out metrics per region and over all regions, and the dispatchers' beside
them, all on the axis of the environment steps trained so far. The closing table is
`fedmc run`'s: best first, each policy paired against SED and the two-tier heuristic.

A local learner keeps its region's federation settings: it trains `train.step_share` of
the steps, and a region that joins late (`federation.join_rounds`) gets its learner, from
scratch, in its join round and is judged from then on, as the federated region would be.
Centralised PPO pools every region from round 1 and refuses both.

Every learner trains in its regions' training worlds (`train.experience`, and a region's
workload before its drift, `train.drift`): a local learner in its region's, the
centralised learner in each region's for that region's envs.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from fedmc_flwr.analysis.tables import duration, last_round_table, with_ci
from fedmc_flwr.config import (
    ConfigError,
    ExperimentConfig,
    active_regions,
    at_round,
    learner_plan,
    region_steps,
    shares_one_estate,
    to_yaml,
)
from fedmc_flwr.evaluation import EvalResult, evaluate
from fedmc_flwr.policies.checkpoints import learner_checkpoint
from fedmc_flwr.policies.ppo import ROUND_METRICS, PPOLearner
from fedmc_flwr.recording import Recorder, Trained
from fedmc_flwr.results import experiment_dir
from fedmc_flwr.seeds import learner_seed
from fedmc_flwr.sim.signals import region_catalogue

MODES = ("centralised", "local")


def matched_config(cfg: ExperimentConfig, mode: str) -> ExperimentConfig:
    """The config a learner of `mode` trains with: for `centralised`, `steps_per_round`
    scaled by the number of regions (one learner doing the work of one per region), so its
    environment steps, gradient updates and learning-rate schedule match the federation's."""
    if mode != "centralised":
        return cfg
    steps = cfg.train.steps_per_round * cfg.world.regions
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps_per_round=steps))


def _learners(cfg: ExperimentConfig, mode: str) -> dict[str, PPOLearner]:
    """Learners keyed by the metrics.csv client they train for ('all' or a region name)."""
    regions = list(range(cfg.world.regions))
    if mode == "centralised":
        return {
            "all": PPOLearner(
                learner_plan(matched_config(cfg, mode), regions), learner_seed(cfg.seed)
            )
        }
    names = [region.name for region in region_catalogue(cfg.world.regions)]
    return {
        names[r]: PPOLearner(learner_plan(cfg, [r]), learner_seed(cfg.seed, r)) for r in regions
    }


def _into_round(
    cfg: ExperimentConfig, mode: str, learners: dict[str, PPOLearner], rnd: int
) -> dict[str, PPOLearner]:
    """The learners as they train in round `rnd`: in the round a region's workload drifts
    (`train.drift`), each moves, state and all, into that round's worlds (`at_round`)."""
    if cfg.train.drift.round != rnd:
        return learners
    moved = _learners(at_round(cfg, rnd), mode)
    for client, learner in learners.items():
        moved[client].load_state(learner.state())
    return moved


def _evaluate_learners(
    cfg: ExperimentConfig, learners: dict[str, PPOLearner], policy: str, regions: list[int]
) -> list[EvalResult]:
    """Centralised: the one learner on every region. Local: each of `regions` (those that
    have joined) by its own learner."""
    results = []
    for region in regions:
        learner = learners["all"] if "all" in learners else list(learners.values())[region]
        frozen = learner.policy(policy)
        results.append(evaluate(lambda sim, frozen=frozen: frozen, cfg, region))
    return results


def _check(cfg: ExperimentConfig, mode: str) -> None:
    """Refuse a mode that does not exist, or a config the centralised learner cannot pool."""
    if mode not in MODES:
        raise ValueError(f"unknown training mode {mode!r}; expected one of {MODES}")
    if mode == "centralised" and not shares_one_estate(cfg):
        raise ConfigError(
            f"{cfg.name}: centralised PPO runs one learner in one estate; "
            "world.region_estates gives the regions estates of different shapes"
        )
    if mode == "centralised" and (cfg.federation.join_rounds or cfg.train.step_share):
        raise ConfigError(
            f"{cfg.name}: centralised PPO pools every region from round 1; "
            "federation.join_rounds and train.step_share are for federated and local runs"
        )


def _train_one(learner: PPOLearner, client: str, steps: int, heading: str) -> Trained:
    """One learner's round of `steps` steps per env (its first round begins by imitating
    `ppo.imitation_teacher` where the config asks), printed on a line of its own."""
    start = time.perf_counter()
    stats = learner.train_round(steps, imitate=learner.global_step == 0)
    wall = time.perf_counter() - start
    print(
        f"{heading} {client}: train reward {stats['reward']:.4f}  "
        f"entropy {stats['entropy']:.3f}  SPS {stats['steps_per_second']:,.0f}"
    )
    return Trained(
        client=client,
        steps=int(stats["env_steps"]),
        values={name: stats[name] for name in ROUND_METRICS},
        steps_per_second=stats["steps_per_second"],
        wall_time_s=wall,
        updates=learner.updates,
    )


def train(cfg: ExperimentConfig, mode: str, *, overwrite: bool = True) -> Path:
    """Train for cfg.train.rounds rounds, evaluating after each; return metrics.csv's path.

    `overwrite=False` refuses (`ExperimentExists`) a results directory that already holds
    results."""
    _check(cfg, mode)
    policy = f"ppo-{mode}"
    out = experiment_dir(cfg.results_dir, f"{cfg.name}-{mode}", overwrite=overwrite)
    (out / "config.yaml").write_text(to_yaml(cfg))
    region_names = [region.name for region in region_catalogue(cfg.world.regions)]
    print(f"[{policy}] evaluating the dispatchers on held-out seeds")
    recorder = Recorder(cfg, out, region_names, policy, pooled=False, progress=True)
    learners = _learners(cfg, mode)
    steps_per_env = matched_config(cfg, mode).train.steps_per_round
    rounds = cfg.train.rounds
    print(
        f"[{policy}] {len(learners)} learner(s) x {cfg.ppo.num_envs} envs, "
        f"{rounds} rounds x {steps_per_env} steps per env"
    )
    for rnd in range(1, rounds + 1):
        round_start = time.perf_counter()
        learners = _into_round(cfg, mode, learners, rnd)
        active = active_regions(cfg, rnd)
        trained = [
            _train_one(
                learner,
                client,
                steps_per_env if mode == "centralised" else region_steps(cfg, k),
                f"[{policy}] round {rnd}/{rounds}",
            )
            for k, (client, learner) in enumerate(learners.items())
            if mode == "centralised" or k in active  # a local region trains once it has joined
        ]
        recorder.trained(rnd, trained, time.perf_counter() - round_start)
        start = time.perf_counter()
        evaluated = _evaluate_learners(cfg, learners, policy, active)
        overall = recorder.evaluated(rnd, evaluated, time.perf_counter() - start)
        took = time.perf_counter() - round_start
        left = rounds - rnd
        print(
            f"[{policy}] round {rnd}/{rounds} done in {duration(took)}: held-out reward "
            + with_ci(float(overall["reward"]), float(overall["reward_ci95"]))
            + (f", about {duration(took * left)} left" if left else "")
        )
    recorder.close()
    for client, learner in learners.items():
        name = policy if client == "all" else f"{policy}-{client}"
        learner.save(learner_checkpoint(out, name))
    print(last_round_table(out / "metrics.csv"))
    print(f"wrote {out / 'metrics.csv'}")
    return out / "metrics.csv"
