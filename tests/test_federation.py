"""Real Flower simulation runs through `fedmc run`'s runner (about a minute each).

The same tiny experiment runs twice: on one virtual client per region, then with both
regions on one virtual client. The two metrics.csv files must be identical byte for
byte: the run is deterministic, and how regions map onto clients does not change it.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import numpy as np
import pytest

from fedmc_flwr.config import load_config
from fedmc_flwr.federation.client_app import train_region
from fedmc_flwr.federation.runner import run_federation
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import COLUMNS, TIMING_COLUMNS
from fedmc_flwr.seeds import learner_seed

TINY = Path(__file__).parent / "conf" / "tiny_federation.yaml"
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
    with pytest.raises(FileNotFoundError, match="no learner state"):
        train_region(cfg, 0, weights, 2, tmp_path)


def _processes_with_env(marker: str) -> list[int]:
    """Live processes whose environment mentions `marker` (the run's private Flower home)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def _run(homes: Path, overrides: list[str], supernodes: int) -> int:
    """run_federation with its private Flower home under `homes`; no process may outlive it."""
    previous, tempfile.tempdir = tempfile.tempdir, str(homes)
    try:
        code = run_federation(TINY, overrides, num_supernodes=supernodes)
    finally:
        tempfile.tempdir = previous
    assert _processes_with_env(f"FLWR_HOME={homes}") == [], "Flower processes left running"
    return code


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    outs = []
    for supernodes in (2, 1):
        results = tmp_path_factory.mktemp(f"results{supernodes}")
        homes = tmp_path_factory.mktemp(f"home{supernodes}")
        assert _run(homes, [f"results_dir={results}"], supernodes) == 0
        outs.append(results / "tiny_federation")
    return outs


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


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
def test_same_config_and_seed_give_identical_metrics(runs: list[Path], table: str) -> None:
    first, second = ((out / table).read_bytes() for out in runs)
    assert first == second


def test_a_failed_client_fails_the_run(tmp_path: Path) -> None:
    # A file where the clients keep their learners: every client's fit raises.
    (tmp_path / "tiny_federation").mkdir()
    (tmp_path / "tiny_federation" / "clients").write_text("")
    (tmp_path / "home").mkdir()
    overrides = [f"results_dir={tmp_path}", "train.rounds=1"]
    assert _run(tmp_path / "home", overrides, supernodes=2) == 1
    assert _rows(tmp_path / "tiny_federation" / "metrics.csv") == []
