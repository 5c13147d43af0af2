"""Flower's share of a round: the simulation engine versus the same work in one process.

Federated: `fedmc run` (its own SuperLink, one virtual client per region, one CPU each),
round wall time = the server's fit phase plus its evaluate phase, from timing.csv.
One process: the same per-region work (`train_region` with its state file, the same
aggregation, `evaluate_region`), regions one after another, timed round by round. Round 1
carries the start-up (Ray and actors on one side, imports and compilation on the other),
so the ratio is reported for the rounds after it. The simulation runs two clients at a
time on a 2-core machine, so a ratio under 1 is possible: it compares what a user waits
for, not CPU seconds.

Prints a table, then one JSON line of the figures.

    python bench/bench_federation.py [--config conf/small_demo.yaml] [--rounds 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fedmc_flwr.config import ExperimentConfig, load_config
from fedmc_flwr.federation.aggregation import RegionUpdate, aggregate
from fedmc_flwr.federation.client_app import evaluate_region, train_region
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.policies.ppo import STATISTICS

TARGET_RATIO = 1.3


def federated_phase_seconds(
    config: Path,
    overrides: list[str],
    results: Path,
    command: tuple[str, ...] = ("run",),
    env: dict[str, str] | None = None,
) -> dict[tuple[int, str], float]:
    """(round, phase) -> wall seconds of the whole federation's `train` and `eval` phases
    in a `fedmc run` (or another `fedmc` `command` that runs an experiment, e.g. `deploy`),
    its output kept out of the table."""
    fedmc = Path(sys.executable).parent / "fedmc"
    sets = [arg for item in [*overrides, f"results_dir={results}"] for arg in ("--set", item)]
    done = subprocess.run(
        [str(fedmc), *command, "--config", str(config), *sets],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"fedmc {command[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cfg = load_config(config, [*overrides, f"results_dir={results}"])
    with (results / cfg.name / "timing.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["client"] == "all"]
    return {(int(r["round"]), r["phase"]): float(r["wall_time_s"]) for r in rows}


def federated_round_seconds(config: Path, overrides: list[str], results: Path) -> list[float]:
    """Per-round wall seconds (training plus evaluation) of a `fedmc run`."""
    phases = federated_phase_seconds(config, overrides, results)
    rounds = max(rnd for rnd, _ in phases)
    return [phases[(r, "train")] + phases[(r, "eval")] for r in range(1, rounds + 1)]


def local_round_seconds(cfg: ExperimentConfig, state_dir: Path) -> list[float]:
    """Per-round wall seconds of the same rounds done in this process, region by region."""
    weights = initial_weights(cfg)
    seconds = []
    for rnd in range(1, cfg.train.rounds + 1):
        start = time.perf_counter()
        updates = []
        for region in range(cfg.world.regions):
            trained, stats = train_region(cfg, region, weights, rnd, state_dir)
            updates.append(RegionUpdate(region, trained, int(stats["env_steps"])))
        weights = aggregate(updates, weights, cfg.federation, len(STATISTICS))
        for region in range(cfg.world.regions):
            evaluate_region(cfg, region, weights)
        seconds.append(time.perf_counter() - start)
    return seconds


def round_bench_args(
    description: str, name: str
) -> tuple[argparse.Namespace, list[str], ExperimentConfig]:
    """`--config` and `--rounds` of a benchmark that compares rounds after the first; the
    overrides that name its experiment, and the config they give."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", type=Path, default=Path("conf/small_demo.yaml"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 carries the start-up)")
    overrides = [f"train.rounds={args.rounds}", f"name={name}"]
    return args, overrides, load_config(args.config, overrides)


def main() -> None:
    args, overrides, cfg = round_bench_args(__doc__.splitlines()[0], "bench_federation")
    with tempfile.TemporaryDirectory(prefix="bench-federation-") as tmp:
        federated = federated_round_seconds(args.config, overrides, Path(tmp) / "results")
        local = local_round_seconds(cfg, Path(tmp) / "local-state")
    ratios = [f / s for f, s in zip(federated, local, strict=True)]
    steady = float(np.mean(ratios[1:]))

    print(
        f"{cfg.name}: {cfg.world.regions} regions, {cfg.ppo.num_envs} envs x "
        f"{cfg.train.steps_per_round} steps per round per region"
    )
    print(f"{'round':>5}  {'simulation s':>12}  {'one process s':>13}  {'ratio':>6}")
    for k, (f, s, r) in enumerate(zip(federated, local, ratios, strict=True), start=1):
        print(f"{k:>5}  {f:>12.2f}  {s:>13.2f}  {r:>6.2f}")
    print(f"ratio after round 1: {steady:.2f} (goal < {TARGET_RATIO})")
    print(
        json.dumps(
            {
                "bench": "federation",
                "config": str(args.config),
                "rounds": args.rounds,
                "regions": cfg.world.regions,
                "simulation_round_s": [round(x, 3) for x in federated],
                "one_process_round_s": [round(x, 3) for x in local],
                "ratio_after_round_1": round(steady, 3),
                "goal_ratio": TARGET_RATIO,
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
