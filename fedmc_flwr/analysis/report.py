"""`fedmc report`: every policy of one or more result directories, paired against baselines.

Each directory holds a per_seed.csv (one run: one experiment and training seed, e.g.
`results/small_demo-s0 ... -s4`, `results/ablation_shrink-s0 ...`). Learners are taken at
one round (`--round N`, or the last round each run has). Dispatchers do not train, so
they sit at round 0 with the same values in every directory (they do not depend on the
training seed): they are kept once, and a directory whose dispatcher values differ from
another's is an error (a different world cannot be pooled). A run that lacks a region's
worlds (a region left out of a federated run's last evaluation) puts every policy on the
regions that all were judged in, as `fedmc run`'s table pairs it, and the report names
the regions it left out and which runs lacked them; worlds that differ inside a region
are an error.

Per policy, the table gives:

- **train seeds**: how many training seeds (runs) the learner has; `-` for a dispatcher.
- **reward ± 95% CI**: with two or more training seeds, the mean over training seeds of
  each run's mean over regions, with a Student-t interval over training seeds (the
  spread of the method); with one run, or for a dispatcher, the stratified interval over
  evaluation seeds (the precision of that one trained policy), and the `CI over` column
  says which.
- latency mean and p95 (the mean over worlds of each world's 95th percentile), the
  SLO-violation rate, cost and carbon per job: means over regions, then over runs.
- **train steps**: the environment steps the policy was trained on (matched budgets).
- **Δ vs B**: the paired difference A - B of rewards per evaluation seed, stratified over
  regions; over training seeds when both sides give two or more (a dispatcher pairs with
  every run of a learner; two learners pair by training seed), otherwise over evaluation
  seeds. The verdict says whether the 95% interval lies above 0 ("better"), below 0
  ("worse") or covers 0 ("no difference at 95%").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fedmc_flwr.analysis.statistics import (
    Estimate,
    over_training_seeds,
    paired_difference,
    paired_over_seeds_and_worlds,
    stratified_mean,
)
from fedmc_flwr.analysis.tables import REWARD, with_ci
from fedmc_flwr.errors import InputError
from fedmc_flwr.metrics import BY_NAME, POINT_METRICS
from fedmc_flwr.results import PER_SEED_FILE, PER_SEED_VALUES, read_per_seed

FIXED = -1
"""The training-seed key of a dispatcher's one run (it does not depend on the seed)."""
WORLD = ["client", "eval_seed"]
"""What identifies a held-out world inside one split."""
TABLE_POINTS = tuple(m for m in POINT_METRICS if m.name != "energy_kwh")
"""The figures `table` shows beside the reward (energy follows the power model's cost)."""


class ReportError(InputError, ValueError):
    """Input the report cannot use; the message is one line for the user."""


@dataclass
class Run:
    """One policy's per-seed values in one run, worlds in a fixed order."""

    source: str
    train_seed: int
    round: int
    train_steps: int
    worlds: pd.MultiIndex
    values: dict[str, list[np.ndarray]]
    """metric -> per region (sorted by name) the per-seed values (sorted by eval seed)."""


@dataclass
class PolicySummary:
    policy: str
    runs: dict[int, Run]
    reward: Estimate
    over: str
    """'training seeds' or 'eval seeds': what the reward interval is over."""
    points: dict[str, float]
    train_steps: float
    versus: dict[str, tuple[Estimate, str] | None] = field(default_factory=dict)
    """baseline -> (A - baseline, what its interval is over); None if it cannot be paired."""

    @property
    def learner(self) -> bool:
        return FIXED not in self.runs


# --- reading --------------------------------------------------------------------------


def load(dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Every directory's per_seed.csv, with a `source` column naming the directory."""
    if not dirs:
        raise ReportError("no results directories given")
    frames = []
    for d in dirs:
        path = Path(d)
        if not path.is_dir():
            raise ReportError(f"{path}: no such directory")
        try:
            frame = read_per_seed(path / PER_SEED_FILE)
        except FileNotFoundError:
            raise ReportError(f"{path}: no {PER_SEED_FILE} in it") from None
        except (ValueError, TypeError, OverflowError) as exc:
            raise ReportError(f"{path / PER_SEED_FILE}: unreadable ({_line(exc)})") from None
        if frame.empty:
            raise ReportError(f"{path / PER_SEED_FILE}: no rows")
        frames.append(frame.assign(source=str(path)))
    return pd.concat(frames, ignore_index=True)


def _line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _pick_round(group: pd.DataFrame, wanted: int | None, source: str, policy: str) -> int:
    rounds = sorted(group["round"].unique())
    if wanted is None:
        return int(rounds[-1])
    if wanted not in rounds:
        raise ReportError(f"{source}: {policy} has no round {wanted} (rounds {rounds})")
    return wanted


def _run(rows: pd.DataFrame, train_seed: int, source: str) -> Run:
    rows = rows.sort_values(WORLD)
    if rows.duplicated(WORLD).any():
        policy = rows["policy"].iloc[0]
        raise ReportError(f"{source}: {policy} has one held-out world twice in one round")
    regions = sorted(rows["client"].unique())
    by_region = [rows[rows["client"] == r] for r in regions]
    return Run(
        source=source,
        train_seed=train_seed,
        round=int(rows["round"].iloc[0]),
        train_steps=int(rows["train_steps"].max()),
        worlds=pd.MultiIndex.from_frame(rows[WORLD]),
        values={
            m: [part[m].to_numpy(dtype=np.float64) for part in by_region] for m in PER_SEED_VALUES
        },
    )


def _same(a: Run, b: Run) -> bool:
    return a.worlds.equals(b.worlds) and all(
        np.array_equal(np.concatenate(a.values[m]), np.concatenate(b.values[m]), equal_nan=True)
        for m in PER_SEED_VALUES
    )


def _runs(frame: pd.DataFrame, round_: int | None) -> dict[str, dict[int, Run]]:
    """policy -> training seed (FIXED for a dispatcher) -> its run at the chosen round,
    each on the worlds it was judged on. Runs that appear in several directories must be
    identical (then one is kept)."""
    splits = sorted(frame["split"].unique())
    if len(splits) != 1:
        raise ReportError(f"the directories mix held-out splits {splits}; report one at a time")
    policies: dict[str, dict[int, Run]] = {}
    for (source, policy), group in frame.groupby(["source", "policy"], sort=False):
        fixed = bool((group["round"] == 0).all())
        if not fixed and (group["round"] == 0).any():
            raise ReportError(f"{source}: {policy} has round 0 rows and trained rounds")
        seeds = [FIXED] if fixed else sorted(int(s) for s in group["train_seed"].unique())
        for seed in seeds:
            mine = group if fixed else group[group["train_seed"] == seed]
            chosen = 0 if fixed else _pick_round(mine, round_, source, policy)
            run = _run(mine[mine["round"] == chosen], seed, source)
            runs = policies.setdefault(policy, {})
            what = _named(policy, run)
            if seed in runs and not runs[seed].worlds.equals(run.worlds):
                raise ReportError(
                    f"mismatched eval seeds: {what} was judged on other held-out worlds in "
                    f"{runs[seed].source} than in {source}"
                )
            if seed in runs and not _same(runs[seed], run):
                raise ReportError(
                    f"{what} differs between {runs[seed].source} and {source}: "
                    "not the same world or evaluation"
                )
            runs.setdefault(seed, run)
    return policies


def _named(policy: str, run: Run) -> str:
    return policy if run.train_seed == FIXED else f"{policy} (training seed {run.train_seed})"


def _regions(run: Run) -> list[str]:
    """The regions a run was judged in, in the order of its `values`."""
    return sorted(set(run.worlds.get_level_values("client")))


def _within(run: Run, regions: list[str]) -> Run:
    """`run` on the worlds of `regions` only."""
    kept = [k for k, region in enumerate(_regions(run)) if region in regions]
    return Run(
        source=run.source,
        train_seed=run.train_seed,
        round=run.round,
        train_steps=run.train_steps,
        worlds=run.worlds[run.worlds.get_level_values("client").isin(regions)],
        values={m: [per_region[k] for k in kept] for m, per_region in run.values.items()},
    )


LeftOut = dict[str, list[str]]
"""A region left out of a report -> the runs that were not judged in it (say, a region
whose evaluation failed in a federated run's last round)."""


def _on_common_worlds(
    policies: dict[str, dict[int, Run]],
) -> tuple[dict[str, dict[int, Run]], LeftOut]:
    """Every run on the regions that every run was judged in (as `fedmc run`'s table pairs a
    policy that lacks a region's worlds), and the regions that leaves out. Two runs judged
    on other worlds of one region cannot be paired: ReportError."""
    judged = {(p, s): _regions(run) for p, runs in policies.items() for s, run in runs.items()}
    every = sorted({r for regions in judged.values() for r in regions})
    common = [r for r in every if all(r in regions for regions in judged.values())]
    left: LeftOut = {}
    for policy, runs in policies.items():
        for run in runs.values():
            for region in every:
                if region not in judged[policy, run.train_seed]:
                    where = f"at round {run.round} in {run.source}" if run.round else run.source
                    left.setdefault(region, []).append(f"{_named(policy, run)} {where}")
    if not common:
        raise ReportError(
            f"no region was judged for every policy (each of {', '.join(every)} lacks one); "
            "nothing can be paired"
        )
    out = {p: {s: _within(run, common) for s, run in runs.items()} for p, runs in policies.items()}
    reference: tuple[str, Run] | None = None
    for policy, runs in out.items():
        for run in runs.values():
            if reference is None:
                reference = policy, run
            elif not run.worlds.equals(reference[1].worlds):
                raise ReportError(
                    f"mismatched eval seeds: {_named(policy, run)} in {run.source} was judged "
                    f"on other held-out worlds of {', '.join(common)} than "
                    f"{_named(*reference)} in {reference[1].source}; pairing needs the same "
                    "worlds"
                )
    return out, left


def collect(frame: pd.DataFrame, round_: int | None = None) -> dict[str, dict[int, Run]]:
    """policy -> training seed (FIXED for a dispatcher) -> its run at the chosen round,
    every run on the same held-out worlds (else ReportError). Runs that appear in several
    directories must be identical (then one is kept)."""
    policies, left = _on_common_worlds(_runs(frame, round_))
    if left:
        region, runs = next(iter(left.items()))
        raise ReportError(
            f"mismatched eval seeds: {runs[0]} was not judged in {region}; pairing needs "
            "the same worlds"
        )
    return policies


def collect_common(
    frame: pd.DataFrame, round_: int | None = None
) -> tuple[dict[str, dict[int, Run]], LeftOut]:
    """`collect` on the regions every run was judged in, and what that left out."""
    return _on_common_worlds(_runs(frame, round_))


def left_out_note(left: LeftOut) -> str:
    """One line naming each region a report left out and the runs that lack it."""
    named = "; ".join(
        f"{region}, which {' and '.join(runs)} lacks" for region, runs in left.items()
    )
    return (
        f"left out: {named}; every figure is over the other regions' worlds, each difference "
        "paired there, as `fedmc run`'s table pairs it"
    )


# --- statistics -----------------------------------------------------------------------


def _pairs(a: dict[int, Run], b: dict[int, Run]) -> list[tuple[Run, Run]] | None:
    """Runs of A and B to pair: a dispatcher pairs with every run, two learners by seed."""
    if FIXED in a and FIXED in b:
        return [(a[FIXED], b[FIXED])]
    if FIXED in b:
        return [(run, b[FIXED]) for run in a.values()]
    if FIXED in a:
        return [(a[FIXED], run) for run in b.values()]
    if set(a) != set(b):
        return None
    return [(a[s], b[s]) for s in sorted(a)]


def compare(
    a: dict[int, Run], b: dict[int, Run], metric: str = "reward"
) -> tuple[Estimate, str] | None:
    """A - B in `metric`, paired per eval seed; with two or more pairs of runs the interval
    covers both the training seeds and the eval seeds (`paired_over_seeds_and_worlds`),
    else the eval seeds alone. None when they cannot be paired."""
    pairs = _pairs(a, b)
    if pairs is None:
        return None
    if len(pairs) >= 2:
        diffs = [
            [x - y for x, y in zip(run.values[metric], base.values[metric], strict=True)]
            for run, base in pairs
        ]
        return paired_over_seeds_and_worlds(diffs), "training and eval seeds"
    run, base = pairs[0]
    return paired_difference(run.values[metric], base.values[metric]), "eval seeds"


def level(runs: dict[int, Run], metric: str = "reward") -> tuple[Estimate, str]:
    """A policy's `metric`: over training seeds with two or more runs, else over eval seeds."""
    per_run = [stratified_mean(run.values[metric]) for run in runs.values()]
    if len(per_run) >= 2:
        return over_training_seeds([e.mean for e in per_run]), "training seeds"
    return per_run[0], "eval seeds"


def summarise(policies: dict[str, dict[int, Run]], baselines: Sequence[str]) -> list[PolicySummary]:
    """One summary per policy, best reward first."""
    unknown = [b for b in baselines if b not in policies]
    if unknown:
        raise ReportError(f"unknown baseline {unknown[0]!r}; policies here: {sorted(policies)}")
    out = []
    for policy, runs in policies.items():
        reward, over = level(runs)
        points = {
            m.name: float(np.mean([stratified_mean(r.values[m.name]).mean for r in runs.values()]))
            for m in TABLE_POINTS
        }
        summary = PolicySummary(
            policy=policy,
            runs=runs,
            reward=reward,
            over=over,
            points=points,
            train_steps=float(np.mean([run.train_steps for run in runs.values()])),
        )
        for base in baselines:
            if base != policy:
                summary.versus[base] = compare(runs, policies[base])
        out.append(summary)
    return sorted(out, key=lambda s: -s.reward.mean)


def paired_by_round(frame: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """For one run's per_seed.csv: every learner minus `baseline`, round by round, paired
    per eval seed (CI over eval seeds), on the regions judged that round (a late region
    only from its join round). Columns policy, round, mean, half_width."""
    fixed = frame[(frame["policy"] == baseline) & (frame["round"] == 0)]
    if fixed.empty:
        raise ReportError(f"no round-0 rows of baseline {baseline!r}")
    out = []
    learners = frame[frame["round"] > 0]
    for (policy, rnd), rows in learners.groupby(["policy", "round"], sort=True):
        if rows["train_seed"].nunique() != 1:
            raise ReportError(f"{policy} round {rnd}: several training seeds in one file")
        run = _run(rows, int(rows["train_seed"].iloc[0]), "per_seed.csv")
        base = _run(fixed[fixed["client"].isin(rows["client"].unique())], FIXED, "per_seed.csv")
        if not run.worlds.equals(base.worlds):
            raise ReportError(f"mismatched eval seeds: {policy} round {rnd} and {baseline}")
        diff = paired_difference(run.values["reward"], base.values["reward"])
        out.append(
            {"policy": policy, "round": int(rnd), "mean": diff.mean, "half_width": diff.half_width}
        )
    return pd.DataFrame(out, columns=["policy", "round", "mean", "half_width"])


SUMMARY_METRICS = PER_SEED_VALUES
"""Every per-seed metric a summary carries: reward, latency mean and p95, SLO violations,
cost, carbon and energy per job."""


def summary_frame(policies: dict[str, dict[int, Run]], baseline: str) -> pd.DataFrame:
    """One row per policy (best reward first): each metric's level with its 95% half-width
    (`level`), and its paired difference against `baseline` (`compare`), in raw units.

    Columns: policy, learner, train_seeds, train_steps, ci_over, then per metric `<m>` and
    `<m>_ci95`, then baseline, diff_over, per metric `d_<m>` and `d_<m>_ci95`, and
    `verdict` (of the reward difference)."""
    if baseline not in policies:
        raise ReportError(f"unknown baseline {baseline!r}; policies here: {sorted(policies)}")
    rows = []
    for policy, runs in policies.items():
        row: dict[str, object] = {
            "policy": policy,
            "learner": FIXED not in runs,
            "train_seeds": 0 if FIXED in runs else len(runs),
            "train_steps": float(np.mean([run.train_steps for run in runs.values()])),
        }
        for metric in SUMMARY_METRICS:
            estimate, row["ci_over"] = level(runs, metric)
            row[metric], row[f"{metric}_ci95"] = estimate.mean, estimate.half_width
        row["baseline"], row["diff_over"] = baseline, ""
        for metric in SUMMARY_METRICS:
            paired = None if policy == baseline else compare(runs, policies[baseline], metric)
            diff = paired[0] if paired else Estimate(float("nan"), float("nan"), 0)
            row[f"d_{metric}"], row[f"d_{metric}_ci95"] = diff.mean, diff.half_width
            if paired:
                row["diff_over"] = paired[1]
        row["verdict"] = "" if policy == baseline else _reward_verdict(row)
        rows.append(row)
    return pd.DataFrame(rows).sort_values("reward", ascending=False, ignore_index=True)


def _reward_verdict(row: dict[str, object]) -> str:
    diff = Estimate(float(row["d_reward"]), float(row["d_reward_ci95"]), 0)  # type: ignore[arg-type]
    return "n/a (training seeds differ)" if np.isnan(diff.mean) else diff.verdict()


def summary_table(summary: pd.DataFrame) -> tuple[list[list[str]], list[list[str]]]:
    """Two tables of `summary_frame`'s rows as strings: the levels (± 95% CI), and the
    paired differences against the baseline (± 95% CI) with the reward verdict."""
    titles = [BY_NAME[m].title for m in SUMMARY_METRICS]
    level_rows = [["policy", "train seeds", *titles, "CI over"]]
    paired_rows = [["policy", *(f"Δ {t}" for t in titles), "reward vs baseline", "CI over"]]
    for row in summary.to_dict("records"):
        seeds = str(row["train_seeds"]) if row["learner"] else "-"
        cells = [with_ci(row[m], row[f"{m}_ci95"], BY_NAME[m]) for m in SUMMARY_METRICS]
        level_rows.append([row["policy"], seeds, *cells, row["ci_over"]])
        diffs = [
            with_ci(row[f"d_{m}"], row[f"d_{m}_ci95"], BY_NAME[m], sign="+")
            if row["policy"] != row["baseline"]
            else "(baseline)"
            for m in SUMMARY_METRICS
        ]
        paired_rows.append([row["policy"], *diffs, row["verdict"], row["diff_over"]])
    return level_rows, paired_rows


def _per_world_means(runs: dict[int, Run], metric: str) -> np.ndarray:
    """[worlds] a policy's `metric` in each held-out world, the mean of its training seeds."""
    return np.mean([np.concatenate(run.values[metric]) for run in runs.values()], axis=0)


def world_table(policies: dict[str, dict[int, Run]], baseline: str) -> list[list[str]]:
    """Each learner against `baseline` world by world, the learner at the mean of its
    training seeds: the median world's difference in reward and in latency, and in how
    many worlds it does at least as well. A mean lead that a few worlds carry shows here
    as a median on the other side of zero."""
    reward, latency = REWARD, BY_NAME["latency_ms"]
    rows = [
        [
            "policy",
            "Δ reward, median world",
            "worlds with reward ≥ baseline's",
            f"Δ {latency.title}, median world",
            "worlds with latency ≤ baseline's",
        ]
    ]
    base = {m.name: _per_world_means(policies[baseline], m.name) for m in (reward, latency)}
    for policy, runs in policies.items():
        if FIXED in runs or policy == baseline:
            continue
        d_reward = _per_world_means(runs, reward.name) - base[reward.name]
        d_latency = _per_world_means(runs, latency.name) - base[latency.name]
        worlds = len(d_reward)
        rows.append(
            [
                policy,
                with_ci(float(np.median(d_reward)), float("nan"), reward, sign="+"),
                f"{int((d_reward >= 0).sum())} of {worlds}",
                with_ci(float(np.median(d_latency)), float("nan"), latency, sign="+"),
                f"{int((d_latency <= 0).sum())} of {worlds}",
            ]
        )
    return rows


# --- output ---------------------------------------------------------------------------


def _pm(estimate: Estimate) -> str:
    return with_ci(estimate.mean, estimate.half_width, sign="+")


def table(summaries: list[PolicySummary], baselines: Sequence[str]) -> list[list[str]]:
    """Header and one row per policy, as strings."""
    header = [
        "policy",
        "train seeds",
        "reward ± 95% CI",
        "CI over",
        *(metric.title for metric in TABLE_POINTS),
        "train steps",
    ]
    for base in baselines:
        header += [f"Δ reward vs {base} ± 95% CI", f"vs {base}"]
    rows = [header]
    for s in summaries:
        row = [
            s.policy,
            str(len(s.runs)) if s.learner else "-",
            _pm(s.reward),
            s.over,
            *(metric.cell(s.points[metric.name]) for metric in TABLE_POINTS),
            f"{s.train_steps:,.0f}",
        ]
        for base in baselines:
            if base == s.policy:
                row += ["(baseline)", ""]
            elif s.versus[base] is None:
                row += ["n/a (training seeds differ)", ""]
            else:
                diff, over = s.versus[base]
                suffix = " (eval seeds)" if over == "eval seeds" else ""
                row += [_pm(diff) + suffix, diff.verdict()]
        rows.append(row)
    return rows


def format_text(rows: list[list[str]]) -> str:
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if k == 0 or k == 3 else cell.rjust(w)
            for k, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    )


def format_markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def describe(policies: dict[str, dict[int, Run]], frame: pd.DataFrame) -> str:
    """One line: the split, the worlds, the rounds the learners were taken at."""
    any_run = next(iter(next(iter(policies.values())).values()))
    regions = len(any_run.values["reward"])
    per_region = len(any_run.worlds) // max(regions, 1)
    rounds = sorted({run.round for runs in policies.values() for run in runs.values() if run.round})
    taken = ", ".join(map(str, rounds)) if rounds else "-"
    return (
        f"held-out split '{frame['split'].iloc[0]}': {regions} regions x {per_region} worlds; "
        f"learners at round {taken}; rewards are means per job (higher is better); a "
        "learner's difference over several training seeds has an interval over both the "
        "training seeds and the eval seeds"
    )


def report(
    dirs: Sequence[str | Path],
    baselines: Sequence[str],
    *,
    round_: int | None = None,
    markdown: bool = False,
) -> str:
    """The report of `dirs` as text (or a Markdown table); ReportError on bad input."""
    if not baselines:
        raise ReportError("name at least one --baseline")
    frame = load(dirs)
    policies, left = collect_common(frame, round_)
    summaries = summarise(policies, baselines)
    rows = table(summaries, baselines)
    body = format_markdown(rows) if markdown else format_text(rows)
    note = f"\n{left_out_note(left)}" if left else ""
    return f"{describe(policies, frame)}{note}\n\n{body}"


def parse_round(text: str) -> int | None:
    """`--round`: 'last' (None) or a round number >= 1."""
    if text == "last":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ReportError(f"--round must be 'last' or a round number, got {text!r}") from None
    if value < 1:
        raise ReportError(f"--round must be >= 1, got {value}")
    return value
