"""Hostile regions against the aggregation rules, paired on the same held-out worlds.

Each scenario trains one experiment for its rounds through the plain functions the Flower
apps call (`train_region`, `faults.corrupt`, `aggregation.screen`, `aggregation.aggregate`,
`evaluate_region`), with the given regions sending a faulty reply in every round, and
compares the final global policy with clean FedAvg's on the same test worlds (every
region's held-out seeds): the mean reward, its paired difference and the turned-away
updates (the `failed` rows a Flower run would write), counted separately for hostile
and honest regions. Round 1's honest training is shared by every scenario (it starts
from the same weights), so only the rounds that differ are trained again.

    python bench/bench_byzantine.py --config conf/small_demo.yaml \\
        --scenario none:mean --scenario sign-flip:median --scenario sign-flip:multi-krum \\
        --hostile 2 --scale 10

A scenario is `fault:aggregation` (fault `none` for a clean run; the first scenario
is the reference every other is paired with). Prints one row per scenario, as Markdown,
then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from fedmc_flwr.config import ExperimentConfig, FaultConfig, load_config
from fedmc_flwr.federation import faults
from fedmc_flwr.federation.aggregation import RegionUpdate, Weights, aggregate, screen
from fedmc_flwr.federation.client_app import evaluate_region, train_region
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.policies.moments import MOMENT_ARRAYS
from fedmc_flwr.policies.ppo import STATISTICS


def _train(cfg: ExperimentConfig, weights: Weights, rnd: int, state: Path) -> list[RegionUpdate]:
    updates = []
    for region in range(cfg.world.regions):
        trained, stats = train_region(cfg, region, weights, rnd, state)
        updates.append(RegionUpdate(region, trained, int(stats["env_steps"])))
    return updates


def _attacked(
    updates: list[RegionUpdate], start: Weights, kind: str, hostile: list[int], scale: float
) -> list[RegionUpdate]:
    """The replies as the hostile regions' faults would send them."""
    if kind == "none":
        return updates
    network = len(start) - len(STATISTICS) * MOMENT_ARRAYS
    out = list(updates)
    for region in hostile:
        fault = FaultConfig(region=region, kind=kind, scale=scale)
        sent, steps = faults.corrupt(
            fault, out[region].weights, out[region].num_examples, start, network
        )
        out[region] = RegionUpdate(region, sent, steps)
    return out


def _per_seed(cfg: ExperimentConfig, weights: Weights) -> np.ndarray:
    """Held-out reward of every test world, regions one after another (paired by index)."""
    return np.concatenate(
        [evaluate_region(cfg, r, weights)[0].per_seed_reward for r in range(cfg.world.regions)]
    )


def run(
    cfg: ExperimentConfig, scenarios: list[str], hostile: list[int], scale: float, tmp: Path
) -> list[dict[str, object]]:
    start = initial_weights(cfg)
    statistics = len(STATISTICS)
    first = _train(cfg, start, 1, tmp / "round1")
    rows: list[dict[str, object]] = []
    reference: np.ndarray | None = None
    for scenario in scenarios:
        kind, rule = scenario.split(":")
        federation = replace(cfg.federation, aggregation=rule)
        state = tmp / scenario.replace(":", "-")
        shutil.copytree(tmp / "round1", state)
        began = time.perf_counter()
        weights, honest_out, hostile_out = start, 0, 0
        for rnd in range(1, cfg.train.rounds + 1):
            trained = first if rnd == 1 else _train(cfg, weights, rnd, state)
            replies = _attacked(trained, weights, kind, hostile, scale)
            kept, rejected = screen(replies, weights, federation, statistics)
            hostile_out += sum(1 for r in rejected if r in hostile and kind != "none")
            honest_out += sum(1 for r in rejected if r not in hostile or kind == "none")
            weights = aggregate(kept, weights, federation, statistics)
        rewards = _per_seed(cfg, weights)
        if reference is None:
            reference = rewards
        diff = rewards - reference
        half = 1.96 * diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else 0.0
        clean = float(reference.mean())
        rows.append(
            {
                "attack": kind,
                "rule": rule,
                "reward": round(float(rewards.mean()), 4),
                "vs_clean_pct": round(100 * (rewards.mean() - clean) / abs(clean), 1),
                "paired_diff": round(float(diff.mean()), 4),
                "ci95": round(float(half), 4),
                "hostile_rejected": f"{hostile_out}/{len(hostile) * cfg.train.rounds}"
                if kind != "none"
                else "-",
                "honest_rejected": f"{honest_out}/{cfg.world.regions * cfg.train.rounds}",
                "wall_s": round(time.perf_counter() - began, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/small_demo.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--scenario", action="append", required=True, help="fault:aggregation")
    parser.add_argument("--hostile", type=int, action="append", required=True)
    parser.add_argument("--scale", type=float, default=10.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.config, args.overrides)
    with tempfile.TemporaryDirectory(prefix="bench-byzantine-") as tmp:
        rows = run(cfg, args.scenario, args.hostile, args.scale, Path(tmp))
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in columns) + " |")
    figures = {"bench": "byzantine", "config": str(args.config), "overrides": args.overrides}
    print(json.dumps(figures | {"rows": rows}))


if __name__ == "__main__":
    main()
