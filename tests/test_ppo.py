"""The PPO learner: its contract (weights, state, determinism), FedProx's term, and learning."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from fedmc_flwr.config import ExperimentConfig, PPOConfig, WorldConfig, learner_plan
from fedmc_flwr.policies import heap
from fedmc_flwr.policies import ppo as ppo_module
from fedmc_flwr.policies.moments import MOMENT_ARRAYS, Moments
from fedmc_flwr.policies.ppo import (
    STATISTICS,
    PPOLearner,
    gae,
    proximal_term,
    weights_of_state,
)
from fedmc_flwr.sim.layout import GLOBAL_WIDTH, NODE_WIDTH
from fedmc_flwr.sim.world import MultiCloudSim

LOSS_KEYS = {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"}
TRAIN_KEYS = LOSS_KEYS | {
    "explained_variance",
    "steps_per_second",
    "env_steps",
    "step_size_sum",
    "reward",
    "latency_ms",
    "slo_violation_rate",
    "cost_usd",
    "carbon_g",
    "energy_kwh",
}


def tiny_cfg(**ppo: float) -> ExperimentConfig:
    """A small estate and a small learner: fast enough for unit tests."""
    settings = {"num_envs": 6, "rollout_steps": 16, "num_minibatches": 2, "update_epochs": 2}
    settings.update(ppo)
    return ExperimentConfig(
        world=WorldConfig(regions=2, nodes_per_region=3), ppo=PPOConfig(**settings)
    )


def _network(learner: PPOLearner) -> list[np.ndarray]:
    return learner.get_weights()[: len(learner.params)]


def test_weights_round_trip_and_layout() -> None:
    learner = PPOLearner(learner_plan(tiny_cfg(), [0, 1]), seed=1)
    learner.train_round(16)
    weights = learner.get_weights()
    stats = weights[len(learner.params) :]
    assert all(w.dtype == np.float32 for w in _network(learner))
    assert len(stats) == MOMENT_ARRAYS * len(STATISTICS)
    assert all(w.dtype == np.float64 for w in stats)
    observation, returns = stats[:MOMENT_ARRAYS], stats[MOMENT_ARRAYS:]
    per_feature = (NODE_WIDTH + GLOBAL_WIDTH,)  # pooled over nodes: any estate, one size
    assert observation[0].shape == (1,) and observation[1].shape == per_feature
    assert returns[1].shape == (1,)
    other = PPOLearner(learner_plan(tiny_cfg(), [0, 1]), seed=2)
    other.set_weights(weights)
    for a, b in zip(other.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_set_weights_names_the_bad_index() -> None:
    learner = PPOLearner(learner_plan(tiny_cfg(), [0]), seed=0)
    weights = learner.get_weights()
    with pytest.raises(ValueError, match="expected"):
        learner.set_weights(weights[:-1])
    weights[3] = np.zeros((7, 7), dtype=np.float32)
    with pytest.raises(ValueError, match="weight 3"):
        learner.set_weights(weights)


def test_train_round_reports_fixed_metrics() -> None:
    learner = PPOLearner(learner_plan(tiny_cfg(), [0, 1]), seed=0)
    metrics = learner.train_round(40)  # 16 + 16 + a shorter last rollout of 8
    assert set(metrics) == TRAIN_KEYS
    assert metrics["env_steps"] == 40 * 6
    assert all(np.isfinite(v) for v in metrics.values())
    assert metrics["reward"] < 0 and metrics["latency_ms"] > 0


def test_same_seed_same_weights_and_other_seed_differs() -> None:
    runs = []
    for seed in (3, 3, 4):
        learner = PPOLearner(learner_plan(tiny_cfg(), [0, 1]), seed=seed)
        metrics = learner.train_round(32)
        metrics.pop("steps_per_second")
        runs.append((learner.get_weights(), metrics))
    for a, b in zip(runs[0][0], runs[1][0], strict=True):
        np.testing.assert_array_equal(a, b)
    assert runs[0][1] == runs[1][1]
    assert not np.array_equal(runs[0][0][0], runs[2][0][0])


def test_save_load_resumes_bit_for_bit(tmp_path) -> None:
    first = PPOLearner(learner_plan(tiny_cfg(), [0, 1]), seed=5)
    first.train_round(32)
    first.save(tmp_path / "learner.npz")
    expected = first.train_round(32)
    resumed = PPOLearner(
        learner_plan(tiny_cfg(), [0, 1]), seed=99
    )  # everything comes from the file
    resumed.load(tmp_path / "learner.npz")
    got = resumed.train_round(32)
    for a, b in zip(first.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    for key in TRAIN_KEYS - {"steps_per_second"}:
        assert got[key] == expected[key], key
    np.testing.assert_array_equal(
        first.state()["adam.0.exp_avg"], resumed.state()["adam.0.exp_avg"]
    )


@pytest.mark.parametrize("kind", ["two-tier", "mlp"])
def test_rollout_uniforms_drawn_a_step_or_a_rollout_at_a_time_train_alike(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However many steps' uniforms a rollout draws at once (`NOISE_BYTES`), the learner
    acts and trains on the same numbers."""
    cfg = tiny_cfg()
    cfg = replace(cfg, ppo=replace(cfg.ppo, policy=kind))
    states = []
    for budget in (ppo_module.NOISE_BYTES, 1, 3 * 4 * cfg.ppo.num_envs * 7):
        monkeypatch.setattr(ppo_module, "NOISE_BYTES", budget)
        learner = PPOLearner(learner_plan(cfg, [0, 1]), seed=3)
        learner.train_round(2 * cfg.ppo.rollout_steps)
        states.append(learner.state())
    for other in states[1:]:
        for key, value in states[0].items():
            np.testing.assert_array_equal(other[key], value, err_msg=key)


def test_a_saved_states_weights_are_the_learners(tmp_path) -> None:
    learner = PPOLearner(learner_plan(tiny_cfg(), [0, 1]), seed=5)
    learner.train_round(32)
    learner.save(tmp_path / "learner.npz")
    with np.load(tmp_path / "learner.npz") as state:
        weights = weights_of_state(state)
    for a, b in zip(learner.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


def test_load_state_rejects_a_mismatched_learner() -> None:
    state = PPOLearner(learner_plan(tiny_cfg(), [0]), seed=0).state()
    bigger = PPOLearner(learner_plan(tiny_cfg(hidden_size=32), [0]), seed=0)
    with pytest.raises(ValueError, match=r"param\.0"):
        bigger.load_state(state)


def test_proximal_term_changes_the_gradient_toward_the_anchor() -> None:
    torch.manual_seed(0)
    w = torch.randn(5, requires_grad=True)
    anchor = [torch.zeros(5)]
    assert float(proximal_term([w], anchor, 0.0).detach()) == 0.0
    term = proximal_term([w], anchor, 0.4)
    assert float(term.detach()) == pytest.approx(0.2 * float((w.detach() ** 2).sum()))
    term.backward()
    torch.testing.assert_close(w.grad, 0.4 * w.detach())  # d/dw mu/2 ||w - a||^2 = mu (w - a)
    # A gradient step on the term shrinks the distance to the anchor.
    after = w.detach() - 0.5 * w.grad
    assert float(after.norm()) < float(w.detach().norm())


def test_proximal_mu_keeps_a_round_closer_to_the_global_weights() -> None:
    distances = []
    for mu in (0.0, 50.0):
        learner = PPOLearner(learner_plan(tiny_cfg(learning_rate=3e-3), [0, 1]), seed=7)
        start = _network(learner)
        metrics = learner.train_round(48, proximal_mu=mu)
        end = _network(learner)
        distances.append(sum(float(((e - s) ** 2).sum()) for e, s in zip(end, start, strict=True)))
        assert np.isfinite(metrics["policy_loss"])
    assert distances[1] < 0.5 * distances[0]


def test_gae_bootstraps_through_truncations() -> None:
    rewards = np.ones((2, 2), dtype=np.float32)
    values = np.zeros((2, 2), dtype=np.float32)
    next_values = np.array([[0.0, 4.0], [10.0, 10.0]], dtype=np.float32)
    cut = np.array([[False, True], [False, False]])
    adv = gae(rewards, values, next_values, cut, gamma=0.5, lam=1.0)
    # Env 0 runs on: A_1 = 1 + 0.5 * 10, A_0 = 1 + 0.5 * A_1. Env 1 restarted after step 0:
    # A_0 bootstraps from the pre-restart state's value 4 and ignores the next episode.
    np.testing.assert_array_equal(adv, np.array([[4.0, 3.0], [6.0, 6.0]], dtype=np.float32))


def _torch_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    cut: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """GAE as a loop of torch ops over the steps: what the learner computed before."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    keep = 1.0 - cut.to(rewards.dtype)
    for t in range(rewards.shape[0] - 1, -1, -1):
        delta = rewards[t] + gamma * next_values[t] - values[t]
        running = delta + gamma * lam * keep[t] * running
        advantages[t] = running
    return advantages


@pytest.mark.parametrize(("gamma", "lam"), [(0.95, 0.95), (0.99, 0.95), (0.9, 0.8)])
def test_compiled_gae_gives_the_torch_loops_numbers_bit_for_bit(gamma: float, lam: float) -> None:
    rng = np.random.default_rng(int(gamma * 100))
    shape = (130, 33)
    rewards, values, next_values = (
        (rng.normal(size=shape) * 10.0 ** rng.integers(-3, 3)).astype(np.float32) for _ in range(3)
    )
    cut = rng.random(shape) < 0.05
    ours = gae(rewards, values, next_values, cut, gamma, lam)
    arrays = (rewards, values, next_values, cut)
    reference = _torch_gae(*(torch.from_numpy(a) for a in arrays), gamma, lam).numpy()
    np.testing.assert_array_equal(ours.view(np.int32), reference.view(np.int32))


def test_greedy_policy_never_picks_a_masked_action() -> None:
    learner = PPOLearner(learner_plan(tiny_cfg(), [0, 1]), seed=0)
    sim = MultiCloudSim(learner.cfg.world, learner.cfg.reward, [0, 1, 0, 1])
    obs, mask = sim.reset(np.arange(4))
    mask = mask.copy()
    mask[:, :-1] = False  # only the last node is allowed
    actions = learner.policy("ppo-test").act(obs, mask)
    assert actions.dtype == np.int64
    np.testing.assert_array_equal(actions, np.full(4, sim.num_actions - 1))


@pytest.mark.slow
def test_ppo_learns_to_keep_jobs_in_their_own_region() -> None:
    """Two identical single-node regions 100 ms apart at light load: the ingress region's
    own node is the best action in about 95% of the myopic oracle's choices."""
    world = WorldConfig(
        regions=2,
        nodes_per_region=1,
        load=0.05,
        background_load=0.0,
        heterogeneous=False,
        time_varying=False,
        outage_rate=0.0,
    )
    cfg = ExperimentConfig(
        world=world, ppo=PPOConfig(num_envs=8, rollout_steps=32, learning_rate=1e-3)
    )
    learner = PPOLearner(learner_plan(cfg, [0, 1]), seed=0)
    for _ in range(8):
        learner.train_round(128)
    sim = MultiCloudSim(world, cfg.reward, [0, 1] * 4)
    obs, mask = sim.reset(np.arange(100, 108))
    policy = learner.policy()
    local = []
    for _ in range(200):
        actions = policy.act(obs, mask)
        local.append(actions == sim.state.ingress)
        result = sim.step(actions)
        obs, mask = result.obs, result.mask
    assert np.mean(local) > 0.9


def test_annealed_learning_rate_reaches_zero_at_the_planned_budget() -> None:
    cfg = tiny_cfg(anneal_lr=True)
    cfg.train.rounds, cfg.train.steps_per_round = 1, 32
    learner = PPOLearner(learner_plan(cfg, [0, 1]), seed=0)
    before = _network(learner)
    learner.train_round(32)
    planned = _network(learner)
    assert not np.array_equal(before[0], planned[0])
    learner.train_round(16)  # past the plan: the rate is 0, the network stays put
    for a, b in zip(planned, _network(learner), strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_update_carries_only_the_moments_seen_since_the_global_ones() -> None:
    """A region reports what it saw this round; the pooled moments stay the server's."""
    learner = PPOLearner(learner_plan(tiny_cfg(), [0]), seed=3)
    learner.train_round(16)
    pooled = learner.get_weights()
    learner.set_weights(pooled)
    learner.train_round(16)
    fresh = Moments.from_arrays(learner.get_update()[len(learner.params) :][:MOMENT_ARRAYS])
    total = Moments.from_arrays(learner.get_weights()[len(learner.params) :][:MOMENT_ARRAYS])
    before = Moments.from_arrays(pooled[len(learner.params) :][:MOMENT_ARRAYS])
    assert fresh.count == 16 * learner.sim.num_envs * learner.sim.num_actions  # node rows
    assert total.count == before.count + fresh.count
    np.testing.assert_allclose(before.merge(fresh).var, total.var, rtol=1e-9)


def test_flags_one_hot_and_clock_are_not_standardised() -> None:
    """A feature constant inside a region (a local flag) must reach the network as is."""
    learner = PPOLearner(learner_plan(tiny_cfg(), [1]), seed=0)
    learner.train_round(16)
    layout = learner.sim.layout
    x = learner.norm(learner.obs)
    for raw in (layout.node("up"), layout.node("local"), layout.globals_span):
        np.testing.assert_array_equal(x[:, raw], learner.obs[:, raw])
    queue = layout.node("queue")
    assert not np.allclose(x[:, queue], learner.obs[:, queue])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_learner_keeps_its_freed_memory_for_the_next_minibatch() -> None:
    """glibc takes the fixed thresholds (`heap.py`), once per process."""
    PPOLearner(learner_plan(tiny_cfg(), [0]), seed=0)
    assert heap.keep_freed_memory() is True
    assert heap.keep_freed_memory.cache_info().misses == 1
