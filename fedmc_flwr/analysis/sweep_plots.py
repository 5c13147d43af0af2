"""Plots of a sweep folder (`fedmc plot results/sweeps/<name>`), as PNG and SVG.

They read what `fedmc sweep` wrote: `curves.csv` (per policy, training seed, round and
region, the mean over held-out worlds) and `summary.csv` (per policy, levels and paired
differences with their 95% intervals).

- `curves_reward`, `curves_latency`: one panel per learner; a thin line per region, the
  mean over regions in bold with its 95% band over training seeds, and the baseline
  dispatcher (or the best one) as a dashed reference.
- `per_round`: cost, carbon and SLO violations per job, round by round, every learner.
- `paired`: every policy's reward minus the baseline's, paired per held-out world, with
  its 95% interval (training seeds and worlds for learners).
- `pareto`: mean latency against carbon per job, every policy, its Pareto front joined.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from fedmc_flwr.analysis.statistics import over_training_seeds
from fedmc_flwr.metrics import METRICS

FORMATS = ("png", "svg")
LABELS = {
    m.name: (m.label, m.scale, "higher is better" if m.higher_is_better else "lower is better")
    for m in METRICS
}
"""metric -> (axis label with unit, scale from the CSV's unit, direction)."""


def _read(folder: Path, name: str) -> pd.DataFrame:
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (run `fedmc sweep` first)")
    return pd.read_csv(path)


def _save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    paths = []
    for fmt in FORMATS:
        path = out_dir / f"{stem}.{fmt}"
        fig.savefig(path, dpi=130, bbox_inches="tight")
        paths.append(path)
    return paths


def _band(curves: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per round: the mean over regions per training seed, then its mean and 95%
    half-width over training seeds (NaN with one seed)."""
    per_seed = curves.groupby(["round", "train_seed"])[metric].mean().reset_index()
    rows = []
    for rnd, group in per_seed.groupby("round"):
        estimate = over_training_seeds(group[metric].to_numpy())
        rows.append({"round": rnd, "mean": estimate.mean, "half_width": estimate.half_width})
    return pd.DataFrame(rows)


def _band_label(curves: pd.DataFrame) -> str:
    if curves["train_seed"].nunique() < 2:
        return "one training seed: no band"
    return "95% CI over training seeds"


def _learner_ci(summary: pd.DataFrame) -> str:
    """What the learners' difference intervals are over (summary.csv's diff_over)."""
    return " / ".join(sorted(set(summary.loc[summary["learner"], "diff_over"].dropna())))


def _reference(summary: pd.DataFrame) -> str:
    """The dispatcher drawn as the dashed line: the baseline if it is one, else the best."""
    dispatchers = summary[~summary["learner"]]
    baseline = str(summary["baseline"].iloc[0])
    if baseline in set(dispatchers["policy"]):
        return baseline
    return str(dispatchers.sort_values("reward", ascending=False)["policy"].iloc[0])


def _learning_curves(curves: pd.DataFrame, summary: pd.DataFrame, metric: str) -> Figure:
    label, scale, direction = LABELS[metric]
    learners = list(summary.loc[summary["learner"], "policy"])
    columns = min(3, len(learners))
    rows = math.ceil(len(learners) / columns)
    fig = Figure(figsize=(4.2 * columns, 3.2 * rows + 0.6))
    axes = np.atleast_1d(fig.subplots(rows, columns, sharex=True, sharey=True, squeeze=False))
    reference = _reference(summary)
    ref_level = curves.loc[curves["policy"] == reference, metric].mean() * scale
    regions = sorted(curves["client"].unique())
    for ax, policy in zip(axes.flat, learners, strict=False):
        mine = curves[curves["policy"] == policy]
        for k, region in enumerate(regions):
            per_region = mine[mine["client"] == region].groupby("round")[metric].mean()
            ax.plot(
                per_region.index,
                per_region * scale,
                lw=0.8,
                alpha=0.7,
                color=f"C{k + 1}",
                label=region,
            )
        band = _band(mine, metric)
        ax.plot(
            band["round"], band["mean"] * scale, "o-", color="C0", lw=2.2, label="mean over regions"
        )
        ax.fill_between(
            band["round"],
            (band["mean"] - band["half_width"]) * scale,
            (band["mean"] + band["half_width"]) * scale,
            color="C0",
            alpha=0.2,
            label=_band_label(mine),
        )
        ax.axhline(ref_level, color="black", ls="--", lw=1, label=f"{reference} (dispatcher)")
        ax.set_title(policy, fontsize=10)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes.flat[len(learners) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("round")
    for ax in axes[:, 0]:
        ax.set_ylabel(label)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(
        handles, names, loc="lower center", ncol=len(names), fontsize=8, bbox_to_anchor=(0.5, -0.02)
    )
    fig.suptitle(f"Held-out {label} per round ({direction})")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def _per_round(curves: pd.DataFrame, summary: pd.DataFrame) -> Figure:
    metrics = ("cost_usd", "carbon_g", "slo_violation")
    fig = Figure(figsize=(14, 4.2))
    axes = fig.subplots(1, len(metrics))
    learners = list(summary.loc[summary["learner"], "policy"])
    reference = _reference(summary)
    for ax, metric in zip(axes, metrics, strict=True):
        label, scale, direction = LABELS[metric]
        for k, policy in enumerate(learners):
            band = _band(curves[curves["policy"] == policy], metric)
            ax.plot(
                band["round"], band["mean"] * scale, "o-", color=f"C{k}", lw=1.6, ms=3, label=policy
            )
            ax.fill_between(
                band["round"],
                (band["mean"] - band["half_width"]) * scale,
                (band["mean"] + band["half_width"]) * scale,
                color=f"C{k}",
                alpha=0.15,
            )
        level = curves.loc[curves["policy"] == reference, metric].mean() * scale
        ax.axhline(level, color="black", ls="--", lw=1, label=f"{reference} (dispatcher)")
        ax.set_xlabel("round")
        ax.set_ylabel(label)
        ax.set_title(f"{label}\n({direction})", fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(
        "Held-out cost, carbon and SLO violations per round "
        "(mean over regions, 95% CI over training seeds)"
    )
    fig.tight_layout()
    return fig


def _paired_bars(summary: pd.DataFrame) -> Figure:
    baseline = str(summary["baseline"].iloc[0])
    rows = summary[summary["policy"] != baseline].dropna(subset=["d_reward"])
    rows = rows.sort_values("d_reward")
    fig = Figure(figsize=(8, 0.42 * len(rows) + 1.6))
    ax = fig.subplots()
    colors = ["C0" if learner else "C7" for learner in rows["learner"]]
    ax.barh(
        rows["policy"],
        rows["d_reward"],
        xerr=rows["d_reward_ci95"].fillna(0),
        color=colors,
        capsize=3,
        alpha=0.85,
    )
    ax.axvline(0, color="black", lw=1)
    ax.set_xlabel(
        f"reward per job minus {baseline}'s, paired per held-out world\n"
        f"(> 0: better; 95% CI; blue learners over {_learner_ci(summary)}, "
        "grey dispatchers over eval seeds)"
    )
    ax.set_title(f"Paired difference against {baseline}")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def pareto_front(points: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The rows no other row beats on both x and y (lower is better), sorted by x."""
    ordered = points.sort_values([x, y])
    front, best = [], math.inf
    for index, row in ordered.iterrows():
        if row[y] < best:
            front.append(index)
            best = row[y]
    return ordered.loc[front]


def _pareto(summary: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(8, 5.5))
    ax = fig.subplots()
    scale = LABELS["carbon_g"][1]
    for learner, marker, color in ((True, "o", "C0"), (False, "s", "C7")):
        rows = summary[summary["learner"] == learner]
        ax.errorbar(
            rows["latency_ms"],
            rows["carbon_g"] * scale,
            xerr=rows["latency_ms_ci95"].fillna(0),
            yerr=rows["carbon_g_ci95"].fillna(0) * scale,
            fmt=marker,
            color=color,
            ecolor=color,
            elinewidth=0.8,
            alpha=0.8,
            capsize=2,
            label="learners" if learner else "dispatchers",
        )
    for row in summary.itertuples():
        ax.annotate(
            row.policy,
            (row.latency_ms, row.carbon_g * scale),
            fontsize=7,
            xytext=(4, 3),
            textcoords="offset points",
        )
    front = pareto_front(summary, "latency_ms", "carbon_g")
    ax.plot(
        front["latency_ms"],
        front["carbon_g"] * scale,
        "--",
        color="C3",
        lw=1,
        label="Pareto front (lower-left is better)",
    )
    ax.set_xlabel(LABELS["latency_ms"][0])
    ax.set_ylabel(LABELS["carbon_g"][0])
    ax.set_title("Latency against carbon per job, held-out worlds (95% CIs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_sweep(folder: Path, out_dir: Path | None = None) -> list[Path]:
    """Draw every sweep plot of `folder` into `out_dir` (default `folder/plots`); return
    the files written (each figure as PNG and SVG)."""
    folder = Path(folder)
    curves = _read(folder, "curves.csv")
    summary = _read(folder, "summary.csv")
    out_dir = folder / "plots" if out_dir is None else Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = {
        "curves_reward": _learning_curves(curves, summary, "reward"),
        "curves_latency": _learning_curves(curves, summary, "latency_ms"),
        "per_round": _per_round(curves, summary),
        "paired": _paired_bars(summary),
        "pareto": _pareto(summary),
    }
    return [path for stem, fig in figures.items() for path in _save(fig, out_dir, stem)]
