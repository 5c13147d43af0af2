"""The one aligned table of policies that `fedmc run`, `baselines`, `train` and `transfer` print.

Its columns are `fedmc_flwr.metrics`' titles, so the table and `fedmc report` name each
statistic alike: cost, carbon and energy are means per job, and "per-world p95" is the
mean over held-out worlds of each world's 95th percentile of latency, as in the report.
`policy_table` is what each of them prints (a run from its metrics.csv and per_seed.csv
through `last_round_table`): every policy, best reward first, each paired against SED and
the two-tier heuristic on the same held-out worlds, under a title that says what was
evaluated.

A row judged on fewer regions' worlds than the others (a federated learner whose region
failed the last round's evaluation, beside dispatchers judged everywhere) is marked `*`,
and a footnote names the regions it lacks and, from the round's `failed` rows, why: its
figures are over its own regions, its vs columns paired on them (`paired_against`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from fedmc_flwr.analysis.statistics import Estimate, paired_difference
from fedmc_flwr.metrics import BY_NAME, POINT_METRICS, Metric
from fedmc_flwr.results import PER_SEED_FILE, read_per_seed

REWARD = BY_NAME["reward"]

_HEADERS = ("policy", "reward ± ci95", *(metric.title for metric in POINT_METRICS))


def with_ci(value: float, half_width: float, metric: Metric = REWARD, sign: str = "") -> str:
    """`value ± half_width` in the metric's table unit, the one way every table writes an
    interval: "n/a" without a value, the value alone without an interval; `sign="+"`
    marks a difference."""
    if math.isnan(value):
        return "n/a"
    text = format(value * metric.scale, sign + metric.fmt)
    if math.isnan(half_width):
        return text
    return f"{text} ± {metric.cell(half_width)}"


PAIRED_BASELINES = ("sed", "two-tier")
"""The dispatchers `fedmc run`'s table pairs every policy against: the strongest classic
dispatcher and the two-tier heuristic a platform would otherwise deploy."""

Paired = Mapping[str, Mapping[str, Estimate]]
"""Per policy, per baseline: the paired difference of rewards."""


def paired_against(
    per_seed: pd.DataFrame, baselines: Sequence[str]
) -> dict[str, dict[str, Estimate]]:
    """Each policy's reward minus each baseline's on the same held-out worlds (one run's
    per_seed.csv rows, each policy at its last round), with the CI over those worlds,
    regions as strata (`paired_difference`), over the regions both were judged in (a
    region that failed a round's evaluation has no learner rows in it). Baselines the
    run lacks are left out."""
    last = per_seed.groupby("policy")["round"].transform("max")
    rows = per_seed[per_seed["round"] == last]
    judged = {p: list(dict.fromkeys(group["client"])) for p, group in rows.groupby("policy")}

    def per_region(policy: str, regions: Sequence[str]) -> list[pd.Series]:
        mine = rows[rows["policy"] == policy].set_index(["client", "eval_seed"])["reward"]
        return [mine.loc[region].sort_index() for region in regions]

    present = [name for name in baselines if name in judged]
    out: dict[str, dict[str, Estimate]] = {}
    for policy in dict.fromkeys(rows["policy"]):
        out[policy] = {}
        for baseline in present:
            # a region that failed the last round's evaluation has no worlds to pair
            regions = [r for r in judged[baseline] if r in set(judged[policy])]
            mine, theirs = per_region(policy, regions), per_region(baseline, regions)
            for a, b in zip(mine, theirs, strict=True):
                if not a.index.equals(b.index):
                    raise ValueError(f"{policy} and {baseline} were judged on other worlds")
            out[policy][baseline] = paired_difference(
                [a.to_numpy() for a in mine], [b.to_numpy() for b in theirs]
            )
    return out


MARK = "*"
"""Marks a row judged on fewer regions' worlds than the table's others (its footnote names
the regions left out)."""


def judged_regions(rows: Sequence[Mapping[str, object]]) -> dict[str, list[str]]:
    """Per policy, the regions it has a row of its own for (metrics.csv's per-region rows,
    in order): the worlds its `client="all"` row is a mean over."""
    regions: dict[str, list[str]] = {}
    for row in rows:
        mine = regions.setdefault(str(row["policy"]), [])
        if row["client"] != "all" and row["client"] not in mine:
            mine.append(str(row["client"]))
    return regions


def left_out(rows: Sequence[Mapping[str, object]]) -> dict[str, list[str]]:
    """Per policy judged on fewer regions than the table's others, the regions it lacks
    (say one whose evaluation failed in the round). A policy without per-region rows is
    not counted: its regions are not known."""
    regions = judged_regions(rows)
    every = list(dict.fromkeys(r for mine in regions.values() for r in mine))
    return {
        policy: [r for r in every if r not in mine]
        for policy, mine in regions.items()
        if mine and len(mine) < len(every)
    }


def _cells(row: dict, paired: Paired, baselines: Sequence[str], marked: bool) -> list[str]:
    differences = []
    for name in baselines:
        d = paired[row["policy"]][name]
        differences.append(
            "-" if row["policy"] == name else with_ci(d.mean, d.half_width, sign="+")
        )
    return [
        row["policy"] + (MARK if marked else ""),
        with_ci(row["reward"], row["reward_ci95"]),
        *differences,
        *(metric.cell(row[metric.csv_column]) for metric in POINT_METRICS),
    ]


def footnote(missing: Mapping[str, Sequence[str]], of: int, why: Mapping[str, str]) -> str:
    """The lines under a table that say which marked row lacks which regions' worlds
    (`left_out`), out of `of` regions, and why, where `why` (region -> reason) says."""
    lines = [
        f"{MARK} {policy}: judged on {of - len(regions)} of {of} regions' worlds, without "
        f"{', '.join(regions)}; its figures are over the other regions, its vs columns "
        "paired with each baseline there."
        for policy, regions in missing.items()
    ]
    named = dict.fromkeys(r for regions in missing.values() for r in regions if r in why)
    lines += [f"  {region} left out: {why[region]}" for region in named]
    return "\n".join(lines)


def format_table(
    rows: list[dict], paired: Paired | None = None, why: Mapping[str, str] | None = None
) -> str:
    """The `client="all"` rows (metrics.csv's columns), aligned; with `paired`, a column
    per baseline of each policy's paired reward difference against it (± its 95% CI over
    the held-out worlds). A row judged on fewer regions' worlds than the others (from the
    per-region rows among `rows`) is marked, and a footnote names the regions it lacks
    and, from `why` (region -> reason), why."""
    baselines = list(next(iter(paired.values()))) if paired else []
    missing = left_out(rows)
    headers = [*_HEADERS[:2], *(f"vs {name} ± ci95" for name in baselines), *_HEADERS[2:]]
    body = [
        _cells(row, paired or {}, baselines, row["policy"] in missing)
        for row in rows
        if row["client"] == "all"
    ]
    widths = [max(map(len, column)) for column in zip(headers, *body, strict=True)]
    table = "\n".join(
        "  ".join(
            cell.ljust(width) if k == 0 else cell.rjust(width)
            for k, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in [headers, *body]
    )
    if not missing:
        return table
    every = len({r for mine in judged_regions(rows).values() for r in mine})
    return f"{table}\n{footnote(missing, every, why or {})}"


PAIRED_NOTE = (
    "reward: higher is better. vs X: reward minus X's on the same held-out worlds, "
    "± 95% CI over those worlds"
)


def policy_table(
    title: str,
    rows: Sequence[Mapping[str, object]],
    per_seed: pd.DataFrame | None,
    why: Mapping[str, str] | None = None,
    *,
    trained: bool = True,
) -> str:
    """The table every command that evaluates policies prints (`run`, `train`,
    `baselines`, `transfer`): `title`, then the `client="all"` rows of `rows` (metrics.csv's
    columns, the per-region rows beside them) best reward first, each paired against
    `PAIRED_BASELINES` on the same held-out worlds from `per_seed` (per_seed.csv's rows),
    and the note that says how to read it, "(one training seed)" where a policy was
    `trained`. A row judged on fewer regions than the others is marked, with the reasons
    in `why` (region -> reason) under the table."""
    rewards = [float(row["reward"]) for row in rows]  # type: ignore[arg-type]
    order = sorted(range(len(rows)), key=lambda k: (math.isnan(rewards[k]), -rewards[k]))
    ranked = [rows[k] for k in order]  # best first, a row without a reward last
    paired = None if per_seed is None else paired_against(per_seed, PAIRED_BASELINES)
    table = format_table([dict(row) for row in ranked], paired, why)
    scope = " (one training seed)." if trained else "."
    note = f"\n{PAIRED_NOTE}{scope}" if paired else ""
    return f"{title}\n{table}{note}"


def last_round_table(csv_path: Path) -> str:
    """The last round's held-out evaluation of a metrics.csv over all regions
    (`policy_table`), with per_seed.csv beside it for the vs columns and the round's
    `failed` rows for the reasons a region was left out."""
    frame = pd.read_csv(csv_path, dtype={"client": str})
    evals = frame[frame["phase"] == "eval"]
    last = int(evals["round"].max())
    rows = evals[evals["round"] == last].drop(columns=["reason"], errors="ignore")
    failed = frame[(frame["phase"] == "failed") & (frame["round"] == last)]
    why = failed.astype({"reason": str}).groupby("client")["reason"].agg("; ".join).to_dict()
    per_seed = csv_path.parent / PER_SEED_FILE
    return policy_table(
        f"round {last}, held-out evaluation, mean over regions:",
        rows.to_dict("records"),
        read_per_seed(per_seed) if per_seed.is_file() else None,
        why,
    )


def duration(seconds: float) -> str:
    """`42 s`, `3 min 20 s` or `2 h 05 min`: as precise as a person reads it."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
