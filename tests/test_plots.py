"""Plots from hand-made metrics.csv files: learner curves, dispatcher lines, bad input."""

from __future__ import annotations

from pathlib import Path

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
            {
                "experiment": "demo",
                "train_seed": 0,
                "round": rnd,
                "split": "test",
                "client": client,
                "policy": policy,
                "eval_seed": 1000 * k + j,
                "start_phase": 0.25 + 0.5 * j,
                "train_steps": 10 * rnd,
                "jobs": 5,
                "reward": rewards[2 * k + j],
            }
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
