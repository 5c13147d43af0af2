"""A run with a server optimiser and SCAFFOLD's drift correction, resumed after its first
round, writes the same tables as the run that went straight through: the optimiser's
momentum and the federation's control variate travel in the round's checkpoint, and each
region's own variate in its learner state, so the resumed round 2 takes the steps the
uninterrupted run took (a fresh momentum or variate would take others, and every later
metric would differ)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flower_runs import run_isolated

MOMENTUM = ["federation.server_optimizer=fedavgm", "federation.server_momentum=0.9"]
SCAFFOLD = ["federation.drift_correction=scaffold"]


@pytest.mark.flower
def test_a_resumed_run_continues_the_servers_momentum_and_control_variates(tmp_path: Path) -> None:
    homes = tmp_path / "home"
    homes.mkdir()
    overrides = [f"results_dir={tmp_path}", *MOMENTUM, *SCAFFOLD]
    assert run_isolated(homes, overrides, 2) == 0
    out = tmp_path / "tiny_federation"
    tables = ("metrics.csv", "per_seed.csv", "drift.csv")
    straight = {name: (out / name).read_bytes() for name in tables}
    last = out / "checkpoints" / "round_002.npz"
    with np.load(last) as saved:
        reference = {key: saved[key] for key in saved.files}
    assert {"server_m000", "server_c", "w000"} <= set(reference)  # state rides with weights
    assert np.abs(reference["server_c"]).max() > 0

    # As a run killed during round 2 leaves it: round 1 is the last one recorded, with
    # half the steps (every region trains the same steps in each of the two rounds).
    progress = out / "progress.json"
    steps = json.loads(progress.read_text())["train_steps"]
    progress.write_text(json.dumps({"completed_round": 1, "train_steps": steps // 2}))
    last.unlink()
    assert run_isolated(homes, overrides, 2, on_existing="resume") == 0

    for name, content in straight.items():
        assert (out / name).read_bytes() == content, name
    with np.load(last) as resumed:
        assert sorted(resumed.files) == sorted(reference)
        for key in reference:
            np.testing.assert_array_equal(resumed[key], reference[key])
