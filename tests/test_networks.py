"""The networks: the two-tier decision's probabilities, one network for every estate shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SMALL_DEMO

from fedmc_flwr.config import (
    ConfigError,
    ExperimentConfig,
    PPOConfig,
    WorldConfig,
    learner_plan,
    load_config,
)
from fedmc_flwr.policies.networks import (
    MASKED_LOGIT,
    ROW_WIDTH,
    SUMMARY_WIDTH,
    NodeScorer,
    TwoTier,
    build_network,
    pool,
)
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sim.layout import EXPECTED_DELAY, GLOBAL_WIDTH, NODE_WIDTH
from fedmc_flwr.sim.world import MultiCloudSim

SHAPES = ((2, 3), (3, 5))  # regions x nodes per region
SIZE_AGNOSTIC = ("two-tier", "node-scorer")


def small_cfg(kind: str, regions: int, nodes: int) -> ExperimentConfig:
    ppo = PPOConfig(policy=kind, num_envs=4, rollout_steps=16, num_minibatches=2, update_epochs=2)
    return ExperimentConfig(world=WorldConfig(regions=regions, nodes_per_region=nodes), ppo=ppo)


def random_batch(
    regions: int, nodes: int, batch: int = 64, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Observations and masks with every case in them: nodes masked at random, and in
    some rows a whole region masked (its probability must be exactly 0)."""
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(batch, regions * nodes * NODE_WIDTH + GLOBAL_WIDTH, generator=generator)
    mask = torch.rand(batch, regions, nodes, generator=generator) > 0.3
    mask[::3, 1] = False  # every third row: region 1 has no valid node
    mask[:, 0, 0] = True  # every row has some valid node
    return obs, mask.reshape(batch, -1)


@pytest.mark.parametrize("kind", SIZE_AGNOSTIC)
def test_size_agnostic_networks_have_the_same_parameters_on_every_estate(kind: str) -> None:
    learners = [PPOLearner(learner_plan(small_cfg(kind, *shape), [0]), seed=0) for shape in SHAPES]
    shapes = [[w.shape for w in learner.get_weights()] for learner in learners]
    assert shapes[0] == shapes[1]
    flat = [build_network("mlp", NODE_WIDTH * n + GLOBAL_WIDTH, n, 64, n) for n in (6, 15)]
    assert sum(p.numel() for p in flat[0].parameters()) != sum(
        p.numel() for p in flat[1].parameters()
    )  # the flat MLP, by contrast, is tied to one shape


@pytest.mark.parametrize("kind", SIZE_AGNOSTIC)
def test_weights_trained_on_one_estate_act_and_train_on_another(kind: str) -> None:
    small, large = (
        PPOLearner(learner_plan(small_cfg(kind, *shape), [0]), seed=1) for shape in SHAPES
    )
    small.train_round(16)
    large.set_weights(small.get_weights())
    for a, b in zip(large.get_weights(), small.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    stats = large.train_round(16)
    assert np.isfinite(stats["policy_loss"]) and np.isfinite(stats["value_loss"])
    sim = MultiCloudSim(large.cfg.world, large.cfg.reward, [0, 1, 0])
    obs, mask = sim.reset([5, 6, 7])
    policy = small.policy().on_estate(large.sim.nodes_per_region)
    actions = policy.act(obs, mask)  # zero-shot: trained on 6 nodes, acting on 15
    assert actions.shape == (3,) and mask[np.arange(3), actions].all()


def test_two_tier_log_probabilities_are_the_product_of_its_tiers() -> None:
    """Brute force over the full categorical: p(a) = p(region) * p(node | region), each
    tier a softmax over its valid entries, masked regions and nodes exactly 0; the
    training path's log-probability of every action equals the full joint's."""
    torch.manual_seed(0)
    regions, nodes = 3, 4
    network = TwoTier(hidden=16, nodes_per_region=nodes)
    obs, mask = random_batch(regions, nodes)
    with torch.no_grad():
        joint = network.masked_logits(obs, mask)
        estate = network.estate(obs, mask)
        summaries, valid = network.summaries(estate)
        region_scores = network.region_scorer(summaries).squeeze(-1)
        expected = torch.full_like(joint, float("-inf"))
        for b in range(len(obs)):
            region_weights = torch.where(valid[b], region_scores[b].exp(), 0.0)
            for r in range(regions):
                rows, node_mask = network.region_rows(estate, torch.full((len(obs),), r))
                node_weights = torch.where(
                    node_mask[b], network.node_scorer(rows[b]).squeeze(-1).exp(), 0.0
                )
                for n in range(nodes):
                    if not mask[b, r * nodes + n]:
                        continue
                    p = (region_weights[r] / region_weights.sum()) * (
                        node_weights[n] / node_weights.sum()
                    )
                    expected[b, r * nodes + n] = p.log()
        torch.testing.assert_close(joint[mask], expected[mask], rtol=1e-5, atol=1e-5)
        assert (joint[~mask] == MASKED_LOGIT).all()
        probs = torch.where(mask, joint.exp(), 0.0)
        torch.testing.assert_close(probs.sum(-1), torch.ones(len(obs)))
        for a in range(regions * nodes):
            actions = torch.full((len(obs),), a)
            rows, node_mask = network.region_rows(estate, actions // nodes)
            inputs = {"summaries": summaries, "valid": valid, "rows": rows, "node_mask": node_mask}
            logp, _, _ = network.evaluate(inputs, actions)
            ok = mask[:, a]
            torch.testing.assert_close(logp[ok], joint[ok, a], rtol=1e-5, atol=1e-5)


def test_two_tier_samples_follow_its_probabilities_and_never_a_masked_action() -> None:
    torch.manual_seed(1)
    network = TwoTier(hidden=16, nodes_per_region=4)
    obs, mask = random_batch(3, 4, batch=8, seed=2)
    obs, mask = obs[:1].expand(20_000, -1), mask[:1].expand(20_000, -1)
    noise = torch.rand(20_000, network.noise_width(12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        step = network.sample(obs, mask, noise)
        joint = network.masked_logits(obs[:1], mask[:1])[0]
    assert mask[0, step.action].all()
    counts = torch.bincount(step.action, minlength=12).double() / len(step.action)
    torch.testing.assert_close(counts, joint.exp().double(), atol=0.015, rtol=0)
    torch.testing.assert_close(step.logprob, joint[step.action])


def test_two_tier_greedy_takes_the_best_region_then_its_best_node() -> None:
    torch.manual_seed(2)
    nodes = 4
    network = TwoTier(hidden=16, nodes_per_region=nodes)
    obs, mask = random_batch(3, nodes, seed=4)
    with torch.no_grad():
        joint = network.masked_logits(obs, mask).reshape(len(obs), 3, nodes)
        region = torch.logsumexp(joint, dim=-1).argmax(dim=-1)  # p(region) = sum over nodes
        node = joint[torch.arange(len(obs)), region].argmax(dim=-1)
        torch.testing.assert_close(network.greedy(obs, mask), region * nodes + node)


def test_a_region_summary_is_its_nodes_mean_least_valid_delay_and_valid_share() -> None:
    nodes = 3
    network = TwoTier(hidden=8, nodes_per_region=nodes)
    obs, mask = random_batch(2, nodes, batch=6, seed=5)
    estate = network.estate(obs, mask)
    summaries, valid = network.summaries(estate)
    assert summaries.shape == (6, 2, SUMMARY_WIDTH)
    rows = obs[:, : 2 * nodes * NODE_WIDTH].reshape(6, 2, nodes, NODE_WIDTH)
    grid = mask.reshape(6, 2, nodes)
    torch.testing.assert_close(summaries[..., :NODE_WIDTH], rows.mean(dim=2))
    for b in range(6):
        for r in range(2):
            delays = rows[b, r, grid[b, r], EXPECTED_DELAY]
            least = delays.min() if len(delays) else torch.tensor(0.0)
            assert summaries[b, r, NODE_WIDTH] == least
            assert summaries[b, r, NODE_WIDTH + 1] == grid[b, r].float().mean()
    torch.testing.assert_close(valid, grid.any(dim=-1))
    globals_ = obs[:, None, -GLOBAL_WIDTH:].expand(-1, 2, -1)
    torch.testing.assert_close(summaries[..., -GLOBAL_WIDTH:], globals_)


def test_training_reads_only_the_chosen_regions_nodes() -> None:
    """A rollout stores, per step, one summary per region and the rows of the chosen
    region's nodes (not the estate), and the update's log-probabilities from them are the
    ones the rollout sampled with; another region's node rows never enter the update."""
    regions, nodes = 4, 5
    learner = PPOLearner(learner_plan(small_cfg("two-tier", regions, nodes), [0]), seed=3)
    learner.norm.update(learner.obs)
    rollout = learner._collect(8, np.zeros(6))
    frames = 8 * learner.sim.num_envs
    assert rollout["summaries"].shape == (frames, regions, SUMMARY_WIDTH)
    assert rollout["rows"].shape == (frames, nodes, ROW_WIDTH)
    assert "obs" not in rollout
    stored = sum(v[0].numel() for k, v in rollout.items() if k in ("summaries", "rows"))
    assert stored == regions * SUMMARY_WIDTH + nodes * ROW_WIDTH < learner.sim.obs_dim
    inputs = {key: value.clone() for key, value in rollout.items()}
    with torch.no_grad():
        logp, _, values = learner.model.evaluate(inputs, inputs["actions"])
    torch.testing.assert_close(logp, rollout["logprobs"])
    torch.testing.assert_close(values, rollout["values"])


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


def test_two_tier_scores_follow_regions_and_nodes_not_their_indices() -> None:
    """Permuting the regions (and the nodes inside one) permutes the joint logits."""
    torch.manual_seed(4)
    regions, nodes = 3, 4
    network = TwoTier(hidden=16, nodes_per_region=nodes)
    obs, mask = random_batch(regions, nodes, batch=9, seed=6)
    grid = obs[:, : regions * nodes * NODE_WIDTH].reshape(9, regions, nodes, NODE_WIDTH)
    region_order, node_order = torch.tensor([2, 0, 1]), torch.tensor([3, 1, 0, 2])
    moved = grid[:, region_order][:, :, node_order]
    moved_obs = torch.cat([moved.reshape(9, -1), obs[:, -GLOBAL_WIDTH:]], dim=1)
    moved_mask = mask.reshape(9, regions, nodes)[:, region_order][:, :, node_order]
    with torch.no_grad():
        joint = network.masked_logits(obs, mask).reshape(9, regions, nodes)
        moved_joint = network.masked_logits(moved_obs, moved_mask.reshape(9, -1))
        torch.testing.assert_close(
            moved_joint.reshape(9, regions, nodes), joint[:, region_order][:, :, node_order]
        )
        torch.testing.assert_close(
            network.value(moved_obs, moved_mask.reshape(9, -1)), network.value(obs, mask)
        )


@pytest.mark.parametrize("kind", SIZE_AGNOSTIC)
def test_checkpoint_restores_bit_for_bit(tmp_path: Path, kind: str) -> None:
    learner = PPOLearner(learner_plan(small_cfg(kind, *SHAPES[0]), [0, 1]), seed=2)
    learner.train_round(16)
    learner.save(tmp_path / "learner.npz")
    twin = PPOLearner(learner_plan(small_cfg(kind, *SHAPES[0]), [0, 1]), seed=9)
    twin.load(tmp_path / "learner.npz")
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


def test_the_scorers_depth_is_a_config_key() -> None:
    deep_cfg, shallow_cfg = small_cfg("two-tier", 2, 3), small_cfg("two-tier", 2, 3)
    shallow_cfg.ppo.scorer_depth = 1
    deep, shallow = (PPOLearner(learner_plan(cfg, [0]), seed=0) for cfg in (deep_cfg, shallow_cfg))
    linears = [
        sum(isinstance(layer, torch.nn.Linear) for layer in learner.model.node_scorer)
        for learner in (deep, shallow)
    ]
    assert linears == [3, 2]
    assert len(shallow.get_weights()) == len(deep.get_weights()) - 4  # two layers fewer
