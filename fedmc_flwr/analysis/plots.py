"""Plots of any metrics.csv: how the learners' evaluation changes round by round.

Learners (policies named `ppo-*`) are drawn as curves over rounds, each in a colour and
marker of its own (`learner_styles`), with one kind of band on every level plot (reward,
latency): the 95% confidence interval over the held-out worlds, regions as strata, from
per_seed.csv beside metrics.csv (`level_bands`; without that file the reward's band is
metrics.csv's `reward_ci95`, the same interval, and the others have none). Every band
has its legend entry saying what it is. Dispatchers do not learn; a dozen flat lines in
one band read as none, so they are shown as labelled grey references
(`dispatcher_references`): the baseline (SED), the best and the worst dispatcher, which
is named at the axis edge when it lies far off the learners' scale, and each oracle,
labelled as the reference it is: it reads hidden state (the jobs' true sizes) that no
deployable dispatcher or learner sees, so it is never "the best dispatcher". The
references are drawn above the bands, so a band never hides one. Only the `client="all"`
evaluation rows are used: the mean over regions on held-out seeds, the figure every
producer of metrics.csv writes.

Two curves with overlapping bands can still differ: every policy meets the same held-out
worlds, so the honest comparison is paired, and the level plots' band (unpaired) says so
in its legend entry. When per_seed.csv lies next to metrics.csv, `paired.png` draws each
learner minus each named baseline (default: SED and two-tier), per round, paired per
evaluation seed and stratified over regions, with its 95% band over evaluation seeds;
above 0 means better than the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from fedmc_flwr.analysis.statistics import stratified_mean
from fedmc_flwr.metrics import METRICS
from fedmc_flwr.policies.heuristics import ORACLES, MyopicOraclePolicy

FULL_ORACLE = MyopicOraclePolicy.name
"""The oracle drawn as a line: it reads the waiting job's size and the exact backlogs."""

PANELS = (
    ("reward", "reward_ci95", "mean reward per job (higher is better)", "reward.png"),
    ("latency_ms", None, "mean latency per job (ms)", "latency.png"),
)
"""(column, its CI column or None, axis label, file name) of each plot."""
DEFAULT_BASELINES = ("sed", "two-tier")
"""Dispatchers the paired plot compares with when none are named (those present)."""


LEARNER_COLOURS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9")
"""Matplotlib's tab10 without its grey, which only the dispatchers' references use."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "*")
LINESTYLES = ("-", "--", ":")
HIGHER_IS_BETTER = {m.name: m.higher_is_better for m in METRICS} | {
    m.csv_column: m.higher_is_better for m in METRICS
}


@dataclass(frozen=True)
class Style:
    """How one policy is drawn."""

    color: str
    marker: str
    linestyle: str


ORACLE = "reference: reads hidden state"
"""The role of an oracle (`heuristics.ORACLES`) among the references."""
REFERENCE_STYLES = {
    "baseline": Style("black", "", "--"),
    "best dispatcher": Style("0.35", "", "-."),
    "worst dispatcher": Style("0.55", "", ":"),
    ORACLE: Style("0.45", "", "-"),
}
"""The dispatchers' references: greys, told apart by their line styles."""
REFERENCE_ZORDER = 4
"""Above the learners' bands (1) and lines (3): a band never hides a reference."""
BAND_ALPHA = 0.15
LEVEL_BAND = "shaded: 95% CI over held-out worlds\n(unpaired; paired.png pairs them)"
PAIRED_BAND = "shaded: 95% CI over held-out worlds (paired)"
NO_BAND = "no band: no per_seed.csv beside metrics.csv"


def _is_learner(policy: str) -> bool:
    return policy.startswith("ppo")


def learner_styles(learners: Sequence[str]) -> dict[str, Style]:
    """A colour and a marker of its own for each learner, given in name order so that a
    learner looks the same in every figure; past nine learners the colours come round
    again with the next line style, so no two learners are drawn alike."""
    names = sorted(set(learners))
    return {
        name: Style(
            LEARNER_COLOURS[k % len(LEARNER_COLOURS)],
            MARKERS[k % len(MARKERS)],
            LINESTYLES[(k // len(LEARNER_COLOURS)) % len(LINESTYLES)],
        )
        for k, name in enumerate(names)
    }


def dispatcher_references(
    levels: pd.Series, baseline: str | None, higher_is_better: bool
) -> list[tuple[str, str, float]]:
    """(policy, role, level) of the dispatchers worth a line: `baseline` when present,
    then the best and the worst of `levels` (policy -> level) that see only what a
    deployed dispatcher sees, unless one is the baseline, then the oracle that reads every
    hidden fact (role ORACLE). The oracles that read one fact each split that oracle's lead
    in the tables; as lines they would crowd the panel without a new ceiling."""
    oracles = [str(policy) for policy in levels.index if policy in ORACLES]
    deployable = levels.drop(oracles)
    oracles = [policy for policy in oracles if policy == FULL_ORACLE]
    chosen = {}
    if baseline in levels.index:
        chosen[baseline] = "baseline"
    if not deployable.empty:
        ordered = deployable.sort_values(ascending=not higher_is_better)
        for policy, role in (
            (ordered.index[0], "best dispatcher"),
            (ordered.index[-1], "worst dispatcher"),
        ):
            chosen.setdefault(str(policy), role)
    for policy in oracles:
        chosen.setdefault(policy, ORACLE)
    return [(policy, role, float(levels[policy])) for policy, role in chosen.items()]


def draw_references(
    ax: Axes,
    levels: pd.Series,
    baseline: str | None,
    higher_is_better: bool,
    around: tuple[float, float] | None,
) -> None:
    """A labelled line for each of `dispatcher_references`. The view spans `around` (the
    learners' extent; None when there are none), the baseline and the best dispatcher; a
    worst dispatcher far below them (random, say) is named at the axis edge with its level,
    so that it does not flatten every curve into one line."""
    references = dispatcher_references(levels, baseline, higher_is_better)
    if not references:
        return
    kept = [level for _, role, level in references if around is None or role != "worst dispatcher"]
    low, high = min([*kept, *(around or ())]), max([*kept, *(around or ())])
    pad = 0.08 * (high - low) if high > low else 0.05 * abs(high) or 0.05
    low, high = low - pad, high + pad
    for policy, role, level in references:
        style = REFERENCE_STYLES[role]
        label = f"{policy} ({role})"
        if low <= level <= high:
            ax.axhline(
                level,
                color=style.color,
                ls=style.linestyle,
                lw=1.6,
                label=label,
                zorder=REFERENCE_ZORDER,
            )
            continue
        below = level < low
        ax.annotate(
            f"{'↓' if below else '↑'} {label}: {level:.4g}, off the scale",
            xy=(0.99, 0.02 if below else 0.98),
            xycoords="axes fraction",
            ha="right",
            va="bottom" if below else "top",
            fontsize=7,
            color=style.color,
        )
    ax.set_ylim(low, high)


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


def level_bands(per_seed: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Each learner's 95% half-width of `metric` (a per_seed.csv column) per round: over
    the held-out worlds, regions as strata (`stratified_mean`, as metrics.csv's
    `reward_ci95`). Columns policy, round, half_width."""
    learners = per_seed[(per_seed["round"] > 0) & per_seed["policy"].map(_is_learner)]
    rows = [
        {
            "policy": policy,
            "round": int(rnd),
            "half_width": stratified_mean(
                [group[metric].to_numpy() for _, group in rows.groupby("client", sort=True)]
            ).half_width,
        }
        for (policy, rnd), rows in learners.groupby(["policy", "round"], sort=True)
    ]
    return pd.DataFrame(rows, columns=["policy", "round", "half_width"])


def metric_panel(
    rows: pd.DataFrame,
    column: str,
    ci: str | None,
    label: str,
    title: str,
    baseline: str | None,
    bands: pd.DataFrame | None = None,
) -> Figure:
    """One metric of `client="all"` evaluation rows per round: each learner's curve with
    its band (`bands`, from `level_bands`; else the rows' `ci` column; else none, said in
    the legend) in its own style, the dispatchers as `draw_references` with `baseline`."""
    # A bare Figure (no pyplot): no GUI backend, no global figure registry to leak into.
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    rounds = sorted(rows["round"].unique())
    span = (min(rounds) - 0.2, max(rounds) + 0.2)
    learners = rows[rows["policy"].map(_is_learner)]
    if bands is not None:
        learners = learners.merge(bands, on=["policy", "round"], how="left")
    elif ci is not None:
        learners = learners.assign(half_width=learners[ci])
    else:
        learners = learners.assign(half_width=float("nan"))
    styles = learner_styles(learners["policy"])
    for policy, group in learners.groupby("policy", sort=True):
        _learner_line(
            ax, group["round"], group[column], group["half_width"], styles[policy], policy
        )
    dispatchers = rows[~rows["policy"].map(_is_learner)].groupby("policy")[column].mean()
    around = None
    if not learners.empty:
        spread = learners["half_width"].fillna(0)
        values = pd.concat([learners[column] - spread, learners[column] + spread])
        around = (float(values.min()), float(values.max()))
        has_band = learners["half_width"].notna().any()
        band_legend_entry(ax, LEVEL_BAND if has_band else NO_BAND, shaded=has_band)
    draw_references(ax, dispatchers, baseline, HIGHER_IS_BETTER[column], around)
    return _finish(fig, ax, label, title, span)


def _learner_line(
    ax: Axes, x: pd.Series, mean: pd.Series, half_width: pd.Series, style: Style, label: str
) -> None:
    """A learner's line above the references (zorder 3), over its band."""
    ax.plot(
        x,
        mean,
        color=style.color,
        marker=style.marker,
        ls=style.linestyle,
        lw=2,
        label=label,
        zorder=3,
    )
    _band(ax, x, mean, half_width, style.color)


def _band(ax: Axes, x: pd.Series, mean: pd.Series, half_width: pd.Series, color: str) -> None:
    """A learner's band under every line (zorder 1), without edges, faint enough that a
    reference crossing it stays plain."""
    if half_width.notna().any():
        ax.fill_between(
            x, mean - half_width, mean + half_width, color=color, alpha=BAND_ALPHA, lw=0, zorder=1
        )


def band_legend_entry(ax: Axes, text: str, shaded: bool) -> None:
    """A legend entry for what the bands are (a grey swatch of their shade), or one that
    says there are none; it draws nothing on the axes."""
    if shaded:
        ax.fill_between([], [], color="0.5", alpha=2 * BAND_ALPHA, lw=0, label=text)
    else:
        ax.plot([], [], ls="none", label=text)


def _paired_panel(diffs: dict[str, pd.DataFrame], title: str) -> Figure:
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    rounds: set[int] = set()
    pairs = [(b, p, g) for b, frame in diffs.items() for p, g in frame.groupby("policy", sort=True)]
    # one style per (learner, baseline) line: the pairs are many "learners" of their own
    styles = learner_styles([f"{policy} - {baseline}" for baseline, policy, _ in pairs])
    for baseline, policy, group in pairs:
        label = f"{policy} - {baseline}"
        rounds |= set(group["round"])
        _learner_line(ax, group["round"], group["mean"], group["half_width"], styles[label], label)
    band_legend_entry(ax, PAIRED_BAND, shaded=True)
    span = (min(rounds) - 0.2, max(rounds) + 0.2)
    ax.axhline(0.0, color="black", lw=1, zorder=REFERENCE_ZORDER)
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
    differences against `baselines` (`paired.png`); return the PNG paths. The first of
    `baselines` (default SED) is the dispatchers' labelled baseline."""
    from fedmc_flwr.results import PER_SEED_FILE, read_per_seed

    csv_path = Path(csv_path)
    rows = _eval_rows(csv_path)
    out_dir = csv_path.parent / "plots" if out_dir is None else Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    experiment = str(rows["experiment"].iloc[0]) if "experiment" in rows else csv_path.stem
    reference = (baselines or DEFAULT_BASELINES)[0]
    per_seed = csv_path.parent / PER_SEED_FILE
    worlds = read_per_seed(per_seed) if per_seed.is_file() else None
    paths = []
    for column, ci, label, name in PANELS:
        title = f"{experiment}: held-out evaluation, all regions"
        bands = None if worlds is None else level_bands(worlds, column)
        fig = metric_panel(rows, column, ci, label, title, reference, bands)
        path = out_dir / name
        fig.savefig(path, dpi=120, bbox_inches="tight")
        paths.append(path)
    if worlds is not None:
        diffs = paired_differences(per_seed, baselines)
        if any(not frame.empty for frame in diffs.values()):
            title = f"{experiment}: learner minus baseline, paired per held-out world"
            path = out_dir / "paired.png"
            _paired_panel(diffs, title).savefig(path, dpi=120, bbox_inches="tight")
            paths.append(path)
    elif baselines:
        raise FileNotFoundError(f"{per_seed}: no per-seed file for the paired plot")
    return paths
