"""The node scorer: one network for every estate shape, blind to node indices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SMALL_DEMO

from fedmc_flwr.config import (
    POLICY_KINDS,
    ConfigError,
    ExperimentConfig,
    PPOConfig,
    WorldConfig,
    load_config,
)
from fedmc_flwr.policies.networks import KINDS, NodeScorer, build_network, pool
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sim.layout import GLOBAL_WIDTH, NODE_WIDTH
from fedmc_flwr.sim.world import MultiCloudSim

SHAPES = ((2, 3), (3, 5))  # regions x nodes per region


def scorer_cfg(regions: int, nodes: int) -> ExperimentConfig:
    ppo = PPOConfig(
        policy="node-scorer", num_envs=4, rollout_steps=16, num_minibatches=2, update_epochs=2
    )
    return ExperimentConfig(world=WorldConfig(regions=regions, nodes_per_region=nodes), ppo=ppo)


def test_the_scorer_has_the_same_parameters_on_every_estate() -> None:
    learners = [PPOLearner(scorer_cfg(*shape), [0], seed=0) for shape in SHAPES]
    shapes = [[w.shape for w in learner.get_weights()] for learner in learners]
    assert shapes[0] == shapes[1]
    flat = [build_network("mlp", NODE_WIDTH * n + GLOBAL_WIDTH, n, 64) for n in (6, 15)]
    assert sum(p.numel() for p in flat[0].parameters()) != sum(
        p.numel() for p in flat[1].parameters()
    )  # the flat MLP, by contrast, is tied to one shape


def test_weights_trained_on_one_estate_act_and_train_on_another() -> None:
    small, large = (PPOLearner(scorer_cfg(*shape), [0], seed=1) for shape in SHAPES)
    small.train_round(16)
    large.set_weights(small.get_weights())
    for a, b in zip(large.get_weights(), small.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    stats = large.train_round(16)
    assert np.isfinite(stats["policy_loss"]) and np.isfinite(stats["value_loss"])
    sim = MultiCloudSim(large.cfg.world, large.cfg.reward, [0, 1, 0])
    obs, mask = sim.reset([5, 6, 7])
    actions = small.policy().act(obs, mask)  # zero-shot: trained on 6 nodes, acting on 15
    assert actions.shape == (3,) and mask[np.arange(3), actions].all()


def test_scores_follow_the_nodes_not_their_indices() -> None:
    """Permuting the nodes' rows permutes the logits and leaves the value unchanged."""
    torch.manual_seed(0)
    network = NodeScorer(hidden=16)
    nodes = 7
    obs = torch.randn(5, nodes * NODE_WIDTH + GLOBAL_WIDTH)
    order = torch.randperm(nodes)
    rows = obs[:, : nodes * NODE_WIDTH].reshape(5, nodes, NODE_WIDTH)[:, order]
    shuffled = torch.cat([rows.reshape(5, -1), obs[:, nodes * NODE_WIDTH :]], dim=1)
    with torch.no_grad():
        logits, value = network(obs)
        logits_shuffled, value_shuffled = network(shuffled)
    torch.testing.assert_close(logits_shuffled, logits[:, order])
    torch.testing.assert_close(value_shuffled, value)
    assert logits.std(dim=1).min() > 0  # the nodes do get different scores


def test_scorer_checkpoint_restores_bit_for_bit(tmp_path: Path) -> None:
    learner = PPOLearner(scorer_cfg(*SHAPES[0]), [0, 1], seed=2)
    learner.train_round(16)
    learner.save(tmp_path / "scorer.npz")
    twin = PPOLearner(scorer_cfg(*SHAPES[0]), [0, 1], seed=9)
    twin.load(tmp_path / "scorer.npz")
    learner.train_round(16)
    twin.train_round(16)
    for a, b in zip(learner.get_weights(), twin.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_unknown_network_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"ppo\.policy"):
        load_config(SMALL_DEMO, ["ppo.policy=transformer"])


def test_pooling_gives_torch_means_numbers_and_gradients() -> None:
    """`pool` is written as sum / N for its cheaper backward; forward and backward must
    still be torch's mean bit for bit, or every published training result would move."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(64, 18, 32, generator=generator, requires_grad=True)
    weights = torch.randn(64, 1, 32, generator=generator)
    ours = pool(x)
    (ours * weights).sum().backward()
    ours_grad, x.grad = x.grad, None
    theirs = x.mean(dim=1, keepdim=True)
    (theirs * weights).sum().backward()
    assert torch.equal(ours, theirs)
    assert torch.equal(ours_grad, x.grad)


def test_the_schema_accepts_exactly_the_network_kinds() -> None:
    """config.py lists the kinds without importing torch; the two lists must agree."""
    assert POLICY_KINDS == KINDS
