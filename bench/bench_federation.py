"""A federated round's overhead in Flower's simulation engine, and what many short rounds cost.

Overhead: for each `--config`, one `fedmc run` (its own SuperLink, one virtual client per
region), and from its timing.csv, for every round:

- round: the server's training phase plus its evaluation phase, each from asking the
  clients to having aggregated their replies;
- training: the sum over regions of each one's local PPO (`train_round` alone: not the
  learner's building, loading or saving, nor Flower's messages);
- ideal: that training spread over the regions that train at once (`workers`: the
  regions, at most as many as Ray's CPUs, `runner.ray_cpus`), as if a round were only
  its regions' training with every core busy. With more actors than cores a region's
  time includes its waits for a core, so dividing by the actors gives its share of the
  cores;
- overhead: round minus ideal; of it, evaluation is the whole evaluation phase (the
  global policy on each region's held-out worlds, every round), the rest is Flower's
  messages, the clients' set-up, the server's work and the cores left idle when the
  regions do not share out evenly.

Round 1 also carries the start of Ray and of the actors, so the summary is over the
rounds after it.

Schedule (`--schedule`, on the first config): the same total environment steps in 4x the
rounds, each a quarter of the steps (`train.rounds` x4, `train.steps_per_round` /4),
against the config as given: the wall time of the whole `fedmc run` and of its rounds
(the sum of every round's, round 1's start-up included). Goal: 4x the rounds cost at
most 1.25x. With `--against REV` both schedules also run with git revision REV's package,
alternating (REV's, then this checkout's, for each schedule), so that before and after
are measured side by side under the same load, and the ratio of this checkout's 4x-rounds
run over REV's run as given is reported too.

The machine's load average is printed before and after: figures move with whatever else
runs on the machine.

Prints a table per config, then one JSON line of the figures.

    python bench/bench_federation.py [--config conf/small_demo.yaml conf/many_small_regions.yaml]
        [--rounds N] [--no-schedule] [--against REV]
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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedmc_flwr.config import ExperimentConfig, load_config
from fedmc_flwr.federation.runner import machine_cores, ray_cpus

REPO = Path(__file__).resolve().parents[1]
CONFIGS = (REPO / "conf" / "small_demo.yaml", REPO / "conf" / "many_small_regions.yaml")
MORE_ROUNDS = 4
"""The schedule's factor: rounds times this, steps per round divided by it."""
GOAL_RATIO = 1.25
"""The schedule's goal: 4x the rounds cost at most this times the config as given."""


def fedmc_run(
    config: Path,
    overrides: list[str],
    results: Path,
    command: tuple[str, ...] = ("run",),
    env: Mapping[str, str] | None = None,
) -> tuple[ExperimentConfig, float]:
    """One `fedmc` `command` that runs an experiment (`run`, `deploy`) with its results
    under `results`, its output kept out of the table: the config it ran and its wall
    seconds."""
    fedmc = Path(sys.executable).parent / "fedmc"
    items = [*overrides, f"results_dir={results}"]
    sets = [arg for item in items for arg in ("--set", item)]
    start = time.perf_counter()
    done = subprocess.run(
        [str(fedmc), *command, "--config", str(config), *sets],
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"fedmc {command[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return load_config(config, items), wall


def timing_rows(cfg: ExperimentConfig) -> list[dict[str, str]]:
    """The timing.csv rows of the run of `cfg`."""
    with (Path(cfg.results_dir) / cfg.name / "timing.csv").open() as handle:
        return list(csv.DictReader(handle))


def phase_seconds(rows: list[dict[str, str]]) -> dict[tuple[int, str], float]:
    """(round, phase) -> wall seconds of the whole federation's `train` and `eval` phases."""
    return {
        (int(r["round"]), r["phase"]): float(r["wall_time_s"]) for r in rows if r["client"] == "all"
    }


def federated_phase_seconds(
    config: Path,
    overrides: list[str],
    results: Path,
    command: tuple[str, ...] = ("run",),
    env: Mapping[str, str] | None = None,
) -> dict[tuple[int, str], float]:
    """(round, phase) -> wall seconds of the `train` and `eval` phases of one `fedmc`
    `command` (`fedmc_run`)."""
    cfg, _ = fedmc_run(config, overrides, results, command, env)
    return phase_seconds(timing_rows(cfg))


@dataclass(frozen=True)
class Round:
    """One round's figures (see the module docstring)."""

    round: int
    wall_s: float
    training_s: float
    ideal_s: float
    eval_s: float

    @property
    def overhead_s(self) -> float:
        return self.wall_s - self.ideal_s


def rounds_of(rows: list[dict[str, str]], workers: int) -> list[Round]:
    """Each round of a run's timing.csv `rows`, its regions' training spread over
    `workers` regions at once."""
    phases = phase_seconds(rows)
    training: dict[int, float] = {}
    for row in rows:
        if row["phase"] == "train" and row["client"] != "all":
            rnd = int(row["round"])
            training[rnd] = training.get(rnd, 0.0) + float(row["wall_time_s"])
    return [
        Round(
            rnd,
            phases[(rnd, "train")] + phases[(rnd, "eval")],
            training[rnd],
            training[rnd] / workers,
            phases[(rnd, "eval")],
        )
        for rnd in sorted(training)
    ]


def workers_of(cfg: ExperimentConfig, cores: int) -> int:
    """How many regions train at once in `fedmc run` (one virtual client per region)."""
    return min(cfg.world.regions, ray_cpus(cfg.world.regions, cores))


def overhead_table(cfg: ExperimentConfig, rounds: list[Round], workers: int) -> str:
    """The rounds of one run as a table, with the mean over the rounds after the first."""
    lines = [
        f"{cfg.name}: {cfg.world.regions} regions x {cfg.world.nodes_per_region} nodes, "
        f"{cfg.ppo.num_envs} envs x {cfg.train.steps_per_round} steps a round, "
        f"{workers} regions at once",
        f"{'round':>5}  {'round s':>8}  {'training s':>10}  {'ideal s':>8}  "
        f"{'overhead s':>10}  {'of it eval s':>12}  {'overhead/ideal':>14}",
    ]
    for r in rounds:
        lines.append(
            f"{r.round:>5}  {r.wall_s:>8.2f}  {r.training_s:>10.2f}  {r.ideal_s:>8.2f}  "
            f"{r.overhead_s:>10.2f}  {r.eval_s:>12.2f}  {r.overhead_s / r.ideal_s:>14.2f}"
        )
    later = summary(rounds)
    lines.append(
        f"after round 1, a round: {later['round_s']:.2f} s, ideal {later['ideal_s']:.2f} s, "
        f"overhead {later['overhead_s']:.2f} s ({later['overhead_per_ideal']:.2f}x the ideal), "
        f"of it evaluation {later['eval_s']:.2f} s"
    )
    return "\n".join(lines)


def summary(rounds: list[Round]) -> dict[str, float]:
    """Means over the rounds after the first (round 1 carries the start-up)."""
    later = rounds[1:] or rounds
    means = {
        "round_s": float(np.mean([r.wall_s for r in later])),
        "training_s": float(np.mean([r.training_s for r in later])),
        "ideal_s": float(np.mean([r.ideal_s for r in later])),
        "overhead_s": float(np.mean([r.overhead_s for r in later])),
        "eval_s": float(np.mean([r.eval_s for r in later])),
    }
    means["overhead_per_ideal"] = means["overhead_s"] / means["ideal_s"]
    return {k: round(v, 3) for k, v in means.items()}


def more_rounds(cfg: ExperimentConfig) -> list[str]:
    """Overrides for the same total steps in MORE_ROUNDS x the rounds."""
    if cfg.train.steps_per_round % MORE_ROUNDS:
        raise SystemExit(
            f"{cfg.name}: train.steps_per_round ({cfg.train.steps_per_round}) does not divide "
            f"by {MORE_ROUNDS}"
        )
    return [
        f"train.rounds={cfg.train.rounds * MORE_ROUNDS}",
        f"train.steps_per_round={cfg.train.steps_per_round // MORE_ROUNDS}",
    ]


@dataclass(frozen=True)
class Timed:
    """A run's wall time, whole and its rounds', and its rounds' ideal (`Round`) where
    known how many regions trained at once (this checkout's runs)."""

    run_s: float
    rounds_s: float
    ideal_s: float | None = None

    @staticmethod
    def of(cfg: ExperimentConfig, run_s: float, workers: int | None) -> Timed:
        rows = timing_rows(cfg)
        rounds_s = sum(phase_seconds(rows).values())
        if workers is None:
            return Timed(run_s, rounds_s)
        return Timed(run_s, rounds_s, sum(r.ideal_s for r in rounds_of(rows, workers)))


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def with_package(tree: Path) -> dict[str, str]:
    """The environment of a `fedmc` process that imports the package from `tree`."""
    return {**os.environ, "PYTHONPATH": str(tree)}


def export_tree(rev: str, into: Path) -> Path:
    """Revision `rev`'s package and pyproject.toml (the Flower app's config) under `into`."""
    from bench_sim import export_revision  # only here: it loads the simulator's kernels

    export_revision(rev, into)
    pyproject = subprocess.run(
        ["git", "show", f"{rev}:pyproject.toml"], cwd=REPO, capture_output=True, check=True
    ).stdout
    (into / "pyproject.toml").write_bytes(pyproject)
    return into


def schedule(
    config: Path,
    given: tuple[ExperimentConfig, Timed],
    overrides: list[str],
    tmp: Path,
    against: str | None,
) -> dict[str, object]:
    """The config as given against 4x the rounds (see the module docstring); `given` is
    this checkout's run of it, made already. With `against`, REV's two runs and this
    checkout's 4x run alternate."""
    cfg, _ = given
    more = [*overrides, *more_rounds(cfg)]
    trees = {"this": REPO}
    if against:
        trees[against] = export_tree(against, tmp / "against")
    timed: dict[tuple[str, str], Timed] = {("this", "given"): given[1]}
    for label, extra in (("given", overrides), ("4x", more)):
        for tree_label, tree in trees.items():
            if (tree_label, label) in timed:
                continue
            ran, wall = fedmc_run(
                config, extra, tmp / f"{tree_label}-{label}", env=with_package(tree)
            )
            workers = workers_of(ran, machine_cores()) if tree == REPO else None
            timed[(tree_label, label)] = Timed.of(ran, wall, workers)
            if tree_label == "this" and label == "4x":
                _check_same_steps(cfg, ran)
    figures: dict[str, object] = {
        f"{tree}_{label}": {
            "run_s": round(t.run_s, 2),
            "rounds_s": round(t.rounds_s, 2),
            "ideal_s": None if t.ideal_s is None else round(t.ideal_s, 2),
        }
        for (tree, label), t in timed.items()
    }
    lines = [f"{cfg.name}: {MORE_ROUNDS}x the rounds, a quarter of the steps each"]
    lines.append(
        f"{'package':>12}  {'schedule':>9}  {'run s':>7}  {'rounds s':>8}  {'ideal s':>8}"
        f"  {'rounds/ideal':>12}"
    )
    for (tree, label), t in timed.items():
        ideal = (
            ("-", "-")
            if t.ideal_s is None
            else (f"{t.ideal_s:.1f}", f"{t.rounds_s / t.ideal_s:.2f}")
        )
        lines.append(
            f"{tree:>12}  {label:>9}  {t.run_s:>7.1f}  {t.rounds_s:>8.1f}  {ideal[0]:>8}"
            f"  {ideal[1]:>12}"
        )
    pairs = [("this", "this")] + ([(against, against), ("this", against)] if against else [])
    for new, old in pairs:
        more_t, base = timed[(new, "4x")], timed[(old, "given")]
        key = f"ratio_{new}_4x_over_{old}_given"
        figures[key] = {
            "run": round(more_t.run_s / base.run_s, 3),
            "rounds": round(more_t.rounds_s / base.rounds_s, 3),
        }
        lines.append(
            f"{new} 4x over {old} as given: {more_t.run_s / base.run_s:.2f} (whole run), "
            f"{more_t.rounds_s / base.rounds_s:.2f} (rounds) (goal <= {GOAL_RATIO})"
        )
    per_ideal = [
        t.rounds_s / (t.ideal_s or 1.0) for t in (timed[("this", "4x")], timed[("this", "given")])
    ]
    steady = per_ideal[0] / per_ideal[1]
    figures["ratio_this_4x_over_this_given_per_ideal"] = round(steady, 3)
    lines.append(
        f"this 4x over this as given, each run's rounds over its ideal: {steady:.2f} "
        "(less moved by the machine's load than the wall times)"
    )
    print("\n".join(lines))
    return figures


def _check_same_steps(given: ExperimentConfig, more: ExperimentConfig) -> None:
    total = given.train.rounds * given.train.steps_per_round
    if more.train.rounds * more.train.steps_per_round != total:
        raise AssertionError(f"{more.name}: the 4x schedule trains a different total")


def round_bench_args(
    parser: argparse.ArgumentParser, name: str
) -> tuple[argparse.Namespace, list[str], ExperimentConfig]:
    """`--config` and `--rounds` of a benchmark that compares rounds after the first, beside
    the arguments `parser` has already; the overrides that name its experiment, and the
    config they give."""
    parser.add_argument("--config", type=Path, default=Path("conf/small_demo.yaml"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 carries the start-up)")
    overrides = [f"train.rounds={args.rounds}", f"name={name}"]
    return args, overrides, load_config(args.config, overrides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, nargs="+", default=list(CONFIGS))
    parser.add_argument(
        "--rounds", type=int, help="rounds of every run as given (default: each config's own)"
    )
    parser.add_argument(
        "--no-schedule", action="store_true", help="only the overhead, not 4x the rounds"
    )
    parser.add_argument("--against", metavar="REV", help="the schedule beside git revision REV")
    args = parser.parse_args()
    if args.rounds is not None and args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 carries the start-up)")
    cores = machine_cores()
    figures: dict[str, object] = {"bench": "federation", "load_average_before": load_average()}
    overrides = [] if args.rounds is None else [f"train.rounds={args.rounds}"]
    with tempfile.TemporaryDirectory(prefix="bench-federation-") as tmp:
        configs = []
        for k, config in enumerate(args.config):
            cfg, wall = fedmc_run(
                config, overrides, Path(tmp) / f"overhead-{k}", env=with_package(REPO)
            )
            workers = workers_of(cfg, cores)
            rounds = rounds_of(timing_rows(cfg), workers)
            print(overhead_table(cfg, rounds, workers), end="\n\n")
            configs.append((config, cfg, wall))
            figures[cfg.name] = {
                "config": str(config),
                "regions": cfg.world.regions,
                "workers": workers,
                "rounds": [
                    {
                        "round": r.round,
                        "round_s": round(r.wall_s, 3),
                        "training_s": round(r.training_s, 3),
                        "ideal_s": round(r.ideal_s, 3),
                        "overhead_s": round(r.overhead_s, 3),
                        "eval_s": round(r.eval_s, 3),
                    }
                    for r in rounds
                ],
                "after_round_1": summary(rounds),
            }
        if not args.no_schedule:
            config, cfg, wall = configs[0]
            figures["schedule"] = {
                "config": str(config),
                **schedule(
                    config,
                    (cfg, Timed.of(cfg, wall, workers_of(cfg, cores))),
                    overrides,
                    Path(tmp),
                    args.against,
                ),
            }
    figures |= {
        "goal_ratio": GOAL_RATIO,
        "load_average_after": load_average(),
        "machine": platform.machine(),
        "cores": cores,
    }
    print(f"load average before {figures['load_average_before']}, after {load_average()}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
