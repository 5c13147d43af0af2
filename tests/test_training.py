"""`fedmc train`: centralised and local PPO end to end on a tiny estate."""

from __future__ import annotations

import csv

import pytest
from conftest import SMALL_DEMO, TINY_WORLD, csv_rows
from test_baselines import assert_ranked_and_paired
from test_tracking import CLEANRL_TAGS, DISPATCHER_RUNS, HELD_OUT_TAGS, read_board

from fedmc_flwr.cli import main
from fedmc_flwr.config import ExperimentConfig, learner_plan, load_config
from fedmc_flwr.experiments.training import _learners, matched_config, train
from fedmc_flwr.federation.summary import last_round_table
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import COLUMNS, PER_SEED_COLUMNS, TIMING_COLUMNS, read_per_seed

SHORT_TRAINING = [
    *TINY_WORLD,
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
    return load_config(SMALL_DEMO, [*SHORT_TRAINING, f"name={name}", f"results_dir={tmp_path}"])


def mine_all(rows: list[dict], policy: str, rnd: int) -> dict:
    """The learner's held-out row over all regions in round `rnd` of metrics.csv."""
    return next(
        r
        for r in rows
        if r["round"] == str(rnd)
        and r["phase"] == "eval"
        and r["policy"] == policy
        and r["client"] == "all"
    )


@pytest.mark.parametrize("mode", ["centralised", "local"])
def test_train_writes_the_tidy_rows_and_checkpoints(tmp_path, mode: str) -> None:
    path = train(tiny(tmp_path), mode)
    assert path == tmp_path / f"tiny-{mode}" / "metrics.csv"
    with open(path, newline="") as handle:
        assert tuple(next(csv.reader(handle))) == COLUMNS
    rows = csv_rows(path)
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
    timing = csv_rows(path.parent / "timing.csv")
    assert timing and set(timing[0]) == set(TIMING_COLUMNS)
    assert (path.parent / "config.yaml").is_file()
    checkpoints = sorted(p.name for p in (path.parent / "checkpoints").iterdir())
    if mode == "centralised":
        assert checkpoints == ["ppo-centralised.npz"]
    else:
        assert checkpoints == ["ppo-local-europe-west9.npz", "ppo-local-us-east1.npz"]
    learner = PPOLearner(learner_plan(tiny(tmp_path), [0, 1]), seed=123)
    learner.load(path.parent / "checkpoints" / checkpoints[0])
    # Matched budgets: the centralised learner does the steps of the two regions' learners.
    assert learner.global_step == 2 * 32 * 4 * (2 if mode == "centralised" else 1)

    per_seed = read_per_seed(path.parent / "per_seed.csv")
    assert tuple(per_seed.columns) == PER_SEED_COLUMNS
    dispatchers = per_seed[per_seed["round"] == 0]
    assert set(dispatchers["policy"]) == set(DISPATCHERS)
    assert len(dispatchers) == len(DISPATCHERS) * 2 * 2 and set(dispatchers["train_steps"]) == {0}
    for rnd in (1, 2):
        mine = per_seed[per_seed["round"] == rnd]
        assert set(mine["policy"]) == {policy} and len(mine) == 2 * 2
        assert set(mine["train_steps"]) == {rnd * 2 * 32 * 4}  # both regions' worth
        evals = {r["client"]: r for r in rows if r["round"] == str(rnd) and r["policy"] == policy}
        for client, group in mine.groupby("client"):
            assert group["reward"].mean() == pytest.approx(float(evals[client]["reward"]))
    assert set(per_seed["train_seed"]) == {0} and set(per_seed["experiment"]) == {"tiny"}

    # TensorBoard: each learner's PPO updates (rollouts of 16 steps per env), the held-out
    # metrics per region and over all, at the steps per_seed.csv says were trained so far.
    board = read_board(path.parent / "tb")
    assert set(board) == {"us-east1", "europe-west9", "all"} | DISPATCHER_RUNS
    learners = {"all"} if mode == "centralised" else {"us-east1", "europe-west9"}
    for run, tags in board.items():
        assert set(tags) == HELD_OUT_TAGS | (CLEANRL_TAGS if run in learners else set())
        assert [step for step, _ in tags["heldout/reward"]] == [256, 512]
    # 4 updates a round for the centralised learner, 2 for each local one, side by side
    updates = [64 * k for k in range(1, 9)] if mode == "centralised" else [128, 256, 384, 512]
    for learner in learners:
        assert [step for step, _ in board[learner]["losses/value_loss"]] == updates
    for step, value in board["all"]["heldout/reward"]:
        expected = float(mine_all(rows, policy, step // 256)["reward"])
        assert value == pytest.approx(expected, rel=1e-6)


def test_budgets_are_matched(tmp_path) -> None:
    """Centralised PPO takes as many env steps and gradient updates per round as the
    regions' learners together, and its learning rate anneals over its own plan."""
    cfg = tiny(tmp_path)
    matched = matched_config(cfg, "centralised")
    assert matched.train.steps_per_round == 2 * cfg.train.steps_per_round
    assert matched.ppo == cfg.ppo and matched.world == cfg.world
    assert cfg.train.steps_per_round == 32  # the caller's config is left alone
    central = _learners(cfg, "centralised")["all"]
    local = _learners(cfg, "local")
    central_stats, local_stats = [], []
    for _ in range(cfg.train.rounds):
        central_stats.append(central.train_round(matched.train.steps_per_round))
        local_stats.append([lrn.train_round(cfg.train.steps_per_round) for lrn in local.values()])
    central_steps = sum(s["env_steps"] for s in central_stats)
    assert central_steps == sum(s["env_steps"] for round_ in local_stats for s in round_)
    local_updates = sum(lrn.optimizer.updates for lrn in local.values())
    assert central.optimizer.updates == local_updates > 0
    # Linear decay over each learner's own planned steps per env (rounds x steps_per_round):
    # the last rollout (16 steps) starts 16 steps before the end of the plan. Planned on the
    # unscaled budget, the centralised learner would train its second half at step size 0.
    lr, rollout = cfg.ppo.learning_rate, cfg.ppo.rollout_steps
    planned = {"central": 2 * matched.train.steps_per_round, "local": 2 * cfg.train.steps_per_round}
    assert central.optimizer.lr == pytest.approx(lr * rollout / planned["central"])
    for lrn in local.values():
        assert lrn.optimizer.lr == pytest.approx(lr * rollout / planned["local"])


def test_same_config_same_metrics_bit_for_bit(tmp_path) -> None:
    first = train(tiny(tmp_path / "a"), "centralised").read_bytes()
    second = train(tiny(tmp_path / "b"), "centralised").read_bytes()
    assert first == second


def test_cli_train_and_bad_mode(tmp_path, capsys) -> None:
    overrides = [arg for item in [*SHORT_TRAINING, "train.rounds=1"] for arg in ("--set", item)]
    code = main(["train", *overrides, "--set", f"results_dir={tmp_path}", "--mode", "local"])
    assert code == 0
    out = capsys.readouterr().out
    assert "round 1/1" in out and "SPS" in out and "ppo-local" in out
    assert (tmp_path / "small_demo-local" / "metrics.csv").is_file()
    assert (tmp_path / "small_demo-local" / "per_seed.csv").is_file()
    # the table `fedmc run` prints of its own files, printed of these
    assert_ranked_and_paired(out, {*DISPATCHERS, "ppo-local"})
    assert last_round_table(tmp_path / "small_demo-local" / "metrics.csv") in out
    with pytest.raises(ValueError, match="unknown training mode"):
        train(tiny(tmp_path), "federated")
