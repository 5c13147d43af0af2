"""Regions whose estates differ in regions and nodes federate one network: which estates can,
without Flower (test_mixed_federation federates three of them through Flower)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CONF, SMALL_DEMO, TINY_HETERO

from fedmc_flwr.config import (
    ConfigError,
    learner_plan,
    load_config,
    region_world,
    shares_one_estate,
)
from fedmc_flwr.experiments.training import train
from fedmc_flwr.policies.ppo import PPOLearner

HETERO = CONF / "hetero_estates.yaml"


def test_each_region_trains_in_an_estate_of_its_own_shape() -> None:
    cfg = load_config(HETERO)
    shapes = [
        (w.regions, w.nodes_per_region) for w in (region_world(cfg.world, r) for r in range(3))
    ]
    assert shapes == [(2, 10), (3, 6), (5, 4)]
    assert not shares_one_estate(cfg) and shares_one_estate(load_config(SMALL_DEMO))
    learners = [PPOLearner(learner_plan(cfg, [r]), seed=r) for r in range(3)]
    assert [learner.sim.num_actions for learner in learners] == [20, 18, 20]
    assert len({tuple(w.shape for w in learner.get_weights()) for learner in learners}) == 1
    with pytest.raises(ValueError, match="different shapes"):
        PPOLearner(learner_plan(cfg, [0, 1]), seed=0)


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
    cfg = load_config(
        HETERO,
        [
            "ppo.policy=mlp",
            "ppo.privileged_critic=false",
            "world.region_estates=[[3,6],[3,6],[3,6]]",
        ],
    )
    assert shares_one_estate(cfg)


def test_centralised_ppo_refuses_estates_of_different_shapes(tmp_path: Path) -> None:
    cfg = load_config(TINY_HETERO, [f"results_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="centralised"):
        train(cfg, "centralised")
