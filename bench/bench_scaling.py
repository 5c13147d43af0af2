"""How a federated round grows with the estate, and what it holds in memory.

For each estate (regions x nodes per region), one `fedmc run` of `--config` (default
conf/huge.yaml: 8 worlds, 32-step rollouts, 64 steps a round, 2 rounds; its learner
settings whatever the estate) with `world.regions` and `world.nodes_per_region` set, one
virtual client per region in Flower's simulation engine (one CPU each: on two cores two
at a time, or all at once where the regions do not share out evenly, `runner.ray_cpus`;
the 3 x 6 row of docs/benchmarks.md was measured two at a time). Per round: the server's
fit and evaluate phases from timing.csv; the last round is the steady one (round 1
carries Ray's start and the learners' imitation).
Memory: every 0.5 s, the proportional set size (PSS, so shared pages count once) summed
over `fedmc run` and every process of its Flower family (the SuperLink, SuperExec, the
simulation, Ray and its workers, read from the run's `.fedmc-run.json`); the peak is
reported.

Every region's world holds and writes the whole estate (regions x nodes values a step),
so one region's round costs more as regions are added, and a round runs one learner per
region: the round's time grows about as regions^2 x nodes per region / cores once each
client's fixed costs are spread out. The growth is fitted by least squares on the log of
the steady round's time: log t = a + b log(regions) + c log(nodes per region), over the
estates measured (at least three); b and c are the exponents printed. The target, at the
largest estate: a round's training within `TARGET_TRAIN_S` seconds, peak memory under
`MEMORY_GOAL_GIB`.

`--table FILE` measures the estates of `TABLE_ESTATES` (unless `--estates` names others)
and writes the table into FILE between `BEGIN` and `END` (docs/benchmarks.md; `make
scaling`), so the document's figures are the run's own.

Prints a table, then one JSON line of the figures.

    python bench/bench_scaling.py [--regions 3 10 30 100 | --estates 3x6 1x1000]
        [--config conf/huge.yaml] [--set KEY=VALUE] [--table docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from fedmc_flwr.config import load_config
from fedmc_flwr.results import code_version

SAMPLE_S = 0.5
MEMORY_GOAL_GIB = 8.0
TARGET_TRAIN_S = 40.0
TABLE_ESTATES = ("3x6", "10x20", "20x50", "100x100", "100x100/2", "1x1000")
"""The estates of the generated table: small_demo's, large.yaml's, huge.yaml's, two between
and one region of 1,000 nodes; huge.yaml's also on 2 virtual clients (`fedmc run --nodes
2`, one per core), each serving 50 regions in turn: Flower's cost per client call paid 2
times a round instead of 100, against the same work per region."""
BEGIN, END = "<!-- scaling table: begin -->", "<!-- scaling table: end -->"


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


def run_one(
    config: Path, overrides: list[str], results: Path, clients: int
) -> tuple[list[dict], int, float]:
    """One `fedmc run` on `clients` virtual clients: its timing rows of the whole
    federation, peak PSS, wall seconds."""
    cfg = load_config(config, overrides)
    out = results / cfg.name
    sets = [arg for item in overrides for arg in ("--set", item)]
    fedmc = Path(sys.executable).parent / "fedmc"
    start = time.perf_counter()
    run = subprocess.Popen(
        [str(fedmc), "run", "--config", str(config), *sets, "--nodes", str(clients), "--overwrite"],
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


def parse_estate(text: str) -> tuple[int, int, int]:
    """'100x100' -> (100, 100, 100), '100x100/2' -> (100, 100, 2): regions, nodes per
    region, virtual clients (one per region unless given)."""
    shape, _, clients = text.lower().partition("/")
    try:
        regions, nodes = (int(part) for part in shape.split("x"))
        served = int(clients) if clients else regions
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"an estate is REGIONSxNODES or REGIONSxNODES/CLIENTS, got {text!r}"
        ) from None
    if regions < 1 or nodes < 1 or not 1 <= served <= regions:
        raise argparse.ArgumentTypeError(
            f"an estate needs >= 1 region and node, and 1 to regions clients, got {text!r}"
        )
    return regions, nodes, served


def measure(
    config: Path, extra: list[str], regions: int, nodes: int, clients: int, tmp: Path
) -> dict:
    """One estate's figures: round 1, the last round's training and evaluation, peak PSS."""
    overrides = [
        *extra,
        f"world.regions={regions}",
        f"world.nodes_per_region={nodes}",
        f"name=scale-{regions}x{nodes}-{clients}",
        f"results_dir={tmp}",
    ]
    rows, peak, wall = run_one(config, overrides, tmp, clients)
    last = max(int(r["round"]) for r in rows)
    phase = {(int(r["round"]), r["phase"]): float(r["wall_time_s"]) for r in rows}
    train, evaluate = phase[(last, "train")], phase[(last, "eval")]
    total = regions * nodes
    return {
        "regions": regions,
        "nodes_per_region": nodes,
        "nodes": total,
        "clients": clients,
        "round1_s": round(phase[(1, "train")] + phase[(1, "eval")], 2),
        "train_s": round(train, 2),
        "eval_s": round(evaluate, 2),
        "train_s_per_region_node_per_core": train / (regions * total / (os.cpu_count() or 1)),
        "peak_pss_gib": round(peak / 2**30, 2),
        "run_wall_s": round(wall, 1),
    }


def growth(figures: list[dict], key: str) -> dict[str, float] | None:
    """Least squares of log(figure) = a + b log(regions) + c log(nodes per region) over
    the estates run on one virtual client per region: the exponents b and c. None where
    the estates cannot separate them (fewer than three, or regions and nodes per region
    not varied independently)."""
    figures = [f for f in figures if f["clients"] == f["regions"]]
    if len(figures) < 3:
        return None
    design = np.array([[1.0, np.log(f["regions"]), np.log(f["nodes_per_region"])] for f in figures])
    if np.linalg.matrix_rank(design) < 3:
        return None
    target = np.log([max(f[key], 1e-3) for f in figures])
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    return {"regions": float(coef[1]), "nodes_per_region": float(coef[2])}


def table(figures: list[dict]) -> str:
    """The figures as a Markdown table."""
    lines = [
        "| estate | nodes | virtual clients | round 1 s | train s | eval s | peak memory GiB "
        "| run s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in figures:
        lines.append(
            f"| {f['regions']} x {f['nodes_per_region']} | {f['nodes']:,} | {f['clients']} "
            f"| {f['round1_s']:.1f} "
            f"| {f['train_s']:.1f} | {f['eval_s']:.1f} | {f['peak_pss_gib']:.2f} "
            f"| {f['run_wall_s']:.0f} |"
        )
    return "\n".join(lines)


def growth_line(fits: dict[str, dict[str, float] | None]) -> str:
    parts = [
        f"{what} time grows as regions^{fit['regions']:.2f} x nodes per region^"
        f"{fit['nodes_per_region']:.2f}"
        for what, fit in fits.items()
        if fit is not None
    ]
    return "; ".join(parts) if parts else "too few estates to fit the growth"


def write_table(doc: Path, block: str) -> None:
    """Replace what stands between BEGIN and END in `doc` with `block`."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc}: no scaling block ({BEGIN} ... {END}) to write into")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/huge.yaml"))
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument(
        "--regions", type=int, nargs="+", help="region counts, at the config's nodes per region"
    )
    shape.add_argument(
        "--estates",
        type=parse_estate,
        nargs="+",
        metavar="RxN",
        help="estates, e.g. 3x6 1x1000 100x100/2 (/2: on 2 virtual clients)",
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--table", type=Path, default=None, help=f"write the table into this file ({BEGIN})"
    )
    args = parser.parse_args()
    if args.table is not None and not args.table.is_file():
        parser.error(f"--table {args.table}: no such file")
    nodes = load_config(args.config, args.overrides).world.nodes_per_region
    if args.estates:
        estates = args.estates
    elif args.regions:
        estates = [(regions, nodes, regions) for regions in args.regions]
    elif args.table is not None:
        estates = [parse_estate(text) for text in TABLE_ESTATES]
    else:
        estates = [(regions, nodes, regions) for regions in (3, 10, 30, 100)]
    began, load_before = time.perf_counter(), os.getloadavg()[0]
    figures = []
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        for regions, per_region, clients in estates:
            figures.append(
                measure(args.config, args.overrides, regions, per_region, clients, Path(tmp))
            )
            print(
                f"done: {regions} x {per_region} on {clients} clients in "
                f"{figures[-1]['run_wall_s']:.0f} s "
                f"(load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    took, load_after = time.perf_counter() - began, os.getloadavg()[0]
    fits = {"training": growth(figures, "train_s"), "evaluation": growth(figures, "eval_s")}
    fitted = sum(f["clients"] == f["regions"] for f in figures)
    size = max(f["nodes"] for f in figures)
    largest = min((f for f in figures if f["nodes"] == size), key=lambda f: f["train_s"])
    met = largest["train_s"] <= TARGET_TRAIN_S and largest["peak_pss_gib"] < MEMORY_GOAL_GIB
    settings = ", ".join(args.overrides) or "as is"
    print(f"{args.config} ({settings}), {os.cpu_count()} cores")
    print(
        f"{'estate':>9} {'nodes':>6} {'clients':>7} {'round 1 s':>9} {'train s':>8} {'eval s':>7} "
        f"{'µs/(region·node/core)':>22} {'peak GiB':>8} {'run s':>6}"
    )
    for f in figures:
        estate = f"{f['regions']}x{f['nodes_per_region']}"
        print(
            f"{estate:>9} {f['nodes']:>6} {f['clients']:>7} {f['round1_s']:>9.1f} "
            f"{f['train_s']:>8.1f} "
            f"{f['eval_s']:>7.1f} {f['train_s_per_region_node_per_core'] * 1e6:>22.1f} "
            f"{f['peak_pss_gib']:>8.2f} {f['run_wall_s']:>6.0f}"
        )
    print(f"growth (least squares on log time, last round, {fitted} estates): {growth_line(fits)}")
    print(
        f"target at {largest['regions']} x {largest['nodes_per_region']} (best: "
        f"{largest['clients']} virtual clients): training <= "
        f"{TARGET_TRAIN_S:g} s a round and peak under {MEMORY_GOAL_GIB:g} GiB: "
        f"{'met' if met else 'NOT met'}"
    )
    print(f"load average {load_before:.2f} before, {load_after:.2f} after; {took:.0f} s in all")
    if args.table is not None:
        version = code_version()
        command = " ".join(["python bench/bench_scaling.py", *sys.argv[1:]])
        block = "\n\n".join(
            [
                f"Generated by `{command}` at commit {version['commit']}"
                f"{' (with local changes)' if version['dirty'] else ''} on "
                f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}, {os.cpu_count()} cores, "
                f"load average {load_before:.2f} before and {load_after:.2f} after; "
                f"{took / 60:.0f} min in all. `{args.config}` ({settings}), each estate's "
                "round 2 (train, eval) and its first round (Ray's start and imitation).",
                table(figures),
                f"Fitted on the {fitted} estates' round 2 on one virtual client per region "
                "(least squares of log time "
                f"on log regions and log nodes per region): {growth_line(fits)}.",
            ]
        )
        write_table(args.table, block)
        print(f"wrote {args.table}")
    print(
        json.dumps(
            {
                "bench": "scaling",
                "config": str(args.config),
                "overrides": args.overrides,
                "rows": figures,
                "growth": fits,
                "memory_goal_gib": MEMORY_GOAL_GIB,
                "target_train_s": TARGET_TRAIN_S,
                "targets_met": met,
                "wall_s": round(took, 1),
                "load_average_1min": [load_before, load_after],
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
