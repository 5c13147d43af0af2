"""How a federated round grows with the number of regions, and what it holds in memory.

For each region count, one `fedmc run` of `--config` (default conf/huge.yaml: 100 nodes
per region, 8 worlds, 64 steps per round) with `world.regions` set, one virtual client
per region in Flower's simulation engine (one CPU each, so two at a time on two cores).
Per round: the server's fit and evaluate phases from timing.csv; the last round is the
steady one (round 1 carries Ray's start). Memory: every 0.5 s, the proportional set
size (PSS, so shared pages count once) summed over `fedmc run` and every process of its
Flower family (the SuperLink, SuperExec, the simulation, Ray and its workers, read from
the run's `.fedmc-run.json`); the peak is reported.

Every region's world still holds and writes the whole estate (regions x nodes values a
step), so one region's round costs more as regions are added; the default two-tier
network's own work per decision grows as regions + nodes, while a flat MLP's grows as
regions x nodes. The table divides the round time by regions x estate size / cores.
The target, at the largest estate: a round's training within `TARGET_TRAIN_S` seconds,
peak memory under `MEMORY_GOAL_GIB`.

Prints a table, then one JSON line of the figures.

    python bench/bench_scaling.py [--regions 3 10 30 100] [--config conf/huge.yaml]
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

import psutil

from fedmc_flwr.config import load_config

SAMPLE_S = 0.5
MEMORY_GOAL_GIB = 8.0
TARGET_TRAIN_S = 40.0


def _pss(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except (psutil.Error, OSError):
            continue
    return total


def _family(registry: Path) -> set[int]:
    try:
        return {int(pid) for pid in json.loads(registry.read_text())["family"]}
    except (OSError, ValueError, KeyError):
        return set()


def run_one(config: Path, overrides: list[str], results: Path) -> tuple[list[dict], int, float]:
    """One `fedmc run`: its timing rows of the whole federation, peak PSS, wall seconds."""
    cfg = load_config(config, overrides)
    out = results / cfg.name
    sets = [arg for item in overrides for arg in ("--set", item)]
    fedmc = Path(sys.executable).parent / "fedmc"
    start = time.perf_counter()
    run = subprocess.Popen(
        [str(fedmc), "run", "--config", str(config), *sets, "--overwrite"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    family: set[int] = set()
    while run.poll() is None:
        family |= _family(out / ".fedmc-run.json")
        peak = max(peak, _pss({run.pid, *family}))
        time.sleep(SAMPLE_S)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"fedmc run failed ({run.returncode}): {run.stderr.read()[-2000:]}")
    with (out / "timing.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["client"] == "all"]
    return rows, peak, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/huge.yaml"))
    parser.add_argument("--regions", type=int, nargs="+", default=[3, 10, 30, 100])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    figures = []
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        for regions in args.regions:
            overrides = [
                *args.overrides,
                f"world.regions={regions}",
                f"name=scale-{regions}",
                f"results_dir={tmp}",
            ]
            cfg = load_config(args.config, overrides)
            rows, peak, wall = run_one(args.config, overrides, Path(tmp))
            last = max(int(r["round"]) for r in rows)
            phase = {(int(r["round"]), r["phase"]): float(r["wall_time_s"]) for r in rows}
            train, evaluate = phase[(last, "train")], phase[(last, "eval")]
            nodes = regions * cfg.world.nodes_per_region
            figures.append(
                {
                    "regions": regions,
                    "nodes": nodes,
                    "round1_s": round(phase[(1, "train")] + phase[(1, "eval")], 2),
                    "train_s": round(train, 2),
                    "eval_s": round(evaluate, 2),
                    "train_s_per_region_node_per_core": train
                    / (regions * nodes / (os.cpu_count() or 1)),
                    "peak_pss_gib": round(peak / 2**30, 2),
                    "run_wall_s": round(wall, 1),
                }
            )
            print(f"done: {regions} regions in {wall:.0f} s", flush=True)
    print(f"{args.config} ({', '.join(args.overrides) or 'as is'}), {os.cpu_count()} cores")
    print(
        f"{'regions':>7} {'nodes':>6} {'round 1 s':>9} {'train s':>8} {'eval s':>7} "
        f"{'µs/(region·node/core)':>22} {'peak GiB':>8} {'run s':>6}"
    )
    for f in figures:
        print(
            f"{f['regions']:>7} {f['nodes']:>6} {f['round1_s']:>9.1f} {f['train_s']:>8.1f} "
            f"{f['eval_s']:>7.1f} {f['train_s_per_region_node_per_core'] * 1e6:>22.1f} "
            f"{f['peak_pss_gib']:>8.2f} {f['run_wall_s']:>6.0f}"
        )
    largest = max(figures, key=lambda f: f["nodes"])
    met = largest["train_s"] <= TARGET_TRAIN_S and largest["peak_pss_gib"] < MEMORY_GOAL_GIB
    print(
        f"target at {largest['regions']} regions: training <= {TARGET_TRAIN_S:g} s a round "
        f"and peak under {MEMORY_GOAL_GIB:g} GiB: {'met' if met else 'NOT met'}"
    )
    print(
        json.dumps(
            {
                "bench": "scaling",
                "config": str(args.config),
                "overrides": args.overrides,
                "rows": figures,
                "memory_goal_gib": MEMORY_GOAL_GIB,
                "target_train_s": TARGET_TRAIN_S,
                "targets_met": met,
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
