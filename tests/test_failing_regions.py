"""Regions that fail, through real Flower simulation runs of tests/conf/faulty_federation.yaml
(3 regions, 3 rounds): each failure is left out of its round and recorded; too few healthy
regions stop the run in one line; and a run past its deadline stops, whatever it started."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import csv_rows
from flower_runs import run_isolated

FAULTY = Path(__file__).parent / "conf" / "faulty_federation.yaml"


@pytest.mark.flower
def test_faulty_regions_are_left_out_and_recorded(tmp_path: Path) -> None:
    """A raise, a hang past the round timeout, NaN weights, a wrong shape and an absurd step
    count: each round completes from its healthy regions, each failure is a row."""
    (tmp_path / "home").mkdir()
    assert run_isolated(tmp_path / "home", [f"results_dir={tmp_path}"], 3, config=FAULTY) == 0
    rows = csv_rows(tmp_path / "faulty_federation" / "metrics.csv")
    failed = {(r["round"], r["client"]): r["reason"] for r in rows if r["phase"] == "failed"}
    assert set(failed) == {
        ("1", "us-east1"),
        ("2", "europe-west9"),
        ("2", "northamerica-northeast1"),
        ("3", "us-east1"),
        ("3", "northamerica-northeast1"),
    }
    assert "injected" in failed[("1", "us-east1")]
    assert "round_timeout_s" in failed[("2", "europe-west9")]
    assert "NaN" in failed[("2", "northamerica-northeast1")]
    assert "shape" in failed[("3", "us-east1")]
    assert "env steps" in failed[("3", "northamerica-northeast1")]
    for rnd in ("1", "2", "3"):
        train = {r["client"]: r for r in rows if r["round"] == rnd and r["phase"] == "train"}
        healthy = {c for c in train if c != "all"}
        assert healthy.isdisjoint({c for (n, c) in failed if n == rnd})
        assert int(train["all"]["steps"]) == 256 * len(healthy)


@pytest.mark.flower
def test_too_few_healthy_regions_stop_the_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "home").mkdir()
    overrides = [f"results_dir={tmp_path}", "federation.min_regions=3"]
    assert run_isolated(tmp_path / "home", overrides, 3, config=FAULTY) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "round 1 training: 2 of 3 regions healthy, federation.min_regions is 3" in line
    assert "injected" in line
    rows = csv_rows(tmp_path / "faulty_federation" / "metrics.csv")
    assert [r["phase"] for r in rows] == ["failed"]
    assert not (tmp_path / "faulty_federation" / "checkpoints").exists()


@pytest.mark.flower
def test_the_deadline_stops_the_run_and_everything_it_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """5 s is far less than the tiny run's two rounds take: the run stops short of its end,
    and nothing it started outlives it (run_isolated's check)."""
    (tmp_path / "home").mkdir()
    overrides = [f"results_dir={tmp_path}", "federation.deadline_s=5"]
    assert run_isolated(tmp_path / "home", overrides, 2) == 1
    assert "federation.deadline_s (5 s) reached" in capsys.readouterr().err
    assert not (tmp_path / "tiny_federation" / "checkpoints" / "round_002.npz").exists()
