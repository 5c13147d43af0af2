"""Plots from hand-made metrics.csv files: learner curves, their bands and what the legend
says of them, dispatcher lines and the oracle's, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedmc_flwr.analysis.plots import plot_metrics
from fedmc_flwr.analysis.sweep_plots import pareto_front
from fedmc_flwr.results import MetricsWriter

PNG = b"\x89PNG\r\n\x1a\n"


def _row(rnd: int, phase: str, client: str, policy: str, reward: float) -> dict:
    return {
        "experiment": "demo",
        "round": rnd,
        "phase": phase,
        "client": client,
        "policy": policy,
        "reward": reward,
        "reward_ci95": 0.01,
        "latency_ms": -100 * reward,
    }


def _seed_row(policy: str, rnd: int, client: str, seed: int, reward: float) -> dict:
    """A per_seed.csv row of held-out world `seed`."""
    return {
        "experiment": "demo",
        "train_seed": 0,
        "round": rnd,
        "split": "test",
        "client": client,
        "policy": policy,
        "eval_seed": seed,
        "start_phase": (seed % 2) / 2,
        "train_steps": 10 * rnd,
        "jobs": 5,
        "reward": reward,
    }


def test_learning_curves_and_dispatcher_lines(tmp_path: Path) -> None:
    csv_path = tmp_path / "metrics.csv"
    rows = []
    for rnd in (1, 2, 3):
        rows.append(_row(rnd, "train", "all", "ppo-fedavg", -0.9))
        rows.append(_row(rnd, "eval", "us-east1", "ppo-fedavg", -0.5))
        rows += [_row(rnd, "eval", "all", "ppo-fedavg", -1 + 0.1 * rnd)]
        rows += [_row(rnd, "eval", "all", "two-tier", -0.6), _row(rnd, "eval", "all", "jsq", -0.7)]
    MetricsWriter(csv_path).write(rows)
    paths = plot_metrics(csv_path)
    assert [p.name for p in paths] == ["reward.png", "latency.png"]
    for path in paths:
        assert path.parent == tmp_path / "plots"
        assert path.read_bytes().startswith(PNG)


def test_dispatchers_only_file_into_a_chosen_folder(tmp_path: Path) -> None:
    csv_path = tmp_path / "baselines.csv"
    MetricsWriter(csv_path).write(
        [_row(0, "eval", "all", "random", -0.8), _row(0, "eval", "all", "sed", -0.4)]
    )
    paths = plot_metrics(csv_path, tmp_path / "out")
    assert all(p.parent == tmp_path / "out" and p.stat().st_size > 0 for p in paths)


def test_unplottable_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such metrics file"):
        plot_metrics(tmp_path / "missing.csv")
    csv_path = tmp_path / "metrics.csv"
    MetricsWriter(csv_path).write([_row(1, "train", "all", "ppo-fedavg", -0.9)])
    with pytest.raises(ValueError, match="no evaluation rows"):
        plot_metrics(csv_path)
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"not a metrics\.csv"):
        plot_metrics(other)


def test_paired_difference_plot_from_per_seed_csv(tmp_path: Path) -> None:
    """Learner minus each baseline, per round, paired per held-out world (a hand check)."""
    from fedmc_flwr.analysis.plots import paired_differences
    from fedmc_flwr.results import per_seed_writer

    def rows(policy: str, rnd: int, rewards: list[float]) -> list[dict]:
        return [
            _seed_row(policy, rnd, client, 1000 * k + j, rewards[2 * k + j])
            for k, client in enumerate(("a", "b"))
            for j in range(2)
        ]

    csv_path = tmp_path / "metrics.csv"
    MetricsWriter(csv_path).write(
        [_row(rnd, "eval", "all", p, -0.5) for rnd in (1, 2) for p in ("ppo-fedavg", "sed")]
    )
    per_seed_writer(tmp_path).write(
        rows("sed", 0, [-0.5, -0.7, -0.4, -0.6])
        + rows("two-tier", 0, [-0.6, -0.8, -0.5, -0.6])
        + rows("ppo-fedavg", 1, [-0.6, -0.9, -0.5, -0.7])
        + rows("ppo-fedavg", 2, [-0.4, -0.6, -0.3, -0.55])
    )
    diffs = paired_differences(tmp_path / "per_seed.csv")
    assert set(diffs) == {"sed", "two-tier"}
    sed = diffs["sed"].set_index("round")
    # round 2 - sed: region a [.1, .1], region b [.1, .05] -> mean over regions 0.0875
    assert sed.loc[2, "mean"] == pytest.approx(0.0875)
    assert sed.loc[1, "mean"] == pytest.approx(-0.125)  # a [-.1, -.2], b [-.1, -.1]
    # region a has no spread, region b [.1, .05]: var .00125 / 2 per stratum, df 2
    assert sed.loc[2, "half_width"] == pytest.approx(4.302652729911275 * (0.00125 / 2) ** 0.5 / 2)
    paths = plot_metrics(csv_path, baselines=["sed", "two-tier"])
    assert [p.name for p in paths] == ["reward.png", "latency.png", "paired.png"]
    assert paths[-1].read_bytes().startswith(PNG)
    with pytest.raises(ValueError, match="no baseline 'jsq'"):
        plot_metrics(csv_path, baselines=["jsq"])


def test_cli_plot_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    from fedmc_flwr.cli import main

    assert main(["plot", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such metrics file" in err


def test_pareto_front_keeps_the_points_nothing_beats_on_both_axes() -> None:
    points = pd.DataFrame(
        {"latency": [100, 120, 110, 90, 130], "carbon": [5.0, 1.0, 6.0, 9.0, 0.5]},
        index=["a", "b", "c", "d", "e"],
    )
    assert list(pareto_front(points, "latency", "carbon").index) == ["d", "a", "b", "e"]


LEARNERS = [
    "ppo-fedavg",
    "ppo-centralised",
    "ppo-local",
    "ppo-fedprox",
    "ppo-shrink-0.01",
    "ppo-shrink-0.1",
    "ppo-shrink-0.5",
]


def _all_policies_rows() -> pd.DataFrame:
    """Round 1-3 rows of seven learners and every dispatcher, each at its own level."""
    from fedmc_flwr.policies.heuristics import DISPATCHERS

    rows = [
        _row(rnd, "eval", "all", policy, -0.6 - 0.01 * k + 0.01 * rnd)
        for rnd in (1, 2, 3)
        for k, policy in enumerate(LEARNERS)
    ]
    dispatchers = sorted(set(DISPATCHERS) - {"random"})
    rows += [_row(0, "eval", "all", p, -0.55 - 0.02 * k) for k, p in enumerate(dispatchers)]
    rows.append(_row(0, "eval", "all", "random", -1.9))
    return pd.DataFrame(rows)


def test_every_learner_has_a_colour_of_its_own_and_dispatchers_are_three_grey_lines() -> None:
    """Seven learners and every dispatcher in one panel: as many line colours as learners,
    none repeated, none grey; the dispatchers as the baseline, the best and the worst."""
    from fedmc_flwr.analysis.plots import REFERENCE_STYLES, metric_panel

    rows = _all_policies_rows()
    fig = metric_panel(rows, "reward", "reward_ci95", "reward", "demo", "sed")
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    learners = [lines[name] for name in LEARNERS]
    colours = [line.get_color() for line in learners]
    assert len(set(colours)) == len(LEARNERS)
    assert not {"C7", "0.5"} & set(colours)
    assert len({(line.get_color(), line.get_marker()) for line in learners}) == len(LEARNERS)
    from fedmc_flwr.policies.heuristics import DISPATCHERS

    best = min(set(DISPATCHERS) - {"random"})  # the first in name order is at -0.55
    references = sorted(name for name in lines if name not in LEARNERS)
    oracle = "myopic-oracle (reference: reads hidden state)"
    assert references == sorted([f"{best} (best dispatcher)", "sed (baseline)", oracle])
    reference_colours = {s.color for s in REFERENCE_STYLES.values()}
    assert {lines[name].get_color() for name in references} <= reference_colours
    assert reference_colours.isdisjoint(colours)  # no learner is mistaken for a dispatcher
    # random sits far below the learners: named at the axis edge, not drawn as a line
    notes = [t.get_text() for t in fig.axes[0].texts]
    assert any(note.startswith("↓ random (worst dispatcher): -1.9") for note in notes)


def test_learner_styles_never_repeat_and_follow_the_name() -> None:
    from fedmc_flwr.analysis.plots import learner_styles

    nine = learner_styles([f"ppo-{k}" for k in range(9)])
    assert len({s.color for s in nine.values()}) == 9
    many = learner_styles([f"ppo-{k:02d}" for k in range(20)])
    assert len({(s.color, s.marker, s.linestyle) for s in many.values()}) == 20
    # the same learner looks the same whatever else is drawn beside it
    assert learner_styles(["ppo-b", "ppo-a"]) == learner_styles(["ppo-a", "ppo-b"])


def test_pareto_labels_do_not_overlap_in_a_tight_cluster() -> None:
    """Eight policies within 2 ms and 0.01 mg of each other and four far away: every label
    box is clear of every other label box and every point."""
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    from fedmc_flwr.analysis.sweep_plots import label_points

    fig = Figure(figsize=(8, 5.5))
    ax = fig.subplots()
    xs = np.array([157.0, 157.5, 158.0, 158.5, 156.5, 157.2, 157.8, 159.0, 300, 620, 200, 150])
    ys = np.array([0.170, 0.171, 0.168, 0.172, 0.169, 0.173, 0.167, 0.170, 0.36, 0.40, 0.10, 0.29])
    names = [f"policy-number-{k}" for k in range(len(xs))]
    ax.plot(xs, ys, "o")
    fig.tight_layout()
    labels = label_points(ax, names, xs, ys, ["black"] * len(xs))
    fig.canvas.draw()  # places each label's text (and its line)
    renderer = fig.canvas.get_renderer()
    boxes = [Text.get_window_extent(label, renderer) for label in labels]  # the text alone
    points = ax.transData.transform(np.column_stack([xs, ys]))
    for i, box in enumerate(boxes):
        assert not any(box.overlaps(other) for other in boxes[i + 1 :]), names[i]
        assert not any(box.contains(x, y) for x, y in points), names[i]


def test_a_band_over_two_seeds_stops_at_the_metrics_physical_bounds() -> None:
    """Two training seeds far apart: the t-interval (mean ± 12.7 standard errors) would
    reach below 0 ms and below a violation rate of 0; the band is cut there."""
    from fedmc_flwr.analysis.sweep_plots import band_over_seeds

    curves = pd.DataFrame(
        {
            "round": [1, 1],
            "train_seed": [0, 1],
            "client": ["a", "a"],
            "latency_ms": [100.0, 300.0],
            "slo_violation": [0.1, 0.9],
            "reward": [-0.1, -2.0],
        }
    )
    latency = band_over_seeds(curves, "latency_ms").iloc[0]
    assert latency["mean"] == pytest.approx(200.0) and latency["low"] == 0.0
    assert latency["high"] == pytest.approx(200.0 + 12.706204736 * 100.0)
    violations = band_over_seeds(curves, "slo_violation").iloc[0]
    assert (violations["low"], violations["high"]) == (0.0, 1.0)
    assert band_over_seeds(curves, "reward").iloc[0]["high"] == 0.0


def _worlds(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    """A run by hand: metrics.csv with its `all` eval rows and per_seed.csv beside it (2
    regions x 3 worlds; the learner in rounds 1 and 2, level with SED; SED, the two-tier
    heuristic, random and the oracle in round 0, the oracle best of all)."""
    from fedmc_flwr.analysis.statistics import stratified_mean
    from fedmc_flwr.results import per_seed_writer

    levels = {"sed": -0.5, "two-tier": -0.6, "random": -0.9, "myopic-oracle": -0.45}
    spread = [[0.0, 0.1, -0.1], [0.05, -0.05, 0.2]]
    rows, metrics = [], []
    for policy, rnd, level in [(p, 0, v) for p, v in levels.items()] + [
        ("ppo-fedavg", 1, -0.7),
        ("ppo-fedavg", 2, -0.5),
    ]:
        rewards = [[level + d * (rnd + 1) for d in region] for region in spread]
        rows += [
            _seed_row(policy, rnd, client, 100 * k + j, reward) | {"latency_ms": -100 * reward}
            for k, client in enumerate(("a", "b"))
            for j, reward in enumerate(rewards[k])
        ]
        reward = stratified_mean([np.array(r) for r in rewards])
        for shown in [rnd] if rnd else [1, 2]:
            metrics.append(
                _row(shown, "eval", "all", policy, reward.mean) | {"reward_ci95": reward.half_width}
            )
    MetricsWriter(tmp_path / "metrics.csv").write(metrics)
    per_seed_writer(tmp_path).write(rows)
    return tmp_path / "metrics.csv", pd.DataFrame(metrics)


def _bands(ax) -> list:
    """The shaded bands drawn on `ax` (a legend's swatch has no area)."""
    return [c for c in ax.collections if any(len(path.vertices) for path in c.get_paths())]


def _legend(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_every_level_plot_has_the_same_band_named_in_its_legend_and_under_the_references(
    tmp_path: Path,
) -> None:
    """Reward and latency alike: the learner's band is the 95% CI over held-out worlds from
    per_seed.csv (for the reward, the very interval metrics.csv holds), it has a legend
    entry that says so, and every reference line is drawn above it, so SED's stays plain
    where the band covers it."""
    from fedmc_flwr.analysis.plots import LEVEL_BAND, PANELS, level_bands, metric_panel
    from fedmc_flwr.results import read_per_seed

    csv_path, metrics = _worlds(tmp_path)
    worlds = read_per_seed(tmp_path / "per_seed.csv")
    learner = metrics[metrics["policy"] == "ppo-fedavg"].set_index("round")
    for column, ci, label, _ in PANELS:
        bands = level_bands(worlds, column).set_index("round")
        if column == "reward":
            assert bands["half_width"].to_numpy() == pytest.approx(learner["reward_ci95"])
        else:  # latency is -100 x reward here, so its interval is 100 times the reward's
            assert bands["half_width"].to_numpy() == pytest.approx(100 * learner["reward_ci95"])
        fig = metric_panel(metrics, column, ci, label, "demo", "sed", bands.reset_index())
        ax = fig.axes[0]
        (band,) = _bands(ax)
        top = band.get_paths()[0].vertices[:, 1].max()
        high = learner[column] + bands["half_width"]
        assert top == pytest.approx(high.max())
        assert LEVEL_BAND in _legend(ax)
        sed = next(line for line in ax.get_lines() if line.get_label() == "sed (baseline)")
        assert sed.get_zorder() > band.get_zorder()
    paths = plot_metrics(csv_path)  # and on disk, from the files alone
    assert [p.name for p in paths] == ["reward.png", "latency.png", "paired.png"]


def test_without_per_seed_csv_only_the_reward_has_its_band_and_the_legend_says_so(
    tmp_path: Path,
) -> None:
    from fedmc_flwr.analysis.plots import LEVEL_BAND, NO_BAND, PANELS, metric_panel

    _, metrics = _worlds(tmp_path)
    legends = {}
    for column, ci, label, _ in PANELS:
        ax = metric_panel(metrics, column, ci, label, "demo", "sed").axes[0]
        legends[column] = (_legend(ax), len(_bands(ax)))
    assert LEVEL_BAND in legends["reward"][0] and legends["reward"][1] == 1
    assert NO_BAND in legends["latency_ms"][0] and legends["latency_ms"][1] == 0


def test_the_oracle_is_a_reference_that_reads_hidden_state_never_the_best_dispatcher(
    tmp_path: Path,
) -> None:
    from fedmc_flwr.analysis.plots import ORACLE, dispatcher_references, metric_panel

    _, metrics = _worlds(tmp_path)
    levels = metrics[metrics["round"] == 1].set_index("policy")["reward"].drop("ppo-fedavg")
    roles = {policy: role for policy, role, _ in dispatcher_references(levels, "sed", True)}
    assert roles == {
        "sed": "baseline",
        "random": "worst dispatcher",
        "myopic-oracle": ORACLE,
    }  # SED is the best deployable one, and stays the baseline
    roles = {p: r for p, r, _ in dispatcher_references(levels, "two-tier", True)}
    assert roles["sed"] == "best dispatcher" and roles["myopic-oracle"] == ORACLE
    ax = metric_panel(metrics, "reward", "reward_ci95", "reward", "demo", "sed").axes[0]
    assert "myopic-oracle (reference: reads hidden state)" in _legend(ax)
    assert not any("best dispatcher" in text and "oracle" in text for text in _legend(ax))


def test_the_paired_plots_band_is_named_in_its_legend(tmp_path: Path) -> None:
    from fedmc_flwr.analysis.plots import PAIRED_BAND, _paired_panel, paired_differences

    _worlds(tmp_path)
    ax = _paired_panel(paired_differences(tmp_path / "per_seed.csv"), "demo").axes[0]
    assert len(_bands(ax)) == 2 and PAIRED_BAND in _legend(ax)  # one per baseline


def test_a_sweeps_per_round_bands_are_in_its_legend_and_its_reference_is_no_oracle() -> None:
    from fedmc_flwr.analysis.sweep_plots import _per_round, _reference

    curves = pd.DataFrame(
        [
            {"round": rnd, "train_seed": seed, "client": "a", "policy": policy}
            | {"cost_usd": 1e-6 * (1 + seed), "carbon_g": 1e-3, "slo_violation": 0.1}
            for rnd in (1, 2)
            for seed in (0, 1)
            for policy in ("ppo-fedavg", "sed", "myopic-oracle")
        ]
    )
    summary = pd.DataFrame(
        {
            "policy": ["ppo-fedavg", "sed", "myopic-oracle"],
            "learner": [True, False, False],
            "baseline": ["two-tier"] * 3,  # not in the sweep: the best dispatcher stands in
            "reward": [-0.6, -0.5, -0.4],
        }
    )
    assert _reference(summary) == "sed"
    legend = [text.get_text() for text in _per_round(curves, summary).legends[0].get_texts()]
    assert "95% CI over training seeds" in legend and "sed (dispatcher)" in legend
