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

Prints a table, then one JSON line of the figures.

    python bench/bench_engines.py [--config conf/small_demo.yaml] [--rounds 3] [--warm-cache]
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
    args, overrides, cfg = round_bench_args(parser, "bench_engines")
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        phases = {}
        for engine, command in (("sim", ("run",)), ("deploy", ("deploy",))):
            empty = {"FEDMC_CACHE_DIR": str(Path(tmp) / f"numba-{engine}")}
            env = {**os.environ, **({} if args.warm_cache else empty)}
            phases[engine] = federated_phase_seconds(
                args.config, overrides, Path(tmp) / engine, command, env
            )
        simulation, deployment = (
            [phases[e][(r, "train")] + phases[e][(r, "eval")] for r in range(1, args.rounds + 1)]
            for e in ("sim", "deploy")
        )
        cold = {e: phases[e][(1, "train")] / phases[e][(2, "train")] for e in phases}
        same = all(
            (Path(tmp) / "sim" / cfg.name / t).read_bytes()
            == (Path(tmp) / "deploy" / cfg.name / t).read_bytes()
            for t in ("metrics.csv", "per_seed.csv")
        )
    ratios = [d / s for d, s in zip(deployment, simulation, strict=True)]
    steady = float(np.mean(ratios[1:]))
    print(f"{cfg.name}: {cfg.world.regions} regions, {args.rounds} rounds, same seed")
    print(f"{'round':>5}  {'simulation s':>12}  {'deployment s':>12}  {'ratio':>6}")
    for k, (s, d, r) in enumerate(zip(simulation, deployment, ratios, strict=True), start=1):
        print(f"{k:>5}  {s:>12.2f}  {d:>12.2f}  {r:>6.2f}")
    print(f"deployment / simulation after round 1: {steady:.2f} (goal <= {GOAL_RATIO})")
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
                "simulation_round_s": [round(x, 3) for x in simulation],
                "deployment_round_s": [round(x, 3) for x in deployment],
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
