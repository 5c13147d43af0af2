"""Flower's deployment engine against its simulation engine, and round 1 against round 2.

The same config and seed run twice in one go: `fedmc run` (simulation engine, one virtual
client per region in Ray, one CPU each) and `fedmc deploy` (a SuperLink and one SuperNode
per region on 127.0.0.1, TLS and SuperNode authentication on). Round wall time = the
server's fit phase plus its evaluate phase, from each run's timing.csv. Each SuperNode's
ClientApps come from a launcher that imported the app once and forks per message
(`federation/forking_exec.py`), where Flower would start a fresh `flwr-clientapp` process;
the simulation engine keeps its Ray actors warm. The SuperNodes and the ServerApp poll
sooner than Flower's constants (`prompt_supernode.py`, `prompt_grid.py`), and a message's
arrays travel as one bundle (`federation/bundle.py`), so each hop moves a few objects
rather than two per array. Both runs must give the same metrics.csv, and this checks it.

Cold start: both runs start from an empty compiled-kernel cache of their own
(`FEDMC_CACHE_DIR`), as on a fresh machine, and the table gives each engine's round-1
training time over its round-2 training time. With `--warm-cache` both use the usual cache
instead, which skips minutes of compiling on a busy machine where only whether the bench
runs matters (the test suite's smoke run); the cold-start ratio then measures nothing.

The machine's speed drifts by a tenth or more over minutes, and the two runs of a pair are
minutes apart: `--repeats N` runs N pairs, the engines alternated, and gives the median of
the pairs' ratios beside each.

Prints a table, then one JSON line of the figures.

    python bench/bench_engines.py [--config conf/small_demo.yaml] [--rounds 3] [--repeats 1]
        [--warm-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path

import numpy as np
from bench_federation import federated_phase_seconds, round_bench_args

GOAL_RATIO = 1.3
COLD_GOAL = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-cache", action="store_true", help="skip the cold start")
    parser.add_argument(
        "--repeats", type=int, default=1, help="pairs of runs, the engines alternated"
    )
    args, overrides, cfg = round_bench_args(parser, "bench_engines")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    rounds = range(1, args.rounds + 1)
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        runs = []  # per repeat: engine -> (round, phase) -> seconds
        for repeat in range(args.repeats):
            phases = {}
            for engine, command in (("sim", ("run",)), ("deploy", ("deploy",))):
                where = Path(tmp) / f"{engine}-{repeat}"
                empty = {"FEDMC_CACHE_DIR": str(where / "numba")}
                env = {**os.environ, **({} if args.warm_cache else empty)}
                phases[engine] = federated_phase_seconds(
                    args.config, overrides, where, command, env
                )
            runs.append(phases)
        same = all(
            (Path(tmp) / "sim-0" / cfg.name / t).read_bytes()
            == (Path(tmp) / f"{engine}-{repeat}" / cfg.name / t).read_bytes()
            for t in ("metrics.csv", "per_seed.csv")
            for engine in ("sim", "deploy")
            for repeat in range(args.repeats)
        )
    seconds = [
        {e: [run[e][(r, "train")] + run[e][(r, "eval")] for r in rounds] for e in run}
        for run in runs
    ]
    ratios = [[d / s for d, s in zip(run["deploy"], run["sim"], strict=True)] for run in seconds]
    steady_each = [float(np.mean(r[1:])) for r in ratios]
    steady = float(np.median(steady_each))
    cold = {
        e: float(np.median([run[e][(1, "train")] / run[e][(2, "train")] for run in runs]))
        for e in ("sim", "deploy")
    }
    print(f"{cfg.name}: {cfg.world.regions} regions, {args.rounds} rounds, same seed")
    print(f"{'run':>3}  {'round':>5}  {'simulation s':>12}  {'deployment s':>12}  {'ratio':>6}")
    for k, (run, ratio) in enumerate(zip(seconds, ratios, strict=True), start=1):
        for r, (s, d, q) in enumerate(zip(run["sim"], run["deploy"], ratio, strict=True), start=1):
            print(f"{k:>3}  {r:>5}  {s:>12.2f}  {d:>12.2f}  {q:>6.2f}")
    each = ", ".join(f"{x:.2f}" for x in steady_each)
    print(
        f"deployment / simulation after round 1: {steady:.2f} "
        f"(median of {args.repeats} runs: {each}; goal <= {GOAL_RATIO})"
    )
    print(f"identical metrics.csv and per_seed.csv: {same}")
    print(
        f"round 1 / round 2 training, {'warm' if args.warm_cache else 'empty'} kernel cache: "
        f"simulation {cold['sim']:.2f}, "
        f"deployment {cold['deploy']:.2f} (goal <= {COLD_GOAL})"
    )
    print(
        json.dumps(
            {
                "bench": "engines",
                "config": str(args.config),
                "rounds": args.rounds,
                "regions": cfg.world.regions,
                "repeats": args.repeats,
                "simulation_round_s": [[round(x, 3) for x in run["sim"]] for run in seconds],
                "deployment_round_s": [[round(x, 3) for x in run["deploy"]] for run in seconds],
                "ratio_after_round_1_each": [round(x, 3) for x in steady_each],
                "ratio_after_round_1": round(steady, 3),
                "goal_ratio": GOAL_RATIO,
                "identical_tables": same,
                "round1_over_round2_training": {k: round(v, 3) for k, v in cold.items()},
                "cold_goal": COLD_GOAL,
                "warm_cache": args.warm_cache,
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
