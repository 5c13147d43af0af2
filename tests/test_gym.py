"""The Gymnasium adapters follow Gymnasium's API and show exactly MultiCloudSim's world."""

from __future__ import annotations

import copy
import doctest
import inspect
import warnings
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import fedmc_flwr.sim.gym as sim_gym
from fedmc_flwr.config import ExperimentConfig, WorldConfig
from fedmc_flwr.sim import ENV_ID
from fedmc_flwr.sim import world as sim_world
from fedmc_flwr.sim.gym import MultiCloudEnv, MultiCloudVectorEnv
from fedmc_flwr.sim.layout import feature_list
from fedmc_flwr.sim.world import MultiCloudSim


def test_check_env_passes_without_warnings() -> None:
    env = gym.make(ENV_ID)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)


def test_the_docstring_example_runs() -> None:
    failures, attempted = doctest.testmod(sim_gym)
    assert attempted > 0 and failures == 0


@pytest.mark.parametrize(
    ("where", "doc", "bounds"),
    [
        ("world.py's docstring", sim_world.__doc__, False),
        ("MultiCloudEnv's docstring", inspect.getdoc(MultiCloudEnv), True),
    ],
)
def test_the_docstrings_list_the_observation_as_the_layout_defines_it(
    where: str, doc: str, bounds: bool
) -> None:
    expected = feature_list(bounds=bounds)
    assert expected in doc, f"{where} should list the features as layout.py has them:\n{expected}"


def test_make_accepts_a_config_path_ingress_name_and_time_limit(small_demo_path: Path) -> None:
    env = gym.make(ENV_ID, config=small_demo_path, ingress="europe-west9", max_episode_steps=5)
    assert env.unwrapped.sim.state.ingress.tolist() == [1]
    _, info = env.reset(seed=1)
    ends = []
    for _ in range(5):
        action = int(np.flatnonzero(info["action_mask"])[0])
        _, reward, terminated, truncated, info = env.step(action)
        assert not terminated and np.isfinite(reward)
        ends.append(truncated)
    assert ends == [False] * 4 + [True]
    assert set(info) >= {"action_mask", "latency_ms", "carbon_g"}


def test_bad_arguments_are_clear_errors(small_demo: ExperimentConfig) -> None:
    with pytest.raises(ValueError, match="unknown ingress region 'mars'"):
        MultiCloudEnv(ingress="mars")
    with pytest.raises(ValueError, match="out of range"):
        MultiCloudEnv(small_demo, ingress=3)
    with pytest.raises(ValueError, match="either config or world"):
        MultiCloudEnv(small_demo, world=WorldConfig())
    with pytest.raises(ValueError, match="one ingress region per env"):
        MultiCloudVectorEnv(3, ingress=[0, 1])


def test_env_is_the_batch_of_one(small_demo: ExperimentConfig) -> None:
    env = MultiCloudEnv(small_demo, ingress=2)
    sim = MultiCloudSim(small_demo.world, small_demo.reward, [2])
    obs, info = env.reset(seed=42)
    expected_obs, expected_mask = sim.reset([42])
    np.testing.assert_array_equal(obs, expected_obs[0])
    np.testing.assert_array_equal(info["action_mask"], expected_mask[0])
    for action in np.arange(60) % sim.num_actions:
        obs, reward, _, _, info = env.step(action)
        result = sim.step(np.array([action]))
        np.testing.assert_array_equal(obs, result.obs[0])
        np.testing.assert_array_equal(info["action_mask"], result.mask[0])
        assert reward == result.reward[0]
        assert obs in env.observation_space


def test_make_vec_builds_the_batched_env(small_demo: ExperimentConfig) -> None:
    envs = gym.make_vec(ENV_ID, num_envs=4, config=small_demo, ingress=[0, 1, 2, 0])
    assert isinstance(envs, MultiCloudVectorEnv)
    assert envs.action_space.shape == (4,)
    assert envs.single_observation_space.shape == (envs.sim.obs_dim,)
    assert envs.max_episode_steps == 2000
    obs, info = envs.reset(seed=0)
    assert obs in envs.observation_space and info["action_mask"].shape == (4, 18)


def test_vector_env_k_matches_the_single_env_seeded_s_plus_k(small_demo: ExperimentConfig) -> None:
    regions = [0, 1, 2]
    envs = MultiCloudVectorEnv(3, small_demo, ingress=regions)
    singles = [MultiCloudEnv(small_demo, ingress=r) for r in regions]
    obs, info = envs.reset(seed=10)
    for k, env in enumerate(singles):
        np.testing.assert_array_equal(env.reset(seed=10 + k)[0], obs[k])
    for _ in range(50):
        queue = obs[:, envs.sim.layout.node("queue")]
        actions = np.where(info["action_mask"], queue, np.inf).argmin(axis=1)
        obs, reward, _, _, info = envs.step(actions)
        for k, env in enumerate(singles):
            single_obs, single_reward, *_ = env.step(actions[k])
            np.testing.assert_array_equal(single_obs, obs[k])
            assert single_reward == reward[k]


def test_vector_env_autoresets_on_the_step_after_truncation(
    small_demo: ExperimentConfig,
) -> None:
    envs = MultiCloudVectorEnv(2, small_demo, max_episode_steps=3)
    envs.reset(seed=0)
    actions = np.zeros(2, dtype=np.int64)
    flags = [envs.step(actions)[3].tolist() for _ in range(3)]
    assert flags == [[False, False], [False, False], [True, True]]
    generator = copy.deepcopy(envs.np_random)
    obs, reward, terminated, truncated, info = envs.step(actions)
    np.testing.assert_array_equal(reward, 0.0)
    assert not info["_latency_ms"].any() and not truncated.any() and not terminated.any()
    # fresh episodes: new world seeds from the env's generator, warmed up like any reset
    seeds = generator.integers(2**63, size=2, dtype=np.uint64)
    fresh, _ = MultiCloudSim(small_demo.world, small_demo.reward, [0, 0]).reset(seeds)
    np.testing.assert_array_equal(obs, fresh)
    assert obs[:, envs.sim.layout.node("queue")].sum() > 0
    flags = [envs.step(actions)[3].tolist() for _ in range(3)]
    assert flags == [[False, False], [False, False], [True, True]]


def test_an_invalid_action_is_flagged_and_never_cheaper(small_demo: ExperimentConfig) -> None:
    world = replace(small_demo.world, outage_rate=0.01)  # a few nodes down, none full
    env = MultiCloudEnv(world=world, reward=small_demo.reward)
    _, info = env.reset(seed=4)
    flagged = 0
    for _ in range(200):
        mask = info["action_mask"]
        worst = float(np.where(mask, env.sim.dispatch_costs()[0], -np.inf).max())
        action = int(np.flatnonzero(~mask)[0]) if not mask.all() else int(np.argmax(mask))
        _, reward, _, _, info_after = env.step(action)
        assert info_after["invalid_action"] == (not mask[action])
        assert not info_after["refused"]
        if not mask[action]:
            assert reward == pytest.approx(-worst, rel=1e-12)
            flagged += 1
        info = info_after
    assert flagged > 50


def test_reset_options_choose_the_start_phase(small_demo: ExperimentConfig) -> None:
    env = MultiCloudEnv(small_demo)
    vec = MultiCloudVectorEnv(2, small_demo)
    sim = MultiCloudSim(small_demo.world, small_demo.reward, [0, 0])
    expected, _ = sim.reset([5, 6], [0.25, 0.75])
    obs, _ = env.reset(seed=5, options={"phase": 0.25})
    np.testing.assert_array_equal(obs, expected[0])
    obs, _ = vec.reset(seed=5, options={"phases": [0.25, 0.75]})
    np.testing.assert_array_equal(obs, expected)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        env.reset(seed=5, options={"phase": 1.5})
