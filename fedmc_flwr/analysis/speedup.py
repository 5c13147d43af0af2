"""The speed-up of federation, read from `fedmc speedup`'s speedup.csv.

Each row is one held-out world after one round of one cell (federation size `regions`,
`train_seed`): the federated greedy policy's mean reward per job there (`reward`) and the
baseline dispatcher's on the same world (`baseline`). Per cell:

- steps to beat the baseline: the steps per env of each region (`steps`, the rounds times
  `train.steps_per_round`) at the first round whose difference reward - baseline, paired
  over the held-out worlds, has its 95% interval above 0 (`statistics.paired_difference`);
  NaN when no round within the budget does;
- the return at the budget: the mean reward over the held-out worlds at the last round
  (per size, its 95% interval over the training seeds), and its paired difference
  against the baseline (per size, over the training seeds and the held-out worlds).

The speed-up of k regions is one region's mean steps to beat the baseline over k regions'
(linear: k); it is given only when every seed of both sizes beat it within the budget,
since a seed that never did has no number of steps to average.

`overview` sets several speed-up files side by side, each read with the plan its folder
was measured with (plan.yaml): which region's worlds, what schedule and what server step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import yaml
from matplotlib.figure import Figure

from fedmc_flwr.analysis.statistics import (
    Estimate,
    over_training_seeds,
    paired_difference,
    paired_over_seeds_and_worlds,
)
from fedmc_flwr.analysis.tables import with_ci
from fedmc_flwr.sim.regions import region_catalogue

SPEEDUP_FILE = "speedup.csv"
PLAN_FILE = "plan.yaml"
"""What a folder was measured with: the plan's grid, then the resolved experiment."""
COLUMNS = ["regions", "train_seed", "round", "steps", "eval_seed", "reward", "baseline"]
CELL = ["regions", "train_seed"]


def read_speedup(path: Path) -> pd.DataFrame:
    """speedup.csv, checked for its columns."""
    frame = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")
    return frame


def per_round(frame: pd.DataFrame) -> pd.DataFrame:
    """Per cell and round: the paired difference reward - baseline over the held-out
    worlds (`d`, its 95% half-width `d_ci95`) and the mean reward."""
    rows = []
    for (size, seed, rnd, steps), group in frame.groupby([*CELL, "round", "steps"]):
        diff = paired_difference([group["reward"].to_numpy()], [group["baseline"].to_numpy()])
        rows.append(
            {
                "regions": size,
                "train_seed": seed,
                "round": rnd,
                "steps": steps,
                "reward": float(group["reward"].mean()),
                "d": diff.mean,
                "d_ci95": diff.half_width,
                "beats": diff.low > 0,
            }
        )
    return pd.DataFrame(rows)


def per_cell(frame: pd.DataFrame) -> pd.DataFrame:
    """Per cell: the steps to beat the baseline (NaN: not within the budget), and the mean
    reward and paired difference at the last round (the budget)."""
    rounds = per_round(frame)
    rows = []
    for (size, seed), cell in rounds.groupby(CELL):
        cell = cell.sort_values("round")
        beaten = cell.loc[cell["beats"], "steps"]
        last = cell.iloc[-1]
        rows.append(
            {
                "regions": int(size),
                "train_seed": int(seed),
                "steps_to_beat": float(beaten.iloc[0]) if len(beaten) else math.nan,
                "budget": int(last["steps"]),
                "reward_at_budget": float(last["reward"]),
                "d_at_budget": float(last["d"]),
            }
        )
    return pd.DataFrame(rows)


def _at_budget(frame: pd.DataFrame) -> Estimate:
    """reward - baseline at each seed's last round, paired per held-out world, over the
    training seeds and the worlds (`paired_over_seeds_and_worlds`: the worlds' spread
    counts too, since every seed meets the same ones); over the worlds alone for one seed."""
    last = frame[frame["round"] == frame.groupby("train_seed")["round"].transform("max")]
    diffs = [
        [(seed["reward"] - seed["baseline"]).to_numpy()]
        for _, seed in last.sort_values("eval_seed").groupby("train_seed")
    ]
    if len(diffs) == 1:
        return paired_difference([last["reward"].to_numpy()], [last["baseline"].to_numpy()])
    return paired_over_seeds_and_worlds(diffs)


def summary(frame: pd.DataFrame, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per federation size: the steps to beat the baseline per seed and their mean (NaN
    unless every seed beat it), the speed-up over one region (one region's mean over this
    size's), and the reward at the budget over the seeds, with its 95% half-width.
    `cells`: `per_cell(frame)`, where the caller has it already."""
    cells = per_cell(frame) if cells is None else cells
    rows = []
    for size, group in cells.groupby("regions"):
        steps = group.sort_values("train_seed")["steps_to_beat"].to_numpy()
        reward = over_training_seeds(group["reward_at_budget"])
        diff = _at_budget(frame[frame["regions"] == size])
        rows.append(
            {
                "regions": int(size),
                "seeds": len(group),
                "steps_per_seed": steps,
                "steps_mean": float(steps.mean()) if not np.isnan(steps).any() else math.nan,
                "budget": int(group["budget"].max()),
                "reward": reward.mean,
                "reward_ci95": reward.half_width,
                "d": diff.mean,
                "d_ci95": diff.half_width,
            }
        )
    table = pd.DataFrame(rows).sort_values("regions", ignore_index=True)
    one = table.loc[table["regions"] == 1, "steps_mean"]
    table["speedup"] = (float(one.iloc[0]) if len(one) else math.nan) / table["steps_mean"]
    return table


def _steps(value: float, budget: int) -> str:
    return f"> {budget}" if np.isnan(value) else f"{value:.0f}"


def markdown(frame: pd.DataFrame, baseline: str = "sed") -> str:
    """The speed-up table: one row per federation size."""
    table = summary(frame)
    lines = [
        f"| regions | steps to beat `{baseline}`, per seed | mean | speed-up (linear: regions) "
        f"| reward at the budget | reward - `{baseline}` at the budget |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for row in table.to_dict("records"):
        budget = row["budget"]
        per_seed = ", ".join(_steps(s, budget) for s in row["steps_per_seed"])
        speedup = "" if np.isnan(row["speedup"]) else f"{row['speedup']:.2f}x"
        lines.append(
            f"| {row['regions']} | {per_seed} | {_steps(row['steps_mean'], budget)} "
            f"| {speedup} | {with_ci(row['reward'], row['reward_ci95'])} "
            f"| {with_ci(row['d'], row['d_ci95'], sign='+')} |"
        )
    return "\n".join(lines) + "\n" + _reading(table, baseline)


def _reading(table: pd.DataFrame, baseline: str) -> str:
    """One line under the table: the largest federation's steps to beat the baseline as a
    share of one region's, against linear speed-up's share."""
    largest = table.iloc[-1]
    if largest["regions"] == 1 or np.isnan(largest["speedup"]):
        return ""
    share = 1 / largest["speedup"]
    return (
        f"\n{largest['regions']} regions beat `{baseline}` in {share:.2f} of one region's "
        f"steps per env (linear speed-up: 1/{largest['regions']} = "
        f"{1 / largest['regions']:.3f}; the target: at most 0.25).\n"
    )


def plot(frame: pd.DataFrame, path: Path, baseline: str = "sed") -> Path:
    """Two panels: the paired difference against the baseline per round for each size
    (mean over seeds), and the steps to beat it against the size, each seed a dot, beside
    linear speed-up from one region's mean."""
    rounds = per_round(frame)
    table = summary(frame)
    cells = per_cell(frame)
    fig = Figure(figsize=(10, 4))
    curves, steps = fig.subplots(1, 2)
    for k, (size, group) in enumerate(rounds.groupby("regions")):
        mean = group.groupby("steps")["d"].mean()
        curves.plot(mean.index, mean.to_numpy(), marker="o", ms=3, color=f"C{k}", label=f"{size}")
    curves.axhline(0, color="grey", lw=1)
    curves.set_xlabel("steps per env of each region")
    curves.set_ylabel(f"reward - {baseline}, paired (mean over seeds)")
    curves.legend(title="regions")
    sizes = table["regions"].to_numpy()
    for k, size in enumerate(sizes):
        reached = cells.loc[cells["regions"] == size, "steps_to_beat"].dropna()
        steps.scatter([size] * len(reached), reached, color=f"C{k}", alpha=0.6, zorder=3)
    steps.plot(sizes, table["steps_mean"], color="black", marker="s", label="mean over seeds")
    one = table.loc[table["regions"] == 1, "steps_mean"]
    if len(one) and not np.isnan(one.iloc[0]):
        steps.plot(sizes, one.iloc[0] / sizes, color="grey", ls="--", label="linear speed-up")
    steps.set_xscale("log", base=2)
    steps.set_xlim(sizes.min() / 1.5, sizes.max() * 1.5)
    steps.set_ylim(bottom=0)
    steps.set_xticks(sizes, [str(s) for s in sizes])
    steps.set_xlabel("regions")
    steps.set_ylabel(f"steps per env of each region to beat {baseline}")
    steps.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def server_label(plan: dict) -> str:
    """How a plan's regions combine their learning, in a table's words, from its plan.yaml:
    the pooled learner, or the server's step on the regions' mean update; then the
    settings that only the sizes above one region train with (the plan's `together`)."""
    together = plan.get("together")
    return _combine_label(plan) + (f"; above 1 region: {', '.join(together)}" if together else "")


def _combine_label(plan: dict) -> str:
    if plan.get("pooled"):
        return "none: one learner on k times the envs"
    federation = plan["federation"]
    step, rate = federation["server_optimizer"], federation["server_learning_rate"]
    labels = {
        "none": "FedAvg",
        "fedexp": f"FedExP, at most {rate:g}",
        "fedadam": f"FedAdam, step {rate:g}",
        "fedavgm": f"step {rate:g}"
        if federation["server_momentum"] == 0
        else f"FedAvgM, step {rate:g}, momentum {federation['server_momentum']:g}",
    }
    label = labels[step]
    if federation["drift_correction"] != "none":
        label += f", {federation['drift_correction']}"
    return label


class Measured(NamedTuple):
    """One speed-up folder as the overview reads it."""

    name: str
    plan: dict
    region: str
    table: pd.DataFrame
    """`summary`, indexed by size."""
    cells: pd.DataFrame
    """`per_cell`, indexed by size and training seed."""

    def schedule(self) -> str:
        """The plan but for how the regions combine (pooled, or the server's step): what
        a pooled file and a federated one must share to be compared seed by seed, the
        region's worlds, the rounds and the learner among it."""
        rest = {k: v for k, v in self.plan.items() if k not in ("pooled", "federation")}
        return yaml.safe_dump(rest)


def _measured(name: str, folder: Path) -> Measured | None:
    csv = folder / SPEEDUP_FILE
    if not csv.is_file():
        return None
    plan = yaml.safe_load((folder / PLAN_FILE).read_text())
    frame = read_speedup(csv)
    region = region_catalogue(plan["world"]["regions"])[plan["region"]].name
    cells = per_cell(frame)
    table = summary(frame, cells).set_index("regions")
    return Measured(name, plan, region, table, cells.set_index(CELL))


def overview(
    folders: list[tuple[str, Path]],
    kept: Mapping[str, Mapping[str, str]] | None = None,
    kept_lines: Sequence[str] = (),
) -> str:
    """One row per measured speed-up folder (`(file, folder)` pairs): whose worlds, the
    rounds, the server's step, each size's mean steps to beat the baseline over the
    seeds, and the largest size's share of one region's steps. Files measured on
    different regions' worlds sit side by side, so a verdict read on one region can be
    checked on the others; under the table, each federated file against the pooled file
    of its region and schedule, seed by seed (`against_pooled`).

    An unmeasured file is left out, or given its row from `kept` (by column, as a page
    last published it) and its lines from `kept_lines`: a checkout that holds some
    files' results rewrites their rows and keeps the others'."""
    kept = kept or {}
    measured = {name: m for name, folder in folders if (m := _measured(name, folder))}
    names = [name for name, _ in folders if name in measured or name in kept]
    if not names:
        return ""
    sizes = set().union(
        *(set(m.table.index) for m in measured.values()),
        *(_sizes(kept[name]) for name in names if name not in measured),
    )
    order = sorted(sizes)
    header = ["file", "worlds of", "rounds", "server", *map(_size_column, order)]
    header.append(f"{order[-1]} over 1")
    lines = ["| " + " | ".join(header) + " |", "|---|---|---|---|" + "---:|" * (len(order) + 1)]
    for name in names:
        row = _row(measured[name], order) if name in measured else kept[name]
        lines.append("| " + " | ".join(row.get(column, "-") for column in header) + " |")
    versus = [*against_pooled(list(measured.values())), *kept_lines]
    return "\n".join(lines) + "\n" + ("\n" + "\n".join(versus) + "\n" if versus else "")


def _size_column(size: int) -> str:
    return f"{size} {'region' if size == 1 else 'regions'}"


def _sizes(row: Mapping[str, str]) -> set[int]:
    """The federation sizes a published row has columns for."""
    return {int(match[1]) for column in row if (match := re.fullmatch(r"(\d+) regions?", column))}


def _row(m: Measured, order: Sequence[int]) -> dict[str, str]:
    """`m`'s overview row, by column."""
    table, train = m.table, m.plan["train"]
    row = {
        "file": f"`{m.name}`",
        "worlds of": f"{m.region} (region {m.plan['region']})",
        "rounds": f"{train['rounds']} × {train['steps_per_round']} steps",
        "server": server_label(m.plan),
    }
    for k in order:
        if k in table.index:
            row[_size_column(k)] = _steps(table.at[k, "steps_mean"], table.at[k, "budget"])
    largest = order[-1]
    if {1, largest} <= set(table.index):
        share = table.at[largest, "steps_mean"] / table.at[1, "steps_mean"]
        if not np.isnan(share):
            row[f"{largest} over 1"] = f"{share:.2f}"
    return row


def against_pooled(rows: list[Measured]) -> list[str]:
    """Per federated file with a pooled file of the same plan but for the server
    (`Measured.schedule`: the region, the rounds, the learner): at the
    largest size both measured, in how many training seeds the federation beat the
    baseline in fewer steps than the pooled learner, in as many, and in more (a seed
    that never did counts as the most). The means alone can hide a verdict that one
    seed makes."""
    pooled = {m.schedule(): m for m in rows if m.plan.get("pooled")}
    lines = []
    for m in rows:
        reference = pooled.get(m.schedule())
        if m.plan.get("pooled") or reference is None:
            continue
        sizes = set(m.table.index) & set(reference.table.index) - {1}
        if not sizes:
            continue
        size = max(sizes)
        ours, theirs = (
            frame.loc[size, "steps_to_beat"].fillna(math.inf)
            for frame in (m.cells, reference.cells)
        )
        seeds = ours.index.intersection(theirs.index)
        ours, theirs = ours[seeds], theirs[seeds]
        budget = max(m.table.at[size, "budget"], reference.table.at[size, "budget"])
        lines.append(
            f"- {m.region} (region {m.plan['region']}), {size} regions: `{m.name}` "
            f"({server_label(m.plan)}) beat `{m.plan['baseline']}` in fewer steps than "
            f"`{reference.name}` in "
            f"{(ours < theirs).sum()} of {len(seeds)} training seeds, as few in "
            f"{(ours == theirs).sum()}, more in {(ours > theirs).sum()} (means "
            f"{_steps(m.table.at[size, 'steps_mean'], budget)} against "
            f"{_steps(reference.table.at[size, 'steps_mean'], budget)})."
        )
    return lines
