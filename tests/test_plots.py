"""Plots from hand-made metrics.csv files: learner curves, dispatcher lines, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedmc_flwr.plots import plot_metrics
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
