"""bench/bench_federation.py at its smallest settings, so that it keeps running: it broke
once, unnoticed, when `aggregate` changed under it, as nothing ran it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, TINY
from flower_runs import RAY_LOCK


@pytest.mark.slow
@pytest.mark.flower
def test_the_federation_bench_reports_each_rounds_overhead() -> None:
    """One `fedmc run` of TINY's 2 rounds (its schedule of 4x the rounds left out: a
    second run); the JSON line's figures are the table's, and add up."""
    with RAY_LOCK:  # the bench's run starts Ray
        done = subprocess.run(
            [
                sys.executable,
                str(REPO / "bench" / "bench_federation.py"),
                "--config",
                str(TINY),
                "--rounds",
                "2",
                "--no-schedule",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "federation" and "schedule" not in figures
    run = figures["tiny_federation"]
    assert run["workers"] == 2 and [r["round"] for r in run["rounds"]] == [1, 2]
    for r in run["rounds"]:
        assert 0 < r["ideal_s"] < r["round_s"]
        assert r["ideal_s"] == pytest.approx(r["training_s"] / run["workers"], abs=2e-3)
        assert r["overhead_s"] == pytest.approx(r["round_s"] - r["ideal_s"], abs=2e-3)
        assert 0 < r["eval_s"] < r["round_s"]
    assert run["after_round_1"]["round_s"] == run["rounds"][1]["round_s"]
    assert "after round 1, a round:" in done.stdout
