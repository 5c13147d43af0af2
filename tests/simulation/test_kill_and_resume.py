"""A run killed outright (SIGKILL) after its first round leaves no process behind, and
`--resume` on one virtual client serving both regions finishes it byte-identical to the
reference run (conftest's `tiny_run`, one virtual client per region): a resumed run is
the same run, and how regions map onto clients changes nothing. Its console names the
run's own rounds, Flower's banners included."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_TRACED
from flower_runs import (
    REAP_WAIT_S,
    ListenerWatch,
    check_listeners,
    check_ray_refuses_strangers,
    ray_start_slot,
    run_isolated,
    survivors_of_sigkill,
    wait_for_round,
)


@pytest.mark.flower
def test_a_run_killed_outright_resumes_to_the_same_tables(tiny_run: Path, tmp_path: Path) -> None:
    """`fedmc run` is watched from outside while it trains: every socket of its family on
    loopback, Ray's GCS refusing a client without the run's token. It is SIGKILLed as soon
    as round 1 is recorded, and nothing it started may outlive it; `--resume` then
    finishes the run on one virtual client."""
    homes = tmp_path / "home"
    homes.mkdir()
    out = tmp_path / "tiny_traced"
    command = [sys.executable, "-m", "fedmc_flwr.cli", "run", "--config", str(TINY_TRACED)]
    command += ["--set", f"results_dir={tmp_path}"]
    short_ray_paths = tempfile.TemporaryDirectory(dir="/tmp")
    with ray_start_slot(out / "progress.json"), short_ray_paths as short:
        marker = f"TMPDIR={short}"
        killed = subprocess.Popen(command, env={**os.environ, "TMPDIR": short})
        try:
            with ListenerWatch(marker) as watch:
                watch.wait_for("gcs_server", killed)
                check_ray_refuses_strangers(watch.seen())
                wait_for_round(killed, out / "progress.json")
                survivors = survivors_of_sigkill(killed, marker, REAP_WAIT_S)
        finally:
            if killed.poll() is None:
                survivors_of_sigkill(killed, marker, REAP_WAIT_S)
        assert not survivors, f"alive {REAP_WAIT_S:g} s after the runner's SIGKILL: {survivors}"
        assert json.loads((out / "progress.json").read_text())["completed_round"] == 1
        check_listeners(watch.seen(), {"gcs_server", "raylet", "flwr-simulation"})
        commands = watch.commands()
        assert any("ray::" in c or "dashboard/agent" in c for c in commands), commands
    overrides = [f"results_dir={tmp_path}"]
    console = tmp_path / "resumed.txt"
    resumed = run_isolated(homes, overrides, 1, TINY_TRACED, "resume", console=console)
    printed = console.read_text()
    assert resumed == 0, printed[-4000:]
    assert "fedmc: resuming tiny_traced after round 1" in printed
    assert re.findall(r"\[ROUND (\d+)\]", printed) == ["2"], printed  # the run's own count
    assert re.findall(r"round (\d+)/2 done", printed) == ["2"], printed
    for table in ("metrics.csv", "per_seed.csv"):
        assert (out / table).read_bytes() == (tiny_run / table).read_bytes(), table
    for rnd in (1, 2):
        name = f"checkpoints/round_{rnd:03d}.npz"
        with np.load(out / name) as mine, np.load(tiny_run / name) as reference:
            for key in reference.files:
                np.testing.assert_array_equal(mine[key], reference[key])
