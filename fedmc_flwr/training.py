"""`fedmc train`: PPO without federation, the two references of the federated ablation.

`centralised` trains one learner on the pooled workloads of every region (its envs are
spread over the ingress regions); `local` trains one learner per region on that region's
workload alone, with no aggregation. After every round each learner is judged on every
region's held-out seeds next to the classic dispatchers (evaluated once, their rows
repeated each round so every round of metrics.csv is a complete comparison). Results go
to `results/<experiment>-<mode>/` so they never overwrite the federated run's.
"""

from __future__ import annotations

import time
from pathlib import Path

from fedmc_flwr.baselines import evaluate_dispatchers, format_table, summary_rows
from fedmc_flwr.config import ExperimentConfig, to_yaml
from fedmc_flwr.evaluation import EvalResult, evaluate
from fedmc_flwr.policies.ppo import ROUND_METRICS, PPOLearner
from fedmc_flwr.results import TIMING_COLUMNS, MetricsWriter, experiment_dir
from fedmc_flwr.seeds import learner_seed
from fedmc_flwr.sim.signals import region_catalogue

MODES = ("centralised", "local")


def _learners(cfg: ExperimentConfig, mode: str) -> dict[str, PPOLearner]:
    """Learners keyed by the metrics.csv client they train for ('all' or a region name)."""
    regions = list(range(cfg.world.regions))
    if mode == "centralised":
        return {"all": PPOLearner(cfg, regions, learner_seed(cfg.seed))}
    names = [region.name for region in region_catalogue(cfg.world.regions)]
    return {names[r]: PPOLearner(cfg, [r], learner_seed(cfg.seed, r)) for r in regions}


def _evaluate_learners(
    cfg: ExperimentConfig, learners: dict[str, PPOLearner], policy: str
) -> list[EvalResult]:
    """Centralised: the one learner on every region. Local: each region's own learner."""
    results = []
    for region in range(cfg.world.regions):
        learner = learners["all"] if "all" in learners else list(learners.values())[region]
        frozen = learner.policy(policy)
        results.append(evaluate(lambda sim, frozen=frozen: frozen, cfg, region))
    return results


def train(cfg: ExperimentConfig, mode: str) -> Path:
    """Train for cfg.train.rounds rounds, evaluating after each; return metrics.csv's path."""
    if mode not in MODES:
        raise ValueError(f"unknown training mode {mode!r}; expected one of {MODES}")
    policy = f"ppo-{mode}"
    out = experiment_dir(cfg.results_dir, f"{cfg.name}-{mode}")
    (out / "config.yaml").write_text(to_yaml(cfg))
    metrics = MetricsWriter(out / "metrics.csv")
    timing = MetricsWriter(out / "timing.csv", columns=TIMING_COLUMNS)
    region_names = [region.name for region in region_catalogue(cfg.world.regions)]
    key = {"experiment": cfg.name}

    print(f"[{policy}] evaluating the dispatchers on held-out seeds")
    dispatcher_rows = summary_rows(evaluate_dispatchers(cfg), region_names)
    learners = _learners(cfg, mode)
    print(
        f"[{policy}] {len(learners)} learner(s) x {cfg.ppo.num_envs} envs, "
        f"{cfg.train.rounds} rounds x {cfg.train.steps_per_round} steps per env"
    )
    learner_rows: list[dict] = []
    for rnd in range(1, cfg.train.rounds + 1):
        for client, learner in learners.items():
            start = time.perf_counter()
            stats = learner.train_round(cfg.train.steps_per_round)
            wall = time.perf_counter() - start
            row = {**key, "round": rnd, "phase": "train", "client": client, "policy": policy}
            steps = int(stats["env_steps"])
            metrics.write([{**row, "steps": steps, **{k: stats[k] for k in ROUND_METRICS}}])
            timing.write(
                [
                    {
                        **row,
                        "steps": steps,
                        "steps_per_second": stats["steps_per_second"],
                        "wall_time_s": wall,
                    }
                ]
            )
            print(
                f"[{policy}] round {rnd}/{cfg.train.rounds} {client}: "
                f"train reward {stats['reward']:.4f}  entropy {stats['entropy']:.3f}  "
                f"SPS {stats['steps_per_second']:,.0f}"
            )
        start = time.perf_counter()
        learner_rows = summary_rows(_evaluate_learners(cfg, learners, policy), region_names)
        wall = time.perf_counter() - start
        eval_key = {**key, "round": rnd, "phase": "eval"}
        metrics.write({**eval_key, **row} for row in [*dispatcher_rows, *learner_rows])
        overall = next(row for row in learner_rows if row["client"] == "all")
        timing.write(
            [
                {
                    **eval_key,
                    "client": "all",
                    "policy": policy,
                    "steps": overall["steps"],
                    "steps_per_second": overall["steps"] / wall,
                    "wall_time_s": wall,
                }
            ]
        )
        print(
            f"[{policy}] round {rnd}/{cfg.train.rounds} held-out reward "
            f"{overall['reward']:.4f} ± {overall['reward_ci95']:.4f}"
        )
    for client, learner in learners.items():
        name = policy if client == "all" else f"{policy}-{client}"
        learner.save(out / "checkpoints" / f"{name}.npz")
    print(format_table([*dispatcher_rows, *learner_rows]))
    print(f"wrote {out / 'metrics.csv'}")
    return out / "metrics.csv"
