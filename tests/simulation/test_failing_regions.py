"""Regions that fail, through a real Flower simulation run of tests/conf/faulty_federation.yaml
(4 regions, 3 rounds): each failure is left out of its round and recorded, until too few
healthy regions stop the run in one line; and a run past its deadline stops, whatever it
started."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, csv_rows
from flower_runs import run_isolated

FAULTY = REPO / "tests" / "conf" / "faulty_federation.yaml"


@pytest.mark.flower
def test_faulty_regions_are_left_out_and_recorded_until_too_few_are_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A raise, a hang past the round timeout, NaN weights, a wrong shape and an absurd step
    count: rounds 1 and 2 complete from their two healthy regions, each failure a row;
    round 3, with one healthy region, stops the run in one line and leaves no checkpoint."""
    (tmp_path / "home").mkdir()
    assert run_isolated(tmp_path / "home", [f"results_dir={tmp_path}"], 4, config=FAULTY) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "round 3 training: 1 of 4 regions healthy, federation.min_regions is 2" in line
    out = tmp_path / "faulty_federation"
    rows = csv_rows(out / "metrics.csv")
    failed = {(r["round"], r["client"]): r["reason"] for r in rows if r["phase"] == "failed"}
    assert failed.keys() == {
        ("1", "us-east1"),
        ("1", "europe-west9"),
        ("2", "northamerica-northeast1"),
        ("2", "europe-central2"),
        ("3", "us-east1"),
        ("3", "europe-west9"),
        ("3", "northamerica-northeast1"),
    }
    assert "injected" in failed[("1", "us-east1")]
    assert "round_timeout_s" in failed[("1", "europe-west9")]
    assert "NaN" in failed[("2", "northamerica-northeast1")]
    assert "shape" in failed[("2", "europe-central2")]
    assert "env steps" in failed[("3", "us-east1")]
    assert "injected" in failed[("3", "europe-west9")]
    for rnd in ("1", "2"):
        train = {r["client"]: r for r in rows if r["round"] == rnd and r["phase"] == "train"}
        healthy = {c for c in train if c != "all"}
        assert len(healthy) == 2 and healthy.isdisjoint({c for (n, c) in failed if n == rnd})
        assert int(train["all"]["steps"]) == 256 * len(healthy)
    assert not [r for r in rows if r["round"] == "3" and r["phase"] != "failed"]
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert checkpoints == ["round_001.npz", "round_002.npz"]


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
