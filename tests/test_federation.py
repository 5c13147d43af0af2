"""Real Flower simulation runs through `fedmc run`'s runner (about a minute each).

The same tiny experiment runs twice: on one virtual client per region, then with both
regions on one virtual client. The two metrics.csv files must be identical byte for
byte: the run is deterministic, and how regions map onto clients does not change it.
(test_kill_and_resume kills a third copy and resumes it; test_failing_regions runs
regions that fail.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, csv_rows
from flower_runs import run_isolated

from fedmc_flwr.config import load_config
from fedmc_flwr.federation.client_app import train_region
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
def test_metrics_rows_of_a_real_run(runs: list[Path]) -> None:
    out = runs[0]
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
    assert "name: tiny_federation" in (out / "config.yaml").read_text()
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


@pytest.mark.parametrize("table", ["metrics.csv", "per_seed.csv"])
@pytest.mark.flower
def test_same_config_and_seed_give_identical_metrics(runs: list[Path], table: str) -> None:
    first, second = ((out / table).read_bytes() for out in runs)
    assert first == second


@pytest.mark.flower
def test_a_rerun_refuses_to_overwrite(runs: list[Path], tmp_path: Path) -> None:
    overrides = [f"results_dir={runs[0].parent}"]
    before = (runs[0] / "metrics.csv").read_bytes()
    assert run_isolated(tmp_path, overrides, 2) == 2
    assert (runs[0] / "metrics.csv").read_bytes() == before
