"""Real Flower simulation runs through `fedmc run`'s runner (about a minute each).

The same tiny experiment runs twice: on one virtual client per region, then with both
regions on one virtual client. The two metrics.csv files must be identical byte for
byte: the run is deterministic, and how regions map onto clients does not change it.
A third copy, watched from outside (test_security's checks), is killed outright (SIGKILL)
after its first round and resumed: it must end byte-identical too. Faulty regions are
left out of their rounds and recorded; too few healthy regions stop the run with one line.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from flower_runs import (
    TINY,
    ray_start_slot,
    run_isolated,
    survivors_of_sigkill,
    watch_to_first_round,
)
from test_security import REAP_WAIT_S, check_listeners, check_ray_refuses_strangers

from fedmc_flwr.config import load_config
from fedmc_flwr.federation.client_app import train_region
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import COLUMNS, TIMING_COLUMNS
from fedmc_flwr.seeds import learner_seed

FAULTY = Path(__file__).parent / "conf" / "faulty_federation.yaml"
REGIONS = ("us-east1", "europe-west9")
DIAGNOSTICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


def test_a_region_resumes_its_learner_between_rounds(tmp_path: Path) -> None:
    """Two rounds through the state file equal two rounds of one learner kept in memory."""
    cfg = load_config(TINY)
    kept = PPOLearner(cfg, [1], seed=learner_seed(cfg.seed, 1))
    weights = kept.get_weights()
    for rnd in (1, 2):
        kept.set_weights(weights)
        kept.train_round(cfg.train.steps_per_round)
        weights, _ = train_region(cfg, 1, weights, rnd, tmp_path)
        for a, b in zip(weights, kept.get_update(), strict=True):
            np.testing.assert_array_equal(a, b)
    fresh = PPOLearner(cfg, [0], seed=learner_seed(cfg.seed, 0))
    fresh.set_weights(weights)
    fresh.train_round(cfg.train.steps_per_round)
    late, _ = train_region(cfg, 0, weights, 2, tmp_path)  # region 0 has no state yet
    for a, b in zip(late, fresh.get_update(), strict=True):
        np.testing.assert_array_equal(a, b)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.flower
def test_metrics_rows_of_a_real_run(runs: list[Path]) -> None:
    out = runs[0]
    assert tuple(_rows(out / "metrics.csv")[0]) == COLUMNS
    rows = _rows(out / "metrics.csv")
    for rnd in ("1", "2"):
        train = {r["client"]: r for r in rows if r["round"] == rnd and r["phase"] == "train"}
        assert set(train) == {*REGIONS, "all"}
        for row in train.values():
            assert row["policy"] == "ppo-fedavg"
            assert row["steps"] == str(4 * 64 * (2 if row["client"] == "all" else 1))
            assert all(np.isfinite(float(row[k])) for k in ("reward", "latency_ms", *DIAGNOSTICS))
        evals = {
            (r["policy"], r["client"]) for r in rows if r["round"] == rnd and r["phase"] == "eval"
        }
        expected = {(p, c) for p in ("ppo-fedavg", *DISPATCHERS) for c in (*REGIONS, "all")}
        assert evals == expected
    ppo_all = [r for r in rows if r["policy"] == "ppo-fedavg" and r["client"] == "all"]
    assert all(r["reward_ci95"] for r in ppo_all if r["phase"] == "eval")
    assert tuple(_rows(out / "timing.csv")[0]) == TIMING_COLUMNS
    assert "name: tiny_federation" in (out / "config.yaml").read_text()
    for rnd in (1, 2):
        with np.load(out / "checkpoints" / f"round_{rnd:03d}.npz", allow_pickle=False) as ckpt:
            assert all(np.isfinite(ckpt[k]).all() for k in ckpt.files)
    assert {p.name for p in (out / "plots").iterdir()} >= {
        "reward.png",
        "latency.png",
        "paired.png",
    }
    per_seed = _rows(out / "per_seed.csv")
    learner = [r for r in per_seed if r["policy"] == "ppo-fedavg"]
    assert {(r["round"], r["client"]) for r in learner} == {
        (rnd, c) for rnd in ("1", "2") for c in REGIONS
    }
    assert {r["round"] for r in per_seed if r["policy"] == "sed"} == {"0"}


@pytest.mark.parametrize("table", ["metrics.csv", "per_seed.csv"])
@pytest.mark.flower
def test_same_config_and_seed_give_identical_metrics(runs: list[Path], table: str) -> None:
    first, second = ((out / table).read_bytes() for out in runs)
    assert first == second


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


@pytest.mark.flower
def test_a_rerun_refuses_to_overwrite(runs: list[Path], tmp_path: Path) -> None:
    overrides = [f"results_dir={runs[0].parent}"]
    before = (runs[0] / "metrics.csv").read_bytes()
    assert run_isolated(tmp_path, overrides, 2) == 2
    assert (runs[0] / "metrics.csv").read_bytes() == before


@pytest.mark.flower
def test_faulty_regions_are_left_out_and_recorded(tmp_path: Path) -> None:
    """A raise, a hang past the round timeout, NaN weights, a wrong shape and an absurd step
    count: each round completes from its healthy regions, each failure is a row."""
    (tmp_path / "home").mkdir()
    assert run_isolated(tmp_path / "home", [f"results_dir={tmp_path}"], 3, config=FAULTY) == 0
    rows = _rows(tmp_path / "faulty_federation" / "metrics.csv")
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
    rows = _rows(tmp_path / "faulty_federation" / "metrics.csv")
    assert [r["phase"] for r in rows] == ["failed"]
    assert not (tmp_path / "faulty_federation" / "checkpoints").exists()


@pytest.mark.flower
def test_the_deadline_stops_the_run_and_everything_it_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "home").mkdir()
    overrides = [f"results_dir={tmp_path}", "federation.deadline_s=5"]
    started = time.monotonic()
    assert run_isolated(tmp_path / "home", overrides, 2) == 1
    assert time.monotonic() - started < 60
    assert "federation.deadline_s (5 s) reached" in capsys.readouterr().err
