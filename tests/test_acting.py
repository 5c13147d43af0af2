"""The compiled acting path acts as the torch network it was built from, masks included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from numba import njit
from test_networks import random_batch, small_cfg

from fedmc_flwr.config import learner_plan
from fedmc_flwr.policies import two_tier_kernels
from fedmc_flwr.policies.acting import TorchActor, TwoTierActor, actor_of, uniforms
from fedmc_flwr.policies.moments import Moments
from fedmc_flwr.policies.networks import TwoTier
from fedmc_flwr.policies.normalisers import ObservationNorm, standardise
from fedmc_flwr.policies.ppo import TRAIN_METRICS, PPOLearner
from fedmc_flwr.sim.layout import GLOBAL_WIDTH, NODE_WIDTH

CASES = ((3, 6, 32, 2, 0), (2, 3, 16, 1, 0), (5, 4, 8, 3, 0), (1, 7, 32, 2, 0), (3, 6, 32, 2, 4))
"""regions, nodes per region, width, scorer depth, privileged critic inputs"""


def _raw_batch(regions: int, nodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw observations on the world's scales (some far out, so the normaliser clips) and
    masks with whole regions masked in some rows."""
    if regions > 1:
        obs, mask = random_batch(regions, nodes, batch=64, seed=seed)
    else:  # one region: no region can be masked whole
        obs, mask = random_batch(2, nodes, batch=64, seed=seed)
        obs = torch.cat([obs[:, : nodes * NODE_WIDTH], obs[:, -GLOBAL_WIDTH:]], dim=1)
        mask = mask[:, :nodes]
    raw = obs.numpy() * 3.0 + 1.0
    raw[::5, 0] = 1e4  # far past the clip of +-10 standard deviations
    return raw.astype(np.float32), mask.numpy()


def _affine(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norm = ObservationNorm()
    norm.update(raw[:32])
    return norm.feature_affine()


def _network(
    regions: int, nodes: int, width: int, depth: int, seed: int, privileged: int = 0
) -> TwoTier:
    torch.manual_seed(seed)
    network = TwoTier(width, nodes, depth, privileged)
    with torch.no_grad():  # biases away from their zero start, so every term is tested
        for p in network.parameters():
            p.add_(0.1 * torch.randn(p.shape))
    return network


@pytest.mark.parametrize(("regions", "nodes", "width", "depth", "privileged"), CASES)
def test_compiled_decision_equals_the_torch_networks(
    regions: int, nodes: int, width: int, depth: int, privileged: int
) -> None:
    network = _network(regions, nodes, width, depth, seed=regions, privileged=privileged)
    raw, mask = _raw_batch(regions, nodes, seed=depth)
    affine = _affine(raw)
    hidden = np.random.default_rng(0).normal(size=(len(raw), privileged)).astype(np.float32)
    hidden = hidden if privileged else None
    compiled, reference = TwoTierActor(network), TorchActor(network)
    assert compiled.noise_width(regions * nodes) == reference.noise_width(regions * nodes)
    noise = uniforms((len(raw), compiled.noise_width(regions * nodes)), torch.Generator())
    fast = compiled.decide(raw, mask, affine, noise, hidden)
    ref = reference.decide(raw, mask, affine, noise, hidden)
    np.testing.assert_array_equal(fast.action, ref.action)
    assert mask[np.arange(len(raw)), fast.action].all()
    np.testing.assert_allclose(fast.logprob, ref.logprob, rtol=0, atol=2e-5)
    np.testing.assert_allclose(fast.value, ref.value, rtol=1e-5, atol=2e-5)
    assert fast.inputs.keys() == ref.inputs.keys()
    for key, value in ref.inputs.items():
        assert fast.inputs[key].dtype == value.dtype, key
        np.testing.assert_allclose(fast.inputs[key], value, rtol=0, atol=1e-6, err_msg=key)
    np.testing.assert_array_equal(
        compiled.greedy(raw, mask, affine), reference.greedy(raw, mask, affine)
    )
    np.testing.assert_allclose(
        compiled.value(raw, mask, affine, hidden),
        reference.value(raw, mask, affine, hidden),
        rtol=1e-5,
        atol=2e-5,
    )


def test_compiled_samples_follow_the_networks_distribution_and_never_a_masked_action() -> None:
    network = _network(3, 4, 16, 2, seed=7)
    raw, mask = _raw_batch(3, 4, seed=3)
    affine = _affine(raw)
    row = 3  # a row whose region 1 is wholly masked (every third row)
    assert not mask[row, 4:8].any()
    draws = 40_000
    obs, masks = np.repeat(raw[row : row + 1], draws, 0), np.repeat(mask[row : row + 1], draws, 0)
    actor = TwoTierActor(network)
    noise = uniforms((draws, actor.noise_width(12)), torch.Generator().manual_seed(5))
    actions = actor.decide(obs, masks, affine, noise).action
    assert mask[row, actions].all()
    with torch.no_grad():
        x = torch.from_numpy(standardise(raw[row : row + 1], affine))
        joint = network.masked_logits(x, torch.from_numpy(mask[row : row + 1]))[0].exp().numpy()
    freq = np.bincount(actions, minlength=12) / draws
    np.testing.assert_allclose(freq, joint, atol=0.01, rtol=0)


@pytest.mark.parametrize("privileged_critic", [False, True])
def test_a_learners_rollout_stores_what_its_update_reads_back(privileged_critic: bool) -> None:
    """The update re-scores the stored inputs with torch: its log-probabilities and values
    at the weights the rollout acted with are the rollout's own (PPO's first ratio is 1)."""
    cfg = small_cfg("two-tier", 3, 4)
    cfg = replace(cfg, ppo=replace(cfg.ppo, privileged_critic=privileged_critic))
    learner = PPOLearner(learner_plan(cfg, [0, 1, 2]), seed=0)
    learner.train_round(16)  # one update, so the weights are not the initial ones
    learner.norm.update(learner.obs)
    rollout = learner._collect(16, np.zeros(len(TRAIN_METRICS)))
    with torch.no_grad():
        logp, _, values = learner.model.evaluate(rollout, rollout["actions"])
    torch.testing.assert_close(logp, rollout["logprobs"], rtol=0, atol=2e-5)
    torch.testing.assert_close(values, rollout["values"], rtol=1e-5, atol=2e-5)
    assert ("privileged" in rollout) == privileged_critic


def test_the_learner_and_its_greedy_policy_act_through_the_compiled_path() -> None:
    learner = PPOLearner(learner_plan(small_cfg("two-tier", 2, 3), [0]), seed=0)
    assert isinstance(actor_of(learner.model), TwoTierActor)
    assert isinstance(learner.policy()._actor, TwoTierActor)
    assert isinstance(learner.policy().on_estate(5)._actor, TwoTierActor)
    flat = PPOLearner(learner_plan(small_cfg("node-scorer", 2, 3), [0]), seed=0)
    assert isinstance(actor_of(flat.model), TorchActor)


def test_observation_moments_count_each_nodes_row_with_the_globals_beside_it() -> None:
    """Per feature over every node's row, the global features repeated beside each."""
    raw, _ = _raw_batch(3, 4, seed=9)
    norm = ObservationNorm()
    norm.update(raw)
    nodes = raw[:, : 12 * NODE_WIDTH].reshape(-1, NODE_WIDTH)
    shared = np.repeat(raw[:, 12 * NODE_WIDTH :], 12, axis=0)
    assert shared.shape[1] == GLOBAL_WIDTH
    expected = Moments.of(np.concatenate([nodes, shared], axis=1).astype(np.float64))
    assert norm.total.count == expected.count == norm.fresh.count
    np.testing.assert_allclose(norm.total.mean, expected.mean, rtol=1e-12)
    np.testing.assert_allclose(norm.total.var, expected.var, rtol=1e-10)


def test_a_rollouts_uniforms_are_its_steps_draws_in_turn() -> None:
    """The learner draws a rollout's uniforms at once: the numbers a draw a step would
    give, and the generator left where those draws would leave it."""
    steps, each = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    rollout = uniforms((37, 64, 9), steps)
    per_step = np.stack([uniforms((64, 9), each) for _ in range(37)])
    np.testing.assert_array_equal(rollout, per_step)
    assert torch.equal(steps.get_state(), each.get_state())


CACHE_PROBE = """
import json
import numpy as np
import torch
from numba.core.registry import CPUDispatcher
from fedmc_flwr.policies import advantages, moments, normalisers, privileged, two_tier_kernels
from fedmc_flwr.policies.acting import TwoTierActor, uniforms
from fedmc_flwr.policies.networks import TwoTier
from fedmc_flwr.policies.normalisers import ObservationNorm

actor = TwoTierActor(TwoTier(32, 6))
obs = np.random.default_rng(0).normal(size=(64, 18 * 11 + 2)).astype(np.float32)
mask = np.ones((64, 18), dtype=bool)
norm = ObservationNorm()
norm.update(obs)
affine = norm.feature_affine()
actor.decide(obs, mask, affine, uniforms((64, actor.noise_width(18)), torch.Generator()))
actor.greedy(obs, mask, affine)
actor.value(obs, mask, affine)
rollout, values = np.zeros((128, 64), dtype=np.float32), np.zeros((129, 64), dtype=np.float32)
advantages.gae(rollout, values[:128], rollout, np.zeros((128, 64), dtype=bool), 0.95, 0.95)
costs, hidden = np.ones((64, 18)), np.empty((64, privileged.WIDTH), dtype=np.float32)
privileged.hidden_state(np.ones(64), costs, mask, costs.copy(), 2.0, hidden)
dispatchers = [
    d for module in (two_tier_kernels, moments, normalisers, advantages, privileged)
    for d in vars(module).values() if isinstance(d, CPUDispatcher)
]
print(json.dumps({"misses": sum(sum(d.stats.cache_misses.values()) for d in dispatchers)}))
"""


@pytest.mark.slow
def test_warm_cache_leaves_a_learner_nothing_to_compile(tmp_path: Path) -> None:
    """What `fedmc run` compiles before the clients start is every kernel they act with."""
    env = {**os.environ, "FEDMC_CACHE_DIR": str(tmp_path)}
    warm = "from fedmc_flwr.policies.two_tier_kernels import warm_cache; warm_cache()"
    subprocess.run([sys.executable, "-c", warm], env=env, check=True)
    probe = subprocess.run(
        [sys.executable, "-c", CACHE_PROBE], env=env, check=True, capture_output=True, text=True
    )
    assert json.loads(probe.stdout.splitlines()[-1]) == {"misses": 0}


@njit(fastmath=two_tier_kernels._LAYER_MATHS)
def _one_input_at_a_time(inp, params, start, fan_in, fan_out, bias, relu, out):
    """A layer as the plain loop: bias, then each input's product added in turn."""
    for j in range(fan_out):
        out[j, :] = params[bias + j]
        for k in range(fan_in):
            for i in range(out.shape[1]):
                out[j, i] += params[start + k * fan_out + j] * inp[k, i]
        if relu:
            for i in range(out.shape[1]):
                out[j, i] = max(out[j, i], np.float32(0.0))


@pytest.mark.parametrize("fan_in", [1, 3, 4, 7, 8, 13, 15, 19, 32, 45])
def test_a_layer_taking_inputs_in_blocks_gives_the_plain_loops_numbers(fan_in: int) -> None:
    """`_layer` takes its inputs eight and four at a time: each number must still be the
    one chain of multiply-adds, in order, that one input at a time gives (wide-ranging
    values, so that any other grouping of the sum would round differently)."""
    rng = np.random.default_rng(fan_in)
    fan_out, columns = 5, 67
    params = (rng.standard_normal(fan_in * fan_out + fan_out) * 10.0 ** rng.integers(-3, 4)).astype(
        np.float32
    )
    inp = (
        rng.standard_normal((fan_in, columns)) * 10.0 ** rng.integers(-3, 4, (fan_in, 1))
    ).astype(np.float32)
    for relu in (False, True):
        blocked, plain = np.empty((2, fan_out, columns), dtype=np.float32)
        args = (inp, params, 0, fan_in, fan_out, fan_in * fan_out, relu)
        two_tier_kernels._layer(*args, blocked)
        _one_input_at_a_time(*args, plain)
        assert np.array_equal(blocked, plain)
