"""The attack table of docs/security.md: every attack against every robust rule (and the
statistics attacks against the mean too), 5 and 10 regions, 20% and 40% hostile, paired
against clean FedAvg on the same test worlds.

Each cell trains one federation through the plain functions the Flower apps call
(`train_region`, `aggregation.screen` with the server's own `acceptance.rule_score`,
`aggregation.aggregate`, `identity.impostor`), the hostile regions (the last ones) sending
their attack in every round, and judges the final global policy on every region's test
worlds. A cell whose hostile count exceeds the rule's breakdown point is not run: the
config refuses it, and the table shows that refusal's line. Round 1's honest training
starts from the same weights in every cell of a size, so it is trained once per size.

    python bench/bench_attacks.py
    python bench/bench_attacks.py --regions 5 --share 0.2 --rule median --attack shift-30

Attacks (each hostile region, every round; the omniscient ones see the honest updates):
sign-flip (its own update x -10), colluding (all send one identical update: -10 x the
honest mean), noise (Gaussian, 10 x the median honest norm), lie ("a little is
enough", Baruch et al. 2019: the honest mean less z_max honest standard deviations per
coordinate), min-max (Shejwalkar and Houmansadr 2021: the honest mean plus gamma x minus
the honest standard deviation, gamma the largest that keeps it no farther from any honest
update than the honest ones are from each other), free-rider (the global weights sent
back), statistics (observation means of 1e200) and impersonate (its reply relabelled as
the next region's: the server's identity check). The statistics attacks send the region's
honest network with lying running moments (observation and return): shift-3, shift-30
and shift-300 add that constant to every mean, shift-5-spreads puts every mean 5 of the
honest regions' spreads (`moments.typical`: the larger of how far their means lie apart
and their median standard deviation) above their median, inside the 8 that are turned
away and so pooled at the band's edge, variance-x100 multiplies every variance by 100,
escalating adds 3, 30, 300, ... (ten times more each round) and escalating-spreads puts
every mean 1, 3, 9, ... spreads above the honest median (pooled as sent, then at the
band's edge, then turned away). `--attack` runs some
only. Prints Markdown rows as they finish, then one JSON line (the command, the
commit and every row), which `--render` writes into `--doc`, several runs together.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from bench_byzantine import _per_seed, _train
from scipy.stats import norm

from fedmc_flwr.config import ConfigError, ExperimentConfig, FaultConfig, load_config
from fedmc_flwr.federation import faults
from fedmc_flwr.federation.acceptance import rule_score
from fedmc_flwr.federation.aggregation import RegionUpdate, Weights, aggregate, deltas, screen
from fedmc_flwr.federation.identity import impostor
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.policies.moments import (
    MIN_PARTS_TO_JUDGE,
    MOMENT_ARRAYS,
    Band,
    Moments,
    std_ratio,
    typical,
)
from fedmc_flwr.policies.ppo import STATISTICS
from fedmc_flwr.results import code_version

NETWORK_ATTACKS = (
    "sign-flip",
    "colluding",
    "noise",
    "lie",
    "min-max",
    "free-rider",
    "statistics",
    "impersonate",
)
IN_SPREADS = ("shift-5-spreads", "escalating-spreads")
"""The attacks whose size is counted in the honest regions' spreads, feature by feature,
from their median (`moments.typical`)."""
STATISTICS_ATTACKS: dict[str, tuple[str, Callable[[int], float]]] = {
    "shift-3": ("shift-means", lambda rnd: 3.0),
    "shift-30": ("shift-means", lambda rnd: 30.0),
    "shift-300": ("shift-means", lambda rnd: 300.0),
    "shift-5-spreads": ("shift-means", lambda rnd: 5.0),
    "variance-x100": ("scale-variance", lambda rnd: 100.0),
    "escalating": ("shift-means", lambda rnd: 3.0 * 10 ** (rnd - 1)),
    "escalating-spreads": ("shift-means", lambda rnd: 3.0 ** (rnd - 1)),
}
"""Each statistics attack: the fault kind its regions send (`faults.corrupt`, with an
honest network) and its size in a round (for those IN_SPREADS: in spreads, per feature)."""
ATTACKS = (*NETWORK_ATTACKS, *STATISTICS_ATTACKS)
RULES = ("mean", "median", "multi-krum", "acceptance")
CLAIMLESS = ("mean",)
"""Rules that make no claim against hostile networks: run on the statistics attacks only
(what every rule pools alike)."""
SCALE = 10.0
SMALL = [
    "world.nodes_per_region=3",
    "ppo.num_envs=16",
    "train.steps_per_round=500",
    "train.rounds=3",
    "eval.seeds=10",
    "eval.steps=500",
]
"""small_demo's world and learner, trained and judged briefly enough for 80 cells."""
TARGET_PCT = 5.0
"""A rule holds where its final reward is within this share of clean FedAvg's."""
HONEST_PCT = 10.0
"""A rule in SPARING holds where it turns away at most this share of the honest replies,
in a clean run and under each attack."""
SPARING = ("acceptance",)
"""Rules that claim to keep the honest replies: Multi-Krum drops f regions every round by
design, the per-coordinate rules turn none away."""
MARKERS = (
    "<!-- attack-table: begin (bench/bench_attacks.py --doc) -->",
    "<!-- attack-table: end -->",
)
"""The generated section of the doc the tables are written into."""


def _flat(update: Weights) -> np.ndarray:
    return np.concatenate([a.ravel() for a in update])


def _unflat(flat: np.ndarray, like: Weights, start: Weights) -> Weights:
    """`start` plus the flat update `flat`, in the arrays' shapes and dtypes."""
    out, k = [], 0
    for ref, base in zip(like, start, strict=True):
        size = ref.size
        out.append((base + flat[k : k + size].reshape(ref.shape)).astype(ref.dtype))
        k += size
    return out


def _min_max(honest: np.ndarray) -> np.ndarray:
    """Shejwalkar and Houmansadr's min-max update: mean - gamma x std, gamma found by
    bisection as the largest whose farthest distance to an honest update is at most the
    largest distance between two honest updates."""
    mean, direction = honest.mean(axis=0), -honest.std(axis=0)
    bound = max(np.linalg.norm(a - b) for a in honest for b in honest)
    low, high = 0.0, 100.0
    for _ in range(40):
        gamma = (low + high) / 2
        far = max(np.linalg.norm(mean + gamma * direction - h) for h in honest)
        low, high = (gamma, high) if far <= bound else (low, gamma)
    return mean + low * direction


def _hostile_moves(attack: str, honest: np.ndarray, own: np.ndarray, f: int) -> np.ndarray:
    """The network updates (one row per hostile region) an omniscient attack sends."""
    n = len(honest) + f
    if attack == "colluding":
        return np.tile(-SCALE * honest.mean(axis=0), (f, 1))
    if attack == "noise":
        size = SCALE * float(np.median(np.linalg.norm(honest, axis=1)))
        noise = np.random.default_rng(0).normal(size=(f, honest.shape[1]))
        return noise * size / np.sqrt(honest.shape[1])
    if attack == "lie":
        supporters = n // 2 + 1 - f
        z = float(norm.ppf((n - supporters) / n))
        return np.tile(honest.mean(axis=0) - z * honest.std(axis=0), (f, 1))
    if attack == "min-max":
        return np.tile(_min_max(honest), (f, 1))
    return own


def _honest_spread(
    updates: list[RegionUpdate], honest: list[int], network: int, spreads: float
) -> Weights:
    """Per statistics group, the honest regions' median mean plus `spreads` of their
    spreads (`moments.typical`, over the honest regions alone)."""
    out: Weights = []
    for k in range(network, len(updates[0].weights), MOMENT_ARRAYS):
        parts = [Moments.from_arrays(updates[h].weights[k : k + MOMENT_ARRAYS]) for h in honest]
        centre, spread, _, _ = typical(parts)
        out.append(centre + spreads * spread)
    return out


def _lying_statistics(
    attack: str, updates: list[RegionUpdate], start: Weights, hostile: list[int], rnd: int
) -> list[RegionUpdate]:
    """The replies with the hostile regions' running moments replaced by the attack's."""
    network = len(start) - len(STATISTICS) * MOMENT_ARRAYS
    kind, size = STATISTICS_ATTACKS[attack]
    out = list(updates)
    honest = [k for k in range(len(updates)) if k not in hostile]
    targets = _honest_spread(updates, honest, network, size(rnd)) if attack in IN_SPREADS else []
    for h in hostile:
        fault = FaultConfig(region=h, kind=kind, scale=size(rnd))
        sent, _ = faults.corrupt(fault, out[h].weights, 1, start, network)
        for group, target in enumerate(targets):
            sent[network + group * MOMENT_ARRAYS + 1] = target.copy()
        out[h] = RegionUpdate(h, sent, out[h].num_examples)
    return out


def attacked(
    attack: str, updates: list[RegionUpdate], start: Weights, hostile: list[int], rnd: int
) -> tuple[list[RegionUpdate], dict[int, str]]:
    """The replies the server accepts for round `rnd`, and the regions its identity check
    refused (impersonation); the hostile regions' replies carry the attack."""
    if attack == "none":
        return updates, {}
    if attack in STATISTICS_ATTACKS:
        return _lying_statistics(attack, updates, start, hostile, rnd), {}
    network = len(start) - len(STATISTICS) * MOMENT_ARRAYS
    out = list(updates)
    if attack == "impersonate":
        regions = len(updates)
        refused = {
            h: f"refused reply: {impostor(str(h), [(h + 1) % regions], [h])}" for h in hostile
        }
        return [u for u in out if u.region not in hostile], refused
    if attack in ("sign-flip", "free-rider", "statistics"):
        kind = {"statistics": "absurd"}.get(attack, attack)
        for h in hostile:
            sent = out[h].weights
            if kind == "absurd":
                sent = [np.array(a, copy=True) for a in sent]
                sent[network + 1] = np.full_like(sent[network + 1], 1e200)  # observation means
            else:
                fault = FaultConfig(region=h, kind=kind, scale=SCALE)
                sent, _ = faults.corrupt(fault, sent, 1, start, network)
            out[h] = RegionUpdate(h, sent, out[h].num_examples)
        return out, {}
    moves = deltas([u.weights[:network] for u in out], start[:network])
    honest = np.stack([_flat(m) for k, m in enumerate(moves) if k not in hostile])
    own = np.stack([_flat(moves[h]) for h in hostile])
    for h, move in zip(hostile, _hostile_moves(attack, honest, own, len(hostile)), strict=True):
        net = _unflat(move, out[h].weights[:network], start[:network])
        out[h] = RegionUpdate(h, net + out[h].weights[network:], out[h].num_examples)
    return out, {}


def widest(replies: list[RegionUpdate], honest: list[int], cut: int) -> np.ndarray:
    """How far the honest replies' statistics lie from the other honest regions' (in
    spreads of `moments.Band`): the most for the means and for the standard deviations
    upward, over every group and feature, where a clean run needs them below
    POOLED_SPREADS to pool exactly; and the most their pooled standard deviation reaches
    beyond the median region's (`moments.std_ratio`), held at POOLED_STD_RATIO."""
    means, stds, ratios = [0.0], [0.0], [0.0]
    ours = [replies[k].weights[cut:] for k in honest]
    for k in range(0, len(ours[0]), MOMENT_ARRAYS):
        parts = [Moments.from_arrays(w[k : k + MOMENT_ARRAYS]) for w in ours]
        band = Band.of(parts)
        means.append(float(np.abs(band.mean_spreads(parts)).max()))
        logs = np.log(np.sqrt(np.stack([p.var for p in parts])) + 1e-300)
        stds.append(float(((logs - band.log_std_centre) / band.log_std_spread).max()))
        ratios.append(float(std_ratio(parts).max()))
    return np.array([max(means), max(stds), max(ratios)])


@dataclass(frozen=True)
class Outcome:
    """One cell's federation: the final global weights, the replies turned away, and
    the honest statistics' widest spreads (`widest`) over its rounds."""

    weights: Weights
    hostile_out: int
    honest_out: int
    spreads: np.ndarray


def federate(
    cfg: ExperimentConfig, attack: str, hostile: list[int], first: list[RegionUpdate], tmp: Path
) -> Outcome:
    """One cell's federation (`Outcome`)."""
    statistics = len(STATISTICS)
    weights = initial_weights(cfg)
    score = rule_score(cfg)
    state = tmp / f"{cfg.federation.aggregation}-{attack}-{len(hostile)}"
    shutil.copytree(tmp / "round1", state)
    hostile_out = honest_out = 0
    honest = [k for k in range(len(first)) if k not in hostile]
    spreads = np.zeros(3)
    for rnd in range(1, cfg.train.rounds + 1):
        trained = first if rnd == 1 else _train(cfg, weights, rnd, state)
        cut = len(weights) - statistics * MOMENT_ARRAYS
        if len(honest) >= MIN_PARTS_TO_JUDGE:
            spreads = np.maximum(spreads, widest(trained, honest, cut))
        replies, refused = attacked(attack, trained, weights, hostile, rnd)
        kept, rejected = screen(replies, weights, cfg.federation, statistics, score)
        out = {**refused, **rejected}
        hostile_out += sum(1 for r in out if r in hostile and attack != "none")
        honest_out += sum(1 for r in out if r not in hostile or attack == "none")
        weights = aggregate(kept, weights, cfg.federation, statistics)
    return Outcome(weights, hostile_out, honest_out, spreads)


def refusal(config: Path, overrides: list[str]) -> str | None:
    """The config's one-line refusal of a cell, or None where it is allowed."""
    try:
        load_config(config, overrides)
    except ConfigError as exc:
        return str(exc).split(": ", 1)[1]
    return None


@dataclass(frozen=True)
class Size:
    """What every cell of one estate size shares: its config, round 1's honest training
    (a folder of each region's learner state, and the updates), and clean FedAvg's
    held-out reward per test world, and how far its honest statistics lay apart."""

    config: Path
    base: list[str]
    first: list[RegionUpdate]
    reference: np.ndarray
    tmp: Path
    spreads: np.ndarray


def _worker_threads() -> None:
    torch.set_num_threads(1)


def cell(size: Size, attack: str, rule: str, f: int) -> dict:
    """One cell of the table: the final global policy under `attack` from the last `f`
    regions and aggregation `rule`, against clean FedAvg; or the config's refusal."""
    n = len(size.first)
    overrides = [*size.base, f"federation.aggregation={rule}", f"federation.byzantine={f}"]
    row = {"regions": n, "hostile": f, "attack": attack, "rule": rule}
    refused = refusal(size.config, overrides)
    if refused is not None:
        return {**row, "refused": refused}
    cfg = load_config(size.config, overrides)
    began = time.perf_counter()
    hostile = list(range(n - f, n))
    outcome = federate(cfg, attack, hostile, size.first, size.tmp)
    rewards = _per_seed(cfg, outcome.weights)
    diff = rewards - size.reference
    half = 1.96 * diff.std(ddof=1) / np.sqrt(len(diff))
    return {
        **row,
        "reward": round(float(rewards.mean()), 4),
        "vs_clean_pct": round(100 * diff.mean() / abs(size.reference.mean()), 1),
        "paired_diff": round(float(diff.mean()), 4),
        "ci95": round(float(half), 4),
        "hostile_rejected": f"{outcome.hostile_out}/{f * cfg.train.rounds}",
        "honest_rejected": f"{outcome.honest_out}/{(n - f) * cfg.train.rounds}",
        "clean_reward": round(float(size.reference.mean()), 4),
        "clean_spreads": [round(float(x), 2) for x in size.spreads],
        "wall_s": round(time.perf_counter() - began, 1),
    }


def run(
    config: Path,
    sizes: list[int],
    shares: list[float],
    rules: list[str],
    attacks: list[str],
    tmp: Path,
    jobs: int,
) -> list[dict]:
    """Every cell of `attacks` under `rules` (the rules in CLAIMLESS under the statistics
    attacks only), `jobs` at a time (each cell on one thread: cells are independent, and
    each is seeded on its own, so the rows do not depend on `jobs`)."""
    rows: list[dict] = []
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=spawn, initializer=_worker_threads) as pool:
        for n in sizes:
            base = [*SMALL, f"world.regions={n}"]
            clean_cfg = load_config(config, base)
            folder = tmp / f"regions-{n}"
            first = _train(clean_cfg, initial_weights(clean_cfg), 1, folder / "round1")
            clean = federate(clean_cfg, "none", [], first, folder)
            reference = _per_seed(clean_cfg, clean.weights)
            size = Size(config, base, first, reference, folder, clean.spreads)
            cells = [("none", rule, 0) for rule in rules if rule != "mean"]  # the reference
            cells += [
                (a, rule, round(s * n))
                for s in shares
                for a in attacks
                for rule in rules
                if rule not in CLAIMLESS or a in STATISTICS_ATTACKS
            ]
            futures = [pool.submit(cell, size, *c) for c in cells]
            for future in futures:
                rows.append(future.result())
                print(json.dumps(rows[-1]), flush=True)
    return rows


def _cell_text(row: dict) -> str:
    if "refused" in row:
        return "refused"
    turned = "-" if row["attack"] == "none" else row["hostile_rejected"]
    return (
        f"{row['vs_clean_pct']:+.1f}% ({row['paired_diff']:+.4f} ± {row['ci95']:.4f}), "
        f"{turned} / {row['honest_rejected']}"
    )


def _turned_away_pct(row: dict) -> float:
    """The share of a cell's honest replies turned away, in percent."""
    turned, replies = (int(x) for x in row["honest_rejected"].split("/"))
    return 100 * turned / replies


def _verdict(rule: str, rows: list[dict], clean: dict | None) -> str:
    """Whether `rule` held within TARGET_PCT of clean at one hostile count (`rows`, one per
    attack), and for a rule in SPARING whether it kept HONEST_PCT of the honest replies
    there and in its `clean` run; a rule in CLAIMLESS claims nothing, and its worst row is
    given as measured."""
    if "refused" in rows[0]:
        return f"refused in one line: `{rows[0]['refused']}`"
    worst = min(rows, key=lambda r: r["vs_clean_pct"])
    if rule in CLAIMLESS:
        return (
            f"no breakdown point, none claimed (worst {worst['vs_clean_pct']:+.1f}%, "
            f"{worst['attack']})"
        )
    misses = [r for r in rows if r["vs_clean_pct"] < -TARGET_PCT]
    if not misses:
        verdict = f"holds (worst {worst['vs_clean_pct']:+.1f}%, {worst['attack']})"
    else:
        named = ", ".join(f"{r['attack']} {r['vs_clean_pct']:+.1f}%" for r in misses)
        verdict = f"**misses** the {TARGET_PCT:g}% target: {named}"
    if rule not in SPARING:
        return verdict
    judged = [*rows, *([clean] if clean else [])]
    most = max(judged, key=_turned_away_pct)
    if _turned_away_pct(most) == 0:
        return f"{verdict}; no honest reply turned away"
    held = "at most" if _turned_away_pct(most) <= HONEST_PCT else "**over** the 10% target:"
    return (
        f"{verdict}; honest replies turned away {held} {most['honest_rejected']} ({most['attack']})"
    )


def tables(rows: list[dict]) -> str:
    """Per estate size and hostile count, attacks down and rules across (each cell: the
    paired difference to clean FedAvg, then hostile / honest replies turned away; "not
    run" for a network attack under a rule in CLAIMLESS, and for clean 'mean', which is
    clean FedAvg itself), and each rule's verdict against the target."""
    out = []
    for n in sorted({r["regions"] for r in rows}):
        mine = [r for r in rows if r["regions"] == n]
        clean = next(r["clean_reward"] for r in mine if "clean_reward" in r)
        spreads = next(r["clean_spreads"] for r in mine if "clean_spreads" in r)
        rules = list(dict.fromkeys(r["rule"] for r in mine))
        for f in sorted({r["hostile"] for r in mine if r["hostile"] > 0}):
            cells = {(r["attack"], r["rule"]): r for r in mine if r["hostile"] in (0, f)}
            attacks = [a for a in ("none", *ATTACKS) if any((a, rule) in cells for rule in rules)]
            out += [
                f"**{f} of {n} hostile ({100 * f / n:.0f}%)**, clean FedAvg {clean:.4f} (its "
                f"regions' statistics within {spreads[0]:.2f} spreads of the others' for the "
                f"means, {spreads[1]:.2f} for the standard deviations; their pooled standard "
                f"deviation {spreads[2]:.2f} times the median region's)",
                "",
            ]
            out += ["| attack | " + " | ".join(rules) + " |", "|---|" + "---|" * len(rules)]
            for attack in attacks:
                texts = [
                    _cell_text(cells[attack, rule]) if (attack, rule) in cells else "not run"
                    for rule in rules
                ]
                out.append(f"| {attack} | " + " | ".join(texts) + " |")
            out.append("")
            for rule in rules:
                judged = [cells[a, rule] for a in ATTACKS if (a, rule) in cells]
                out.append(f"- `{rule}`: {_verdict(rule, judged, cells.get(('none', rule)))}")
            out.append("")
    return "\n".join(out)


def write_doc(doc: Path, runs: list[dict]) -> None:
    """Replace the generated part of `doc` (between the MARKERS) with the tables of the
    `runs` (each the JSON line `main` ends with), each run's command and commit above."""
    text = doc.read_text()
    begin, end = MARKERS
    if begin not in text or end not in text:
        raise SystemExit(f"{doc}: no generated section ({begin} ... {end})")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    made = [
        f"`{r['command']}` at commit {r['commit']}{' (uncommitted changes)' * r['dirty']}: "
        f"{r['wall_s'] / 60:.1f} min wall on {r['cpus']} cores, load average {r['load']} at "
        "the end"
        for r in runs
    ]
    rows = [row for r in runs for row in r["rows"]]
    body = "Generated by " + ";\n".join(made) + f".\n\n{tables(rows)}"
    doc.write_text(f"{head}{begin}\n{body}\n{end}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/small_demo.yaml"))
    parser.add_argument("--regions", type=int, action="append")
    parser.add_argument("--share", type=float, action="append", help="hostile share")
    parser.add_argument("--rule", action="append", choices=RULES)
    parser.add_argument("--attack", action="append", choices=ATTACKS, help="some attacks only")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cells at once")
    parser.add_argument("--doc", type=Path, help="write the tables into this file's section")
    parser.add_argument(
        "--render",
        type=Path,
        action="append",
        help="instead of running: a saved output of a run (its last line), for --doc",
    )
    args = parser.parse_args()
    if args.render:
        if not args.doc:
            raise SystemExit("--render writes into --doc")
        write_doc(args.doc, [json.loads(p.read_text().splitlines()[-1]) for p in args.render])
        return
    _worker_threads()
    print(f"load average: {os.getloadavg()}", flush=True)
    version = code_version()  # the code the cells import, before anything is edited
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-attacks-") as tmp:
        sizes, shares = args.regions or [5, 10], args.share or [0.2, 0.4]
        rules, attacks = args.rule or list(RULES), args.attack or list(ATTACKS)
        rows = run(args.config, sizes, shares, rules, attacks, Path(tmp), args.jobs)
    wall = time.perf_counter() - began
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(tables(rows))
    print(f"load average: {load}, wall {wall:.0f} s")
    summary = {
        "command": "python " + " ".join(sys.argv),
        **version,
        "cpus": os.cpu_count(),
        "load": load,
        "config": str(args.config),
        "small": SMALL,
        "wall_s": round(wall),
        "rows": rows,
    }
    if args.doc:
        write_doc(args.doc, [summary])
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
