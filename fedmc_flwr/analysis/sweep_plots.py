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
- `pareto`: mean latency against carbon per job, every policy, its Pareto front joined;
  each point labelled where its label meets no other label and no point.

Each learner keeps one colour and marker in every figure (`plots.learner_styles`);
dispatchers are grey. A level's interval is cut at the metric's physical bounds (latency,
cost, carbon and energy >= 0, the violation rate within [0, 1], the reward <= 0): the true
mean lies inside them, so the cut interval covers it as often as the whole one. With two
training seeds a t-interval is the mean ± 12.7 standard errors, and without the cut it
would reach below 0 ms.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import Bbox

from fedmc_flwr.analysis.plots import band_legend_entry, learner_styles
from fedmc_flwr.analysis.statistics import over_training_seeds
from fedmc_flwr.metrics import METRICS
from fedmc_flwr.policies.heuristics import ORACLES

FORMATS = ("png", "svg")
LABELS = {
    m.name: (m.label, m.scale, "higher is better" if m.higher_is_better else "lower is better")
    for m in METRICS
}
"""metric -> (axis label with unit, scale from the CSV's unit, direction)."""
BOUNDS = {"reward": (-math.inf, 0.0), "slo_violation": (0.0, 1.0)}
"""Where a metric's mean can lie, in the CSV's unit; every other metric is >= 0."""
DISPATCHER_COLOUR = "0.5"


def bounds(metric: str) -> tuple[float, float]:
    """The physical range of `metric` (BOUNDS, else [0, inf))."""
    return BOUNDS.get(metric, (0.0, math.inf))


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


def band_over_seeds(curves: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per round: the mean over regions per training seed, then its mean and 95% interval
    over training seeds (`low`, `high`: cut at the metric's bounds; NaN with one seed)."""
    per_seed = curves.groupby(["round", "train_seed"])[metric].mean().reset_index()
    floor, ceiling = bounds(metric)
    rows = []
    for rnd, group in per_seed.groupby("round"):
        estimate = over_training_seeds(group[metric].to_numpy())
        rows.append(
            {
                "round": rnd,
                "mean": estimate.mean,
                "low": max(estimate.low, floor),
                "high": min(estimate.high, ceiling),
            }
        )
    return pd.DataFrame(rows)


def _band_label(curves: pd.DataFrame) -> str:
    if curves["train_seed"].nunique() < 2:
        return "one training seed: no band"
    return "95% CI over training seeds"


def _learner_ci(summary: pd.DataFrame) -> str:
    """What the learners' difference intervals are over (summary.csv's diff_over)."""
    return " / ".join(sorted(set(summary.loc[summary["learner"], "diff_over"].dropna())))


def _reference(summary: pd.DataFrame) -> str:
    """The dispatcher drawn as the dashed line: the baseline if it is one, else the best
    that sees only what a deployed dispatcher sees (an oracle reads hidden state)."""
    dispatchers = summary[~summary["learner"] & ~summary["policy"].isin(ORACLES)]
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
        band = band_over_seeds(mine, metric)
        ax.plot(
            band["round"], band["mean"] * scale, "o-", color="C0", lw=2.2, label="mean over regions"
        )
        ax.fill_between(
            band["round"],
            band["low"] * scale,
            band["high"] * scale,
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
    styles = learner_styles(learners)
    reference = _reference(summary)
    for ax, metric in zip(axes, metrics, strict=True):
        label, scale, direction = LABELS[metric]
        for policy in learners:
            style = styles[policy]
            band = band_over_seeds(curves[curves["policy"] == policy], metric)
            ax.plot(
                band["round"],
                band["mean"] * scale,
                color=style.color,
                marker=style.marker,
                ls=style.linestyle,
                lw=1.6,
                ms=4,
                label=policy,
            )
            ax.fill_between(
                band["round"],
                band["low"] * scale,
                band["high"] * scale,
                color=style.color,
                alpha=0.15,
            )
        level = curves.loc[curves["policy"] == reference, metric].mean() * scale
        ax.axhline(level, color="black", ls="--", lw=1, label=f"{reference} (dispatcher)")
        band_legend_entry(ax, _band_label(curves), shaded=curves["train_seed"].nunique() > 1)
        ax.set_xlabel("round")
        ax.set_ylabel(label)
        ax.set_title(f"{label}\n({direction})", fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(
        "Held-out cost, carbon and SLO violations per round "
        "(mean over regions, 95% CI over training seeds, cut at 0 and 1)"
    )
    fig.tight_layout()
    return fig


def _paired_bars(summary: pd.DataFrame) -> Figure:
    baseline = str(summary["baseline"].iloc[0])
    rows = summary[summary["policy"] != baseline].dropna(subset=["d_reward"])
    rows = rows.sort_values("d_reward")
    fig = Figure(figsize=(8, 0.42 * len(rows) + 1.6))
    ax = fig.subplots()
    styles = learner_styles(summary.loc[summary["learner"], "policy"])
    colors = [
        styles[policy].color if learner else DISPATCHER_COLOUR
        for policy, learner in zip(rows["policy"], rows["learner"], strict=True)
    ]
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
        f"(> 0: better; 95% CI; coloured learners over {_learner_ci(summary)}, "
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


def _interval(rows: pd.DataFrame, metric: str, scale: float) -> np.ndarray:
    """[2, n] error-bar lengths below and above each mean, the CI cut at 0."""
    mean = rows[metric].to_numpy()
    half = rows[f"{metric}_ci95"].fillna(0).to_numpy()
    return np.vstack([np.minimum(half, mean), half]) * scale


OFFSETS = tuple(
    (radius * math.cos(angle), radius * math.sin(angle))
    for radius in (7, 12, 20, 30, 42, 56, 72, 90, 110, 135, 160)
    for angle in np.deg2rad([30, -30, 150, -150, 90, -90, 0, 180, 60, -60, 120, -120])
)
"""Where a label may go, in points from its point: nearest first, up-right first."""
_PAD = 1.5
"""Pixels kept clear around each label."""


def _anchor(dx: float, dy: float) -> tuple[str, str]:
    """The label's alignment for an offset: it grows away from its point."""
    ha = "left" if dx > 1 else "right" if dx < -1 else "center"
    va = "bottom" if dy > 1 else "top" if dy < -1 else "center"
    return ha, va


def _box(x: float, y: float, size: tuple[float, float], ha: str, va: str) -> Bbox:
    """The display box of a label of `size` anchored at (x, y), padded by _PAD."""
    width, height = size
    x0 = x if ha == "left" else x - width if ha == "right" else x - width / 2
    y0 = y if va == "bottom" else y - height if va == "top" else y - height / 2
    return Bbox.from_extents(x0 - _PAD, y0 - _PAD, x0 + width + _PAD, y0 + height + _PAD)


def _overlap(box: Bbox, others: list[Bbox]) -> float:
    """Total area `box` shares with `others`."""
    total = 0.0
    for other in others:
        w = min(box.x1, other.x1) - max(box.x0, other.x0)
        h = min(box.y1, other.y1) - max(box.y0, other.y0)
        total += max(w, 0.0) * max(h, 0.0)
    return total


def label_points(
    ax: Axes, names: list[str], xs: np.ndarray, ys: np.ndarray, colors: list[str]
) -> list[Annotation]:
    """Name each point where its label overlaps no other label and no point: the first
    free place of OFFSETS inside the axes (else the least crowded one), joined to its
    point by a thin line when it had to move away. The most crowded points choose first,
    while the places next to them are free. Call it once the figure's layout is final:
    the places are measured in display space."""
    fig = ax.figure
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    points = ax.transData.transform(np.column_stack([xs, ys]))
    per_point = fig.dpi / 72
    marker = 4 * per_point  # half a marker's width, in pixels
    taken = [Bbox.from_extents(x - marker, y - marker, x + marker, y + marker) for x, y in points]
    distance = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)
    crowding = (distance < 40 * per_point).sum(axis=1)
    labels: dict[int, Annotation] = {}
    for k in sorted(range(len(names)), key=lambda k: -crowding[k]):
        px, py = points[k]
        probe = ax.text(0, 0, names[k], fontsize=7)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        size = (extent.width, extent.height)
        best: tuple[float, Bbox, float, float] | None = None
        for dx, dy in OFFSETS:
            box = _box(px + dx * per_point, py + dy * per_point, size, *_anchor(dx, dy))
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1
            inside = inside and frame.y0 <= box.y0 and box.y1 <= frame.y1
            crowd = _overlap(box, taken) + (0.0 if inside else 1e9)
            if best is None or crowd < best[0]:
                best = (crowd, box, dx, dy)
            if crowd == 0.0:
                break
        assert best is not None
        _, box, dx, dy = best
        ha, va = _anchor(dx, dy)
        line = {"arrowstyle": "-", "lw": 0.7, "color": colors[k], "shrinkB": 3}
        labels[k] = ax.annotate(
            names[k],
            (xs[k], ys[k]),
            xytext=(dx, dy),
            textcoords="offset points",
            ha=ha,
            va=va,
            fontsize=7,
            color=colors[k],
            annotation_clip=False,
            arrowprops=line if math.hypot(dx, dy) > 12 else None,
        )
        taken.append(box)
    return [labels[k] for k in range(len(names))]


def _pareto(summary: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(8, 5.5))
    ax = fig.subplots()
    scale = LABELS["carbon_g"][1]
    styles = learner_styles(summary.loc[summary["learner"], "policy"])
    over = " / ".join(sorted(set(summary.loc[summary["learner"], "ci_over"])))
    for row in summary.itertuples():
        style = styles.get(row.policy)
        one = summary[summary["policy"] == row.policy]
        ax.errorbar(
            one["latency_ms"],
            one["carbon_g"] * scale,
            xerr=_interval(one, "latency_ms", 1.0),
            yerr=_interval(one, "carbon_g", scale),
            fmt=style.marker if style else "s",
            color=style.color if style else DISPATCHER_COLOUR,
            elinewidth=0.8,
            alpha=0.85,
            capsize=2,
            label=row.policy if style else None,
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
    ax.plot([], [], "s", color=DISPATCHER_COLOUR, label="dispatchers (grey)")
    ax.set_xlabel(LABELS["latency_ms"][0])
    ax.set_ylabel(LABELS["carbon_g"][0])
    ax.set_title(
        "Latency against carbon per job, held-out worlds\n"
        f"(95% CIs cut at 0: learners over {over}, dispatchers over eval seeds)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.margins(0.08)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    label_points(
        ax,
        list(summary["policy"]),
        summary["latency_ms"].to_numpy(),
        summary["carbon_g"].to_numpy() * scale,
        [styles[p].color if p in styles else "0.25" for p in summary["policy"]],
    )
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
