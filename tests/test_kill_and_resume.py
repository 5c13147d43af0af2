"""A run killed outright (SIGKILL) after its first round leaves no process behind, and
`--resume` finishes it byte-identical to the uninterrupted tiny run (conftest's `runs`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY
from flower_runs import ray_start_slot, run_isolated, survivors_of_sigkill, watch_to_first_round
from test_security import REAP_WAIT_S, check_listeners, check_ray_refuses_strangers


@pytest.mark.flower
def test_a_run_killed_outright_resumes_to_the_same_tables(runs: list[Path], tmp_path: Path) -> None:
    """`fedmc run` is watched (test_security's checks: loopback only, Ray locked) and
    SIGKILLed right after round 1, leaving no process behind; `--resume` finishes it
    byte-identical to an uninterrupted run."""
    homes = tmp_path / "home"
    homes.mkdir()
    out = tmp_path / "tiny_federation"
    command = [sys.executable, "-m", "fedmc_flwr.cli", "run", "--config", str(TINY)]
    command += ["--set", f"results_dir={tmp_path}"]
    short_ray_paths = tempfile.TemporaryDirectory(dir="/tmp")
    with ray_start_slot(out / "progress.json"), short_ray_paths as short:
        marker = f"TMPDIR={short}"
        killed = subprocess.Popen(command, env={**os.environ, "TMPDIR": short})
        try:
            seen = watch_to_first_round(killed, marker, out / "progress.json")
            assert json.loads((out / "progress.json").read_text())["completed_round"] == 1
            check_listeners(seen, {"gcs_server", "raylet", "flwr-simulation"})
            check_ray_refuses_strangers(seen)
        finally:
            survivors = survivors_of_sigkill(killed, marker, REAP_WAIT_S)
        assert not survivors, f"alive {REAP_WAIT_S:g} s after the runner's SIGKILL: {survivors}"
    assert run_isolated(homes, [f"results_dir={tmp_path}"], 2, on_existing="resume") == 0
    for table in ("metrics.csv", "per_seed.csv"):
        assert (out / table).read_bytes() == (runs[0] / table).read_bytes(), table
    for rnd in (1, 2):
        name = f"checkpoints/round_{rnd:03d}.npz"
        with np.load(out / name) as mine, np.load(runs[0] / name) as reference:
            for key in reference.files:
                np.testing.assert_array_equal(mine[key], reference[key])
