"""The learner against the exact optimum, on estates where the optimum is known.

Jobs arrive as one Poisson stream and are dispatched on arrival to K exponential FCFS
servers of different speeds. There the queue lengths are a Markov decision process, and
`fedmc_flwr/sim/optimum.py` computes the dispatch policy of least mean response time
exactly (relative value iteration on the chain truncated at N jobs a queue), and
evaluates SED, JSQ and uniform random on the same chain. Mean response times are in units
of the fastest server's mean service time. Two parts:

1. The table (`--part table`): 2, 3 and 4 servers at speed ratios 2:1, 5:1 and 10:1
   (two servers r:1; three and four as one fast server and the rest slow, r:1:1(:1), and
   as geometric speeds from r down to 1) and loads 0.5, 0.7 and 0.9: the optimum and each
   rule's gap to it. Every case is solved at N and at 2N jobs a queue; the table gives
   the 2N values and the largest change of any of them between N and 2N. Uniform random
   is the closed form of independent M/M/1 queues ("unstable" where a slow server gets
   more than it can serve).
2. The learner (`--part learner`), on each case of `LEARNER_CASES`, in `MultiCloudSim`
   made that queueing system (conf/optimum.yaml at the case's speeds and load: one
   region, Poisson arrivals, exponential sizes, no other tenants, network, outages or
   daily cycles, a reward of latency alone, queues exactly as deep as the solver's 2N,
   so the world is the solver's chain):
   - first the world against the solver: SED, JSQ and the optimal policy (looked up from
     the solver's table by the observed queue lengths) on the test worlds, each world
     mean with its 95% interval beside the exact value;
   - then the learner `fedmc run` trains (`--learner-config`, by default the CLI's own
     default config: its `ppo` section, the same config object `fedmc run` reads) on
     conf/optimum.yaml's budget, federated as a one-region `fedmc run` is (the
     federation's own pieces, `experiments/speedup.federate`), once per training seed
     (`--seeds`). Its greedy policy at the **last round** is judged on the test worlds,
     paired world by world with the optimum, SED and JSQ: the mean over the seeds and
     the worst seed. No round is picked by its distance to the optimum.
     `--learner-config conf/optimum_tuned.yaml` trains the settings tuned for these worlds
     instead (an SED warm start, gamma 0.99, a larger entropy bonus).

Each part writes its own folder of results/optimum/ (`--out`), `table/` and `learner/`:
summary.md (its tables, for docs/results.md), figures.json (every figure) and
provenance.json (command, commit, date). Prints the tables, the load average, then one
JSON line. The table takes about an hour on a quiet 2-core machine (its four-server
cases most of it); the learner about two minutes a case and seed (`--jobs` runs them in
parallel processes).

    python bench/bench_optimum.py [--part all|table|learner] [--servers 2 3 4]
        [--ratios 2 5 10] [--loads 0.5 0.7 0.9]
        [--cases NAME ...] [--seeds 0 1 2] [--jobs 1]
        [--learner-config conf/small_demo.yaml]
        [--out results/optimum] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from fedmc_flwr.analysis.statistics import Estimate, stratified_mean
from fedmc_flwr.cli import DEFAULT_CONFIG
from fedmc_flwr.config import ExperimentConfig, learner_plan, load_config
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.experiments.speedup import federate
from fedmc_flwr.policies.base import PolicyFactory
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import record_provenance
from fedmc_flwr.seeds import learner_seed
from fedmc_flwr.sim.optimum import (
    QueueingSystem,
    TableDispatcher,
    optimal,
    sed_slower_ties,
    split_response,
)
from fedmc_flwr.sim.optimum import evaluate as solve

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "conf" / "optimum.yaml"
RATIOS = (2.0, 5.0, 10.0)
LOADS = (0.5, 0.7, 0.9)
BASE_CAPS = {2: 40, 3: 20, 4: 12}
"""N, jobs a queue, by number of servers: each case is solved at N and 2N."""
TARGET_GAP = 0.02
"""The learner's target: within 2% of the optimum's mean response time on each case."""
RULE_NAMES = ("sed", "jsq")
SED_SLOWER = "sed-slower-ties"
"""SED with ties sent to the slower server, run in the world as a policy array."""
BEHIND_SED = ("minus_sed_low", "minus_sed_slower_ties_low")
"""A seed's lower 95% bounds of learner - SED under each tie rule: above 0, it is behind."""


@dataclass(frozen=True)
class Case:
    """One queueing system: its servers' speeds (fastest first) and its load."""

    family: str
    speeds: tuple[float, ...]
    load: float

    @property
    def name(self) -> str:
        ratio = self.speeds[0] / self.speeds[-1]
        return f"{len(self.speeds)}x {self.family} {ratio:g}:1 @ {self.load:g}"

    @property
    def caps(self) -> int:
        """The truncation the results are read at (2N)."""
        return 2 * BASE_CAPS[len(self.speeds)]

    def system(self, caps: int | None = None) -> QueueingSystem:
        return QueueingSystem.at_load(self.speeds, self.load, caps or self.caps)

    def in_fastest(self, mean_response: float) -> float:
        """A mean response time in the solver's unit (speed 1) over the fastest server's
        mean service time."""
        return mean_response * max(self.speeds)


def speeds_of(family: str, servers: int, ratio: float) -> tuple[float, ...]:
    """'one fast': r, 1, 1, ...; 'geometric': r down to 1 in equal ratios."""
    if family == "one fast":
        return (ratio,) + (1.0,) * (servers - 1)
    return tuple(float(ratio ** (k / (servers - 1))) for k in range(servers - 1, -1, -1))


def table_cases(
    servers: Sequence[int], ratios: Sequence[float] = RATIOS, loads: Sequence[float] = LOADS
) -> list[Case]:
    families = {2: ("one fast",), 3: ("one fast", "geometric"), 4: ("one fast", "geometric")}
    return [
        Case(family, speeds_of(family, k, ratio), load)
        for k in servers
        for family in families[k]
        for ratio in ratios
        for load in loads
    ]


LEARNER_CASES = [
    *(Case("one fast", speeds_of("one fast", 2, r), load) for r in RATIOS for load in LOADS),
    *(Case("one fast", speeds_of("one fast", k, 10.0), 0.7) for k in (3, 4)),
]
"""Where the learner is judged: two servers at every ratio and load of the table, and
three and four at 10:1 and load 0.7, where SED falls 19% and 28% behind the optimum."""


# --- part 1: the solver's table ------------------------------------------------------------


def solve_case(case: Case) -> dict:
    """The optimum and each rule at N and 2N; the 2N figures and the largest change."""
    start = time.perf_counter()
    values = {}
    for caps in (case.caps // 2, case.caps):
        system = case.system(caps)
        best = optimal(system)
        values[caps] = {"optimal": best.mean_response} | {
            rule: solve(system, rule).mean_response for rule in RULE_NAMES
        }
    half, full = values[case.caps // 2], values[case.caps]
    change = max(abs(full[k] / half[k] - 1) for k in full)
    system = case.system()
    shares = [1.0 / len(case.speeds)] * len(case.speeds)
    random = split_response(system.rates, shares, system.arrival_rate)
    figures = {k: case.in_fastest(v) for k, v in full.items()} | {"random": case.in_fastest(random)}
    optimum = figures["optimal"]
    return {
        "case": case.name,
        "servers": len(case.speeds),
        "family": case.family,
        "speeds": [round(s, 4) for s in case.speeds],
        "load": case.load,
        "caps": [case.caps // 2, case.caps],
        "mean_response": {k: _finite(v, 4) for k, v in figures.items()},
        "gap": {k: _finite(v / optimum - 1, 5) for k, v in figures.items() if k != "optimal"},
        "doubling_change": round(change, 6),
        "seconds": round(time.perf_counter() - start, 1),
    }


def _finite(value: float, digits: int) -> float | None:
    """A figure for the JSON: rounded, None where it is infinite (an unstable rule)."""
    return round(value, digits) if np.isfinite(value) else None


def _gap(value: float | None) -> str:
    return "unstable" if value is None else f"{100 * value:+.2f}%"


def _with_gap(value: float | None, gap: float | None) -> str:
    return "unstable" if value is None else f"{value:.3f} ({_gap(gap)})"


def table_markdown(rows: list[dict]) -> str:
    lines = [
        "| servers | speeds | load | optimum | SED | JSQ | random | N → 2N | change |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        t, g = row["mean_response"], row["gap"]
        speeds = ":".join(f"{s:.3g}" for s in row["speeds"])
        lines.append(
            f"| {row['servers']} ({row['family']}) | {speeds} | {row['load']:g} | "
            f"{t['optimal']:.3f} | {_with_gap(t['sed'], g['sed'])} | "
            f"{_with_gap(t['jsq'], g['jsq'])} | {_with_gap(t['random'], g['random'])} | "
            f"{row['caps'][0]} → {row['caps'][1]} | {100 * row['doubling_change']:.3f}% |"
        )
    notes = (
        "Figures at 2N jobs a queue; change: the largest change of any figure between N "
        "and 2N. Random is uniform, as `fedmc baselines` has it: unstable where a slow "
        "server gets more than it can serve."
    )
    return "\n".join(lines) + "\n\n" + notes


def furthest(rows: list[dict]) -> str:
    """Where SED falls furthest from the optimum, per number of servers."""
    parts = []
    for servers in sorted({row["servers"] for row in rows}):
        mine = [row for row in rows if row["servers"] == servers]
        worst = max(mine, key=lambda row: row["gap"]["sed"])
        parts.append(f"{servers} servers: {worst['case']} ({_gap(worst['gap']['sed'])})")
        if servers > 2:
            wins = sum(
                a["gap"]["sed"] >= b["gap"]["sed"]
                for a in mine
                if a["family"] == "one fast"
                for b in mine
                if b["family"] == "geometric"
                and (b["speeds"][0], b["load"]) == (a["speeds"][0], a["load"])
            )
            parts[-1] += (
                f"; one fast beats geometric for SED's gap in {wins} of {len(mine) // 2} cells"
            )
    return "SED falls furthest from the optimum at " + "; ".join(parts) + "."


# --- part 2: the world and the learner -----------------------------------------------------


def world_config(
    case: Case, split: str, seeds: int, steps: int, overrides: Sequence[str] = ()
) -> ExperimentConfig:
    """conf/optimum.yaml made this case, queues as deep as the solver's truncation."""
    return load_config(
        CONFIG,
        [
            f"world.nodes_per_region={len(case.speeds)}",
            f"world.node_speeds={list(case.speeds)}",
            f"world.load={case.load}",
            f"world.queue_capacity={case.caps}",
            f"world.queue_threshold={case.caps - 1}",
            f"eval.split={split}",
            f"eval.seeds={seeds}",
            f"eval.steps={steps}",
            *overrides,
        ],
    )


def world_times(cfg: ExperimentConfig, factory: PolicyFactory, case: Case) -> np.ndarray:
    """Each held-out world's mean response time, in fastest-server service times."""
    result = evaluate(factory, cfg, 0)
    unit = cfg.world.mean_service_ms / max(case.speeds)
    return result.per_seed["latency_ms"] / unit


def _estimate(values: np.ndarray) -> Estimate:
    return stratified_mean([values])


def check_world(
    case: Case, cfg: ExperimentConfig, tables: dict[str, np.ndarray], exact: dict
) -> list:
    """SED, JSQ and the solver's policy arrays (`tables`: the optimum, SED with ties to
    the slower server) in the world beside the solver's values."""
    factories: dict[str, PolicyFactory] = {
        "sed": DISPATCHERS["sed"],
        "jsq": DISPATCHERS["jsq"],
        **{
            name: lambda sim, table=table, name=name: TableDispatcher(table, sim.layout, name)
            for name, table in tables.items()
        },
    }
    rows = []
    for name, factory in factories.items():
        values = world_times(cfg, factory, case)
        estimate = _estimate(values)
        rows.append(
            {
                "case": case.name,
                "rule": name,
                "world": round(estimate.mean, 4),
                "world_ci95": round(estimate.half_width, 4),
                "solver": round(exact[name], 4),
                "within_ci": bool(abs(estimate.mean - exact[name]) <= estimate.half_width),
                "per_world": values,
            }
        )
    return rows


def learner_config(case: Case, seed: int, args: argparse.Namespace) -> ExperimentConfig:
    """The config the learner trains with: the case's world and conf/optimum.yaml's budget,
    with the learner (`ppo`) of `--learner-config` exactly as `fedmc run` reads it there,
    `--set` applied to both."""
    world = world_config(case, "test", args.test_worlds, args.test_jobs, args.overrides)
    learner = load_config(args.learner_config, args.overrides)
    return dataclasses.replace(world, ppo=learner.ppo, seed=seed)


def shown(path: Path) -> str:
    """A config's path as the docs give it: from the repository's root where it lies there."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def train_seed(case: Case, seed: int, args: argparse.Namespace) -> tuple[np.ndarray, float]:
    """One training seed: the federation of the case's one region, trained as `fedmc run`
    trains it; its greedy policy at the last round on each test world (mean response
    time, fastest-server service times), and the seconds it took."""
    torch.set_num_threads(1)
    start = time.perf_counter()
    cfg = learner_config(case, seed, args)
    *_, (_, weights) = federate(cfg, 0, 1)
    judge = PPOLearner(learner_plan(cfg, [0]), learner_seed(cfg.seed))
    judge.set_weights(weights)
    times = world_times(cfg, lambda sim: judge.policy(), case)
    seconds = time.perf_counter() - start
    print(f"  {case.name}, seed {seed}: trained and judged in {seconds:.0f} s", flush=True)
    return times, seconds


def meets_target(seeds: list[dict]) -> bool:
    """The learner's target on one case: its worst seed within `TARGET_GAP` of the optimum
    (a mean over seeds would hide a seed that fails) and no seed behind SED under either
    tie rule, paired over the test worlds (the 95% interval above 0). Not behind rather
    than ahead: where SED with ties to the slower server is the optimum (two servers at
    2:1, load 0.5), nothing can beat it."""
    worst = max(row["gap_to_optimal"] for row in seeds)
    behind = any(row[key] > 0 for row in seeds for key in BEHIND_SED)
    return bool(worst <= TARGET_GAP and not behind)


def judge_learner(case: Case, args: argparse.Namespace, trained: list[tuple]) -> tuple[list, dict]:
    """The world check, then each seed's last-round learner on the test worlds against the
    optimum, SED and JSQ (paired world by world): the mean over the seeds and the worst."""
    system = case.system()
    best = optimal(system)
    tables = {"optimal": best.policy, SED_SLOWER: sed_slower_ties(system)}
    rules = {SED_SLOWER: tables[SED_SLOWER], **{r: r for r in RULE_NAMES}}
    exact = {"optimal": best.mean_response}
    exact |= {name: solve(system, rule).mean_response for name, rule in rules.items()}
    exact = {k: case.in_fastest(v) for k, v in exact.items()}
    test = world_config(case, "test", args.test_worlds, args.test_jobs)
    checks = check_world(case, test, tables, exact)
    per_world = {row["rule"]: row["per_world"] for row in checks}
    seeds = []
    for seed, (times, seconds) in zip(args.seeds, trained, strict=True):
        paired = {name: _estimate(times - values) for name, values in per_world.items()}
        seeds.append(
            {
                "seed": seed,
                "learner": round(float(times.mean()), 4),
                "gap_to_optimal": round(paired["optimal"].mean / exact["optimal"], 5),
                "gap_to_optimal_ci95": round(paired["optimal"].half_width / exact["optimal"], 5),
                "minus_sed": round(paired["sed"].mean, 4),
                "minus_sed_low": round(paired["sed"].low, 4),
                "minus_sed_slower_ties": round(paired[SED_SLOWER].mean, 4),
                "minus_sed_slower_ties_low": round(paired[SED_SLOWER].low, 4),
                "minus_jsq": round(paired["jsq"].mean, 4),
                "train_s": round(seconds, 1),
            }
        )
    worst = max(seeds, key=lambda row: row["gap_to_optimal"])
    row = {
        "case": case.name,
        "speeds": list(case.speeds),
        "load": case.load,
        "optimal": round(exact["optimal"], 4),
        "sed": round(exact["sed"], 4),
        "jsq": round(exact["jsq"], 4),
        "sed_gap": round(exact["sed"] / exact["optimal"] - 1, 5),
        SED_SLOWER: round(exact[SED_SLOWER], 4),
        "sed_slower_ties_gap": round(exact[SED_SLOWER] / exact["optimal"] - 1, 5),
        "gap_to_optimal": round(float(np.mean([r["gap_to_optimal"] for r in seeds])), 5),
        "worst_seed": worst["seed"],
        "worst_gap_to_optimal": worst["gap_to_optimal"],
        "minus_sed": round(float(np.mean([r["minus_sed"] for r in seeds])), 4),
        "worst_minus_sed": max(r["minus_sed"] for r in seeds),
        "worst_minus_sed_slower_ties": max(r["minus_sed_slower_ties"] for r in seeds),
        "minus_jsq": round(float(np.mean([r["minus_jsq"] for r in seeds])), 4),
        "seeds": seeds,
        "within_target": meets_target(seeds),
    }
    for check in checks:
        check.pop("per_world")
    return checks, row


def world_markdown(checks: list[dict]) -> str:
    lines = ["| case | rule | world (95% CI) | solver | within the CI |", "|---|---|---|---|---|"]
    for c in checks:
        lines.append(
            f"| {c['case']} | {c['rule']} | {c['world']:.3f} ± {c['world_ci95']:.3f} | "
            f"{c['solver']:.3f} | {'yes' if c['within_ci'] else 'no'} |"
        )
    return "\n".join(lines)


def learner_markdown(rows: list[dict]) -> str:
    lines = [
        "| case | optimum | SED | SED, ties to the slower | JSQ | learner − optimum, mean | "
        "worst seed | learner − SED, worst seed | learner − SED (ties to the slower), "
        "worst seed | learner − JSQ, mean | target met |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['optimal']:.3f} | {r['sed']:.3f} ({_gap(r['sed_gap'])}) | "
            f"{r[SED_SLOWER]:.3f} ({_gap(r['sed_slower_ties_gap'])}) | "
            f"{r['jsq']:.3f} | {100 * r['gap_to_optimal']:+.2f}% | "
            f"{100 * r['worst_gap_to_optimal']:+.2f}% (seed {r['worst_seed']}) | "
            f"{r['worst_minus_sed']:+.3f} | {r['worst_minus_sed_slower_ties']:+.3f} | "
            f"{r['minus_jsq']:+.3f} | {'yes' if r['within_target'] else 'no'} |"
        )
    seeds = ", ".join(str(r["seed"]) for r in rows[0]["seeds"]) if rows else ""
    notes = (
        f"The learner at its last round, training seeds {seeds}. learner − optimum: paired "
        "world by world with the optimal policy run in the same test worlds, over the "
        "optimum's exact value; learner − SED and − JSQ in service times, paired the same "
        "way (the worst seed: the largest). SED shares a tie between servers equally; with "
        "ties to the slower server it is a stronger rule (`sim/optimum.sed_slower_ties`). "
        f"The target: the worst seed within {100 * TARGET_GAP:.0f}% of the optimum and no "
        "seed behind SED under either tie rule (behind: the paired 95% interval above 0)."
    )
    return "\n".join(lines) + "\n\n" + notes


UNITS = "Mean response times in units of the fastest server's mean service time."


def run_table(args: argparse.Namespace) -> tuple[list[str], dict]:
    """Part 1: the markdown sections and the figures."""
    rows = []
    for case in table_cases(args.servers, args.ratios, args.loads):
        rows.append(solve_case(case))
        print(f"solved {case.name} in {rows[-1]['seconds']:.0f} s", flush=True)
    sections = ["## The optimum against SED, JSQ and random", table_markdown(rows), furthest(rows)]
    return sections, {"cases": rows}


def run_learner(args: argparse.Namespace) -> tuple[list[str], dict]:
    """Part 2: the markdown sections and the figures."""
    cases = [c for c in LEARNER_CASES if args.cases is None or c.name in args.cases]
    jobs = [(case, seed) for case in cases for seed in args.seeds]
    with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(train_seed, case, seed, args) for case, seed in jobs]
        trained = [future.result() for future in futures]
    checks, learners = [], []
    for k, case in enumerate(cases):
        per_seed = trained[k * len(args.seeds) : (k + 1) * len(args.seeds)]
        case_checks, row = judge_learner(case, args, per_seed)
        checks += case_checks
        learners.append(row)
    sections = ["## The world against the solver", world_markdown(checks)]
    heading = f"## The learner of `{shown(args.learner_config)}` against the optimum"
    sections += [heading, learner_markdown(learners)]
    met = bool(learners) and all(row["within_target"] for row in learners)
    return sections, {
        "learner_config": shown(args.learner_config),
        "target_met": met,
        "target_gap": TARGET_GAP,
        "world_check": checks,
        "learners": learners,
    }


def write_part(out: Path, sections: list[str], figures: dict, started: float) -> dict:
    """One part's summary.md and figures.json under `out` (provenance.json is there
    already); the figures with the run time and load average."""
    load = os.getloadavg()[0]
    elapsed = time.perf_counter() - started
    figures = figures | {"seconds": round(elapsed, 1), "load_avg_1min": round(load, 2)}
    tail = f"Run time {elapsed / 60:.0f} min; load average {load:.2f}."
    summary = "\n\n".join([UNITS, *sections, tail]) + "\n"
    print(summary)
    (out / "summary.md").write_text(summary)
    (out / "figures.json").write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "table", "learner"), default="all")
    parser.add_argument("--servers", type=int, nargs="+", default=[2, 3, 4], choices=[2, 3, 4])
    parser.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS), help="table")
    parser.add_argument("--loads", type=float, nargs="+", default=list(LOADS), help="table")
    parser.add_argument("--cases", nargs="*", default=None, help="learner cases by name")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once")
    parser.add_argument(
        "--learner-config",
        type=Path,
        default=REPO / DEFAULT_CONFIG,
        help="the config whose learner (`ppo`) trains: by default the CLI's",
    )
    parser.add_argument("--test-worlds", type=int, default=20)
    parser.add_argument("--test-jobs", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=Path("results/optimum"))
    # applied to the world's and the learner's config (a quick run: --set train.rounds=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    return parser


def main() -> None:
    args = arguments().parse_args()
    torch.set_num_threads(1)
    command = " ".join(["python", *sys.argv])
    figures: dict = {"bench": "optimum"}
    for part, run in (("table", run_table), ("learner", run_learner)):
        if args.part not in ("all", part):
            continue
        started = time.perf_counter()
        record_provenance(args.out / part, command)
        sections, found = run(args)
        figures[part] = write_part(args.out / part, sections, found, started)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
