"""Regions whose estates differ in regions and nodes federate one node-scorer network."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import CONF, SMALL_DEMO, TINY_HETERO

from fedmc_flwr.config import ConfigError, load_config, region_world, shares_one_estate
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.experiments.training import train
from fedmc_flwr.policies.checkpoints import read_checkpoint, round_checkpoint
from fedmc_flwr.policies.ppo import PPOLearner

HETERO = CONF / "hetero_estates.yaml"


def test_each_region_trains_in_an_estate_of_its_own_shape() -> None:
    cfg = load_config(HETERO)
    shapes = [
        (w.regions, w.nodes_per_region) for w in (region_world(cfg.world, r) for r in range(3))
    ]
    assert shapes == [(2, 10), (3, 6), (5, 4)]
    assert not shares_one_estate(cfg) and shares_one_estate(load_config(SMALL_DEMO))
    learners = [PPOLearner(cfg, [r], seed=r) for r in range(3)]
    assert [learner.sim.num_actions for learner in learners] == [20, 18, 20]
    assert len({tuple(w.shape for w in learner.get_weights()) for learner in learners}) == 1
    with pytest.raises(ValueError, match="different shapes"):
        PPOLearner(cfg, [0, 1], seed=0)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["world.region_estates=[[2,10],[3,6]]"], "one per"),
        (["world.region_estates=[[1,3],[1,6],[5,4]]"], "more than k regions"),
        (["world.region_estates=[[2,0],[3,6],[5,4]]"], "integers >= 1"),
        (["ppo.policy=mlp"], "node-scorer"),
        (["world.region_load=[1,2,3]"], "region_load"),
    ],
)
def test_estates_that_cannot_federate_are_config_errors(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(HETERO, overrides)


def test_estates_of_one_shape_need_no_node_scorer() -> None:
    cfg = load_config(HETERO, ["ppo.policy=mlp", "world.region_estates=[[3,6],[3,6],[3,6]]"])
    assert shares_one_estate(cfg)


def test_centralised_ppo_refuses_estates_of_different_shapes(tmp_path: Path) -> None:
    cfg = load_config(TINY_HETERO, [f"results_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="centralised"):
        train(cfg, "centralised")


@pytest.fixture(scope="module")
def hetero_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_hetero through Flower's simulation engine, one virtual client per region."""
    from flower_runs import run_isolated

    results = tmp_path_factory.mktemp("results")
    homes = tmp_path_factory.mktemp("home")
    assert run_isolated(homes, [f"results_dir={results}"], 3, TINY_HETERO) == 0
    return results / "tiny_hetero"


@pytest.mark.flower
def test_one_network_federates_over_three_estate_shapes(hetero_run: Path) -> None:
    """Every round each region's client trained and was judged on its own estate, and the
    global network of the last round, on each region's own estate, gives exactly the
    held-out reward that region reported for it."""
    cfg = load_config(hetero_run / "config.yaml")
    metrics = pd.read_csv(hetero_run / "metrics.csv")
    trained = metrics[(metrics.phase == "train") & (metrics.policy == "ppo-fedavg")]
    assert sorted(trained["round"].unique()) == [1, 2]
    names = ["us-east1", "europe-west9", "northamerica-northeast1"]
    for _, clients in trained.groupby("round").client:
        assert sorted(set(clients) - {"all"}) == sorted(names)
    weights = read_checkpoint(round_checkpoint(hetero_run, 2))
    judged = metrics[
        (metrics.phase == "eval") & (metrics.policy == "ppo-fedavg") & (metrics["round"] == 2)
    ].set_index("client")
    for region, name in enumerate(names):
        learner = PPOLearner(cfg, [region], seed=0)
        learner.set_weights(weights)
        policy = learner.policy("ppo-fedavg")
        result = evaluate(lambda sim, policy=policy: policy, cfg, region)
        assert result.per_seed_reward.mean() == pytest.approx(judged.loc[name, "reward"], abs=1e-9)
    assert np.isfinite(judged["reward"]).all()
