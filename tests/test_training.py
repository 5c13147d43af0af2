"""`fedmc train`: centralised and local PPO end to end on a tiny estate."""

from __future__ import annotations

import csv

import pytest

from fedmc_flwr.cli import main
from fedmc_flwr.config import ExperimentConfig, load_config
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import COLUMNS, TIMING_COLUMNS
from fedmc_flwr.training import train

TINY = [
    "world.regions=2",
    "world.nodes_per_region=2",
    "ppo.num_envs=4",
    "ppo.rollout_steps=16",
    "ppo.num_minibatches=2",
    "ppo.update_epochs=1",
    "train.rounds=2",
    "train.steps_per_round=32",
    "eval.seeds=2",
    "eval.steps=40",
]


def tiny(tmp_path, name: str = "tiny") -> ExperimentConfig:
    return load_config("conf/small_demo.yaml", [*TINY, f"name={name}", f"results_dir={tmp_path}"])


def read(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("mode", ["centralised", "local"])
def test_train_writes_the_tidy_rows_and_checkpoints(tmp_path, mode: str) -> None:
    path = train(tiny(tmp_path), mode)
    assert path == tmp_path / f"tiny-{mode}" / "metrics.csv"
    with open(path, newline="") as handle:
        assert tuple(next(csv.reader(handle))) == COLUMNS
    rows = read(path)
    policy = f"ppo-{mode}"
    train_clients = {"all"} if mode == "centralised" else {"us-east1", "europe-west9"}
    for rnd in ("1", "2"):
        trained = [r for r in rows if r["round"] == rnd and r["phase"] == "train"]
        assert {r["client"] for r in trained} == train_clients
        assert all(r["policy"] == policy and r["policy_loss"] and r["entropy"] for r in trained)
        evals = [r for r in rows if r["round"] == rnd and r["phase"] == "eval"]
        assert {r["policy"] for r in evals} == {*DISPATCHERS, policy}
        mine = {r["client"]: r for r in evals if r["policy"] == policy}
        assert set(mine) == {"us-east1", "europe-west9", "all"}
        assert mine["all"]["seeds"] == "4" and float(mine["all"]["reward"]) < 0
    timing = read(path.parent / "timing.csv")
    assert timing and set(timing[0]) == set(TIMING_COLUMNS)
    assert (path.parent / "config.yaml").is_file()
    checkpoints = sorted(p.name for p in (path.parent / "checkpoints").iterdir())
    if mode == "centralised":
        assert checkpoints == ["ppo-centralised.npz"]
    else:
        assert checkpoints == ["ppo-local-europe-west9.npz", "ppo-local-us-east1.npz"]
    learner = PPOLearner(tiny(tmp_path), [0, 1], seed=123)
    learner.load(path.parent / "checkpoints" / checkpoints[0])
    assert learner.global_step == 2 * 32 * 4


def test_same_config_same_metrics_bit_for_bit(tmp_path) -> None:
    first = train(tiny(tmp_path / "a"), "centralised").read_bytes()
    second = train(tiny(tmp_path / "b"), "centralised").read_bytes()
    assert first == second


def test_cli_train_and_bad_mode(tmp_path, capsys) -> None:
    overrides = [arg for item in [*TINY, "train.rounds=1"] for arg in ("--set", item)]
    code = main(["train", *overrides, "--set", f"results_dir={tmp_path}", "--mode", "local"])
    assert code == 0
    out = capsys.readouterr().out
    assert "round 1/1" in out and "SPS" in out and "ppo-local" in out
    assert (tmp_path / "small_demo-local" / "metrics.csv").is_file()
    with pytest.raises(ValueError, match="unknown training mode"):
        train(tiny(tmp_path), "federated")
