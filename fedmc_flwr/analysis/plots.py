"""Plots of any metrics.csv: how the learners' evaluation changes round by round.

Learners (policies named `ppo-*`) are drawn as curves over rounds with their 95% bands;
dispatchers do not learn, so each is one horizontal line at its mean over the rounds it
was evaluated in. Only the `client="all"` evaluation rows are used: the mean over regions
on held-out seeds, the figure every producer of metrics.csv writes.

Two curves with overlapping bands can still differ: every policy meets the same held-out
worlds, so the honest comparison is paired. When per_seed.csv lies next to metrics.csv,
`paired.png` draws each learner minus each named baseline (default: SED and two-tier),
per round, paired per evaluation seed and stratified over regions, with its 95% band over
evaluation seeds; above 0 means better than the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

PANELS = (
    ("reward", "reward_ci95", "mean reward per job (higher is better)", "reward.png"),
    ("latency_ms", None, "mean latency per job (ms)", "latency.png"),
)
"""(column, its CI column or None, axis label, file name) of each plot."""
DEFAULT_BASELINES = ("sed", "two-tier")
"""Dispatchers the paired plot compares with when none are named (those present)."""


def _is_learner(policy: str) -> bool:
    return policy.startswith("ppo")


def _eval_rows(csv_path: Path) -> pd.DataFrame:
    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such metrics file")
    frame = pd.read_csv(csv_path)
    missing = {"round", "phase", "client", "policy", "reward", "latency_ms"} - set(frame.columns)
    if missing:
        raise ValueError(f"{csv_path}: not a metrics.csv (no columns {sorted(missing)})")
    rows = frame[(frame["phase"] == "eval") & (frame["client"] == "all")]
    if rows.empty:
        raise ValueError(f"{csv_path}: no evaluation rows with client 'all' to plot")
    return rows.sort_values("round")


def _panel(rows: pd.DataFrame, column: str, ci: str | None, label: str, title: str) -> Figure:
    # A bare Figure (no pyplot): no GUI backend, no global figure registry to leak into.
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    rounds = sorted(rows["round"].unique())
    span = (min(rounds) - 0.2, max(rounds) + 0.2)
    for k, (policy, group) in enumerate(rows.groupby("policy", sort=False)):
        color = f"C{k % 10}"
        if _is_learner(policy):
            ax.plot(group["round"], group[column], "o-", color=color, lw=2, label=policy)
            if ci is not None and group[ci].notna().any():
                ax.fill_between(
                    group["round"],
                    group[column] - group[ci],
                    group[column] + group[ci],
                    color=color,
                    alpha=0.2,
                )
        else:
            ax.hlines(
                group[column].mean(), *span, colors=color, linestyles="--", lw=1, label=policy
            )
    return _finish(fig, ax, label, title, span)


def _paired_panel(diffs: dict[str, pd.DataFrame], title: str) -> Figure:
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    k = 0
    rounds: set[int] = set()
    for baseline, frame in diffs.items():
        for policy, group in frame.groupby("policy", sort=True):
            color = f"C{k % 10}"
            k += 1
            rounds |= set(group["round"])
            label = f"{policy} - {baseline}"
            ax.plot(group["round"], group["mean"], "o-", color=color, lw=2, label=label)
            ax.fill_between(
                group["round"],
                group["mean"] - group["half_width"],
                group["mean"] + group["half_width"],
                color=color,
                alpha=0.2,
            )
    span = (min(rounds) - 0.2, max(rounds) + 0.2)
    ax.axhline(0.0, color="black", lw=1)
    ylabel = "paired difference in reward per job\n(> 0: learner better; 95% CI)"
    return _finish(fig, ax, ylabel, title, span)


def _finish(fig: Figure, ax: Axes, ylabel: str, title: str, span: tuple[float, float]) -> Figure:
    """Axes, labels and legend every per-round panel shares."""
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xlim(*span)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def paired_differences(
    per_seed_path: Path, baselines: Sequence[str] | None = None
) -> dict[str, pd.DataFrame]:
    """baseline -> every learner's paired difference to it per round (`paired_by_round`).
    Named baselines must be in the file; by default those of DEFAULT_BASELINES that are."""
    from fedmc_flwr.analysis.report import paired_by_round
    from fedmc_flwr.results import read_per_seed

    frame = read_per_seed(per_seed_path)
    present = set(frame.loc[frame["round"] == 0, "policy"])
    if baselines is None:
        baselines = [b for b in DEFAULT_BASELINES if b in present]
    missing = [b for b in baselines if b not in present]
    if missing:
        raise ValueError(f"{per_seed_path}: no baseline {missing[0]!r}; has {sorted(present)}")
    if not (frame["round"] > 0).any():
        return {}
    return {b: paired_by_round(frame, b) for b in baselines}


def plot_metrics(
    csv_path: Path, out_dir: Path | None = None, baselines: Sequence[str] | None = None
) -> list[Path]:
    """Draw the reward and latency curves of `csv_path` into `out_dir` (default: its
    `plots/` folder), and, when per_seed.csv is next to it and has learners, the paired
    differences against `baselines` (`paired.png`); return the PNG paths."""
    from fedmc_flwr.results import PER_SEED_FILE

    csv_path = Path(csv_path)
    rows = _eval_rows(csv_path)
    out_dir = csv_path.parent / "plots" if out_dir is None else Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    experiment = str(rows["experiment"].iloc[0]) if "experiment" in rows else csv_path.stem
    paths = []
    for column, ci, label, name in PANELS:
        fig = _panel(rows, column, ci, label, f"{experiment}: held-out evaluation, all regions")
        path = out_dir / name
        fig.savefig(path, dpi=120, bbox_inches="tight")
        paths.append(path)
    per_seed = csv_path.parent / PER_SEED_FILE
    if per_seed.is_file():
        diffs = paired_differences(per_seed, baselines)
        if any(not frame.empty for frame in diffs.values()):
            title = f"{experiment}: learner minus baseline, paired per held-out world"
            path = out_dir / "paired.png"
            _paired_panel(diffs, title).savefig(path, dpi=120, bbox_inches="tight")
            paths.append(path)
    elif baselines:
        raise FileNotFoundError(f"{per_seed}: no per-seed file for the paired plot")
    return paths
