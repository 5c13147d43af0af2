"""The suite's reference Flower run (conftest's `tiny_run`: the tiny experiment replaying
real traces, one virtual client per region) and what it writes, and a region's learner
carried between rounds through its state file.

Its tables are the reference the other runs must reproduce byte for byte: the
deployment engine's (test_deployment) and a killed run resumed on one virtual client
serving both regions (test_kill_and_resume), so the run is deterministic whatever the
engine and however regions map onto clients. test_failing_regions runs regions that fail.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, TINY, TINY_TRACED, csv_rows

from fedmc_flwr.config import load_config
from fedmc_flwr.federation.client_app import train_region
from fedmc_flwr.federation.runner import run_federation
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import COLUMNS, TIMING_COLUMNS
from fedmc_flwr.seeds import learner_seed

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


@pytest.mark.flower
def test_metrics_rows_of_a_real_run(tiny_run: Path) -> None:
    out = tiny_run
    assert tuple(csv_rows(out / "metrics.csv")[0]) == COLUMNS
    rows = csv_rows(out / "metrics.csv")
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
    assert tuple(csv_rows(out / "timing.csv")[0]) == TIMING_COLUMNS
    saved = load_config(out / "config.yaml")  # what the run ran: the traces it replayed
    assert saved.name == "tiny_traced" and saved.world.arrivals == "trace"
    assert saved.world.rate_trace == ["alibaba2018", "azure_v2"]
    assert Path(saved.world.carbon_file) == REPO / "tests" / "data" / "em_carbon.csv"
    for rnd in (1, 2):
        with np.load(out / "checkpoints" / f"round_{rnd:03d}.npz", allow_pickle=False) as ckpt:
            assert all(np.isfinite(ckpt[k]).all() for k in ckpt.files)
    assert {p.name for p in (out / "plots").iterdir()} >= {
        "reward.png",
        "latency.png",
        "paired.png",
    }
    per_seed = csv_rows(out / "per_seed.csv")
    learner = [r for r in per_seed if r["policy"] == "ppo-fedavg"]
    assert {(r["round"], r["client"]) for r in learner} == {
        (rnd, c) for rnd in ("1", "2") for c in REGIONS
    }
    assert {r["round"] for r in per_seed if r["policy"] == "sed"} == {"0"}


@pytest.mark.flower
def test_a_rerun_refuses_to_overwrite(tiny_run: Path) -> None:
    """Refused before anything starts: no Flower process, the tables untouched."""
    before = (tiny_run / "metrics.csv").read_bytes()
    assert run_federation(TINY_TRACED, [f"results_dir={tiny_run.parent}"], 2) == 2
    assert (tiny_run / "metrics.csv").read_bytes() == before
