"""Declared job sizes (`world.declared_size`): what the observation learns, and what not."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fedmc_flwr.config import ConfigError, ExperimentConfig, load_config
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.sim.world import MultiCloudSim

ENVS = 12
STEPS = 300


def _world(cfg: ExperimentConfig, error: float | None) -> MultiCloudSim:
    """small_demo's world without declarations (None) or with them at this error."""
    world = cfg.world
    if error is not None:
        world = replace(world, declared_size=True, declared_size_error=error)
    sim = MultiCloudSim(world, cfg.reward, np.arange(ENVS) % world.regions)
    sim.reset(np.arange(ENVS) + 5)
    return sim


def _run(sim: MultiCloudSim, actions: np.ndarray) -> tuple[np.ndarray, ...]:
    """Step through a fixed action sequence; every step's observation, reward and the
    declared and true size of the job each observation shows."""
    obs, rewards, declared, sizes = (
        [sim.obs.copy()],
        [],
        [sim.state.declared.copy()],
        [sim.state.size.copy()],
    )
    for a in actions:
        step = sim.step(np.where(sim.mask[np.arange(ENVS), a], a, sim.mask.argmax(axis=1)))
        obs.append(step.obs)
        rewards.append(step.reward)
        declared.append(sim.state.declared.copy())
        sizes.append(sim.state.size.copy())
    return tuple(np.array(x) for x in (obs, rewards, declared, sizes))


@pytest.fixture
def actions(small_demo: ExperimentConfig) -> np.ndarray:
    nodes = small_demo.world.regions * small_demo.world.nodes_per_region
    return np.random.default_rng(0).integers(0, nodes, size=(STEPS, ENVS))


def test_declarations_change_the_expected_delay_only(small_demo, actions) -> None:
    """The same jobs, arrivals and rewards with or without declarations (noisy ones too);
    the observations differ in the expected delay column alone, and an exact declaration
    prices the job at its true size where the undeclared world prices a mean job."""
    plain_obs, plain_reward, _, sizes = _run(_world(small_demo, None), actions)
    sim = _world(small_demo, 0.0)
    exact_obs, exact_reward, declared, _ = _run(sim, actions)
    _, noisy_reward, noisy, noisy_sizes = _run(_world(small_demo, 0.5), actions)
    np.testing.assert_array_equal(exact_reward, plain_reward)
    np.testing.assert_array_equal(noisy_reward, plain_reward)
    np.testing.assert_array_equal(noisy_sizes, sizes)
    np.testing.assert_array_equal(declared, sizes)
    assert not np.array_equal(noisy, sizes)

    delay = sim.layout.node("expected_delay")
    others = np.ones(sim.obs_dim, dtype=bool)
    others[delay] = False
    np.testing.assert_array_equal(exact_obs[..., others], plain_obs[..., others])
    background = plain_obs[..., sim.layout.node("background")].astype(np.float64)
    extra = (sizes - sim.spec.mean_service_s)[..., None] / (sim.spec.speed * (1.0 - background))
    np.testing.assert_allclose(
        exact_obs[..., delay] - plain_obs[..., delay], extra, rtol=1e-4, atol=1e-6
    )


def test_log_delay_rewrites_the_expected_delay_alone(small_demo, actions) -> None:
    """`world.log_delay` writes log(1 + delay / mean service time) of the very delay the
    plain world shows; every other feature, the rewards and the mask stay the same."""
    plain = _world(small_demo, 0.0)
    plain_obs, plain_reward, _, _ = _run(plain, actions)
    logged = MultiCloudSim(
        replace(small_demo.world, declared_size=True, log_delay=True),
        small_demo.reward,
        np.arange(ENVS) % small_demo.world.regions,
    )
    logged.reset(np.arange(ENVS) + 5)
    log_obs, log_reward, _, _ = _run(logged, actions)
    np.testing.assert_array_equal(log_reward, plain_reward)
    delay = plain.layout.node("expected_delay")
    others = np.ones(plain.obs_dim, dtype=bool)
    others[delay] = False
    np.testing.assert_array_equal(log_obs[..., others], plain_obs[..., others])
    expected = np.log1p(plain_obs[..., delay].astype(np.float64) / plain.spec.mean_service_s)
    np.testing.assert_allclose(log_obs[..., delay], expected, rtol=1e-6)


def test_declaration_errors_are_mean_one_log_normal(small_demo, actions) -> None:
    """log(declared / true) has the configured sigma and the mean -sigma^2 / 2 that keeps
    the declared sizes' mean at the true one (3600 jobs: each within ~4 standard errors)."""
    sigma = 0.5
    _, _, declared, sizes = _run(_world(small_demo, sigma), actions)
    log_ratio = np.log(declared / sizes).ravel()
    assert abs(log_ratio.std() - sigma) < 0.03
    assert abs(log_ratio.mean() + sigma**2 / 2) < 0.035


def test_myopic_expected_prices_the_declared_size(small_demo, actions) -> None:
    """With exact declarations and empty queues the rule's costs are the oracle's; with
    noisy ones they follow the declaration, not the true size."""
    sim = _world(small_demo, 0.0)
    _run(sim, actions[:50])
    sim.state.backlog[:] = 0.0
    sim.state.count[:] = 0
    np.testing.assert_allclose(sim.dispatch_costs(False, False), sim.dispatch_costs())
    noisy = _world(small_demo, 1.0)
    _run(noisy, actions[:50])
    costs = noisy.dispatch_costs(False, False)
    noisy.state.size[:] *= 3.0
    np.testing.assert_array_equal(noisy.dispatch_costs(False, False), costs)
    noisy.state.declared[:] *= 3.0
    assert not np.array_equal(noisy.dispatch_costs(False, False), costs)
    actions_now = DISPATCHERS["myopic-expected"](noisy, seed=1).act(noisy.obs, noisy.mask)
    chosen = noisy.dispatch_costs(False, False)[np.arange(ENVS), actions_now]
    np.testing.assert_array_equal(chosen, noisy.dispatch_costs(False, False).min(axis=1))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["world.declared_size_error=0.5"], "without declarations"),
        (["world.declared_size=true", "world.declared_size_error=-0.1"], "from 0 to 3"),
    ],
)
def test_bad_declaration_settings_are_refused(
    small_demo_path, overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(small_demo_path, overrides)
