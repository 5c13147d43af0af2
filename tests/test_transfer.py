"""A node scorer trained on one estate, judged unchanged on another beside its dispatchers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from test_baselines import assert_ranked_and_paired

from fedmc_flwr.cli import main
from fedmc_flwr.config import (
    ConfigError,
    ExperimentConfig,
    PPOConfig,
    WorldConfig,
    learner_plan,
    to_yaml,
)
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.experiments.transfer import POLICY, run_transfer
from fedmc_flwr.policies.checkpoints import read_checkpoint, write_weights
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sim.signals import region_catalogue

TARGET = WorldConfig(regions=4, nodes_per_region=5)


def trained_run(folder: Path, policy: str, saved_learner: bool = False, seed: int = 0) -> Path:
    """A briefly trained 2 x 3 learner's weights, checkpointed as a federated run's, or
    the learner saved as `fedmc train` saves it."""
    torch.set_num_threads(1)
    cfg = ExperimentConfig(
        name=f"source-{policy}-s{seed}",
        seed=seed,
        world=WorldConfig(regions=2, nodes_per_region=3),
        ppo=PPOConfig(num_envs=8, rollout_steps=32, num_minibatches=2, policy=policy),
    )
    learner = PPOLearner(learner_plan(cfg, [0, 1]), seed=seed)
    learner.train_round(64)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(to_yaml(cfg))
    if saved_learner:
        path = folder / "checkpoints" / "ppo-centralised.npz"
        learner.save(path)
        return path
    path = folder / "checkpoints" / "round_001.npz"
    write_weights(path, learner.get_weights())
    return path


def target_config(results: Path) -> ExperimentConfig:
    cfg = ExperimentConfig(name="target", world=TARGET, results_dir=str(results))
    cfg.eval.seeds, cfg.eval.steps = 3, 100
    return cfg


def test_a_node_scorer_acts_unchanged_on_a_bigger_estate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trained on 2 x 3 nodes, judged on 4 x 5 beside every dispatcher: each of its
    per-world rewards is what the same weights earn on that estate's held-out worlds, and
    the table is `fedmc run`'s, its title naming the run, round and seed it came from."""
    ckpt = trained_run(tmp_path, "node-scorer")
    target = target_config(tmp_path / "results")
    rows = pd.read_csv(run_transfer(ckpt, target) / "per_seed.csv")
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        "source-node-scorer-s0's policy after round 1 (training seed 0), unchanged as "
        "ppo-transfer, and the dispatchers on target's held-out worlds, mean over regions:"
    )
    assert_ranked_and_paired(out, {POLICY, *DISPATCHERS})
    assert "(one training seed)" in out
    assert set(rows.policy) >= {POLICY, "sed", "two-tier", "myopic-oracle"}
    assert (rows.groupby("policy").size() == 4 * 3).all()  # 4 regions x 3 worlds each
    learner = PPOLearner(
        learner_plan(ExperimentConfig(world=TARGET, ppo=PPOConfig(policy="node-scorer")), [0]),
        seed=0,
    )
    learner.set_weights(read_checkpoint(ckpt))
    policy = learner.policy(POLICY)
    expected = evaluate(lambda sim: policy, target, 3)
    got = rows[(rows.policy == POLICY) & (rows.client == region_catalogue(4)[3].name)]
    np.testing.assert_array_equal(got.eval_seed.to_numpy(), expected.eval_seeds)
    np.testing.assert_allclose(got.reward.to_numpy(), expected.per_seed_reward, rtol=1e-12)


def test_a_flat_mlp_cannot_move_and_says_so(tmp_path: Path) -> None:
    ckpt = trained_run(tmp_path, "mlp")
    with pytest.raises(ConfigError, match="only two-tier and node-scorer networks move"):
        run_transfer(ckpt, target_config(tmp_path / "results"))


def test_cli_transfer_and_its_one_line_errors(tmp_path: Path, capsys) -> None:
    ckpt = trained_run(tmp_path, "node-scorer")
    target = tmp_path / "target.yaml"
    target.write_text(to_yaml(target_config(tmp_path / "results")))
    assert main(["transfer", "--checkpoint", str(ckpt), "--config", str(target)]) == 0
    capsys.readouterr()
    assert (
        main(["transfer", "--checkpoint", str(tmp_path / "no.npz"), "--config", str(target)]) == 2
    )
    assert capsys.readouterr().err.count("\n") == 1


def test_a_saved_learner_transfers_as_its_weights_do(tmp_path: Path) -> None:
    federated = run_transfer(
        trained_run(tmp_path / "a", "node-scorer"), target_config(tmp_path / "ra")
    )
    saved = run_transfer(
        trained_run(tmp_path / "b", "node-scorer", saved_learner=True),
        target_config(tmp_path / "rb"),
    )
    a, b = (pd.read_csv(out / "per_seed.csv") for out in (federated, saved))
    np.testing.assert_array_equal(a.reward.to_numpy(), b.reward.to_numpy())


def test_transfers_of_two_training_seeds_pair_as_one_learner(tmp_path: Path, capsys) -> None:
    """Each transfer's rows carry its checkpoint's round and steps, so `fedmc report` over
    the folders sees one learner with two training seeds beside the shared dispatchers."""
    folders = [
        run_transfer(
            trained_run(tmp_path / f"s{seed}", "node-scorer", seed=seed),
            target_config(tmp_path / "results"),
        )
        for seed in (0, 1)
    ]
    rows = pd.read_csv(folders[0] / "per_seed.csv")
    mine = rows[rows.policy == POLICY]
    assert set(mine["round"]) == {1} and set(mine.train_steps) == {2000 * 8 * 2}
    assert set(rows[rows.policy == "sed"]["round"]) == {0}
    capsys.readouterr()
    assert main(["report", *map(str, folders), "--baseline", "sed"]) == 0
    line = next(r for r in capsys.readouterr().out.splitlines() if r.startswith(POLICY))
    assert line.split()[1] == "2"  # training seeds
