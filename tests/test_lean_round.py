"""A region's round does only the work its numbers need: the cuts that made a 100 x 100
round cheaper keep every number as it was (the dispatch costs, the privileged critic's
inputs, a loaded learner's worlds), and the work they skip stays skipped."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_ppo import tiny_cfg

from fedmc_flwr.config import ExperimentConfig, WorldConfig, learner_plan, to_yaml
from fedmc_flwr.federation import client_app
from fedmc_flwr.federation.client_app import experiment_from
from fedmc_flwr.policies import privileged
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.seeds import training_seed
from fedmc_flwr.sim import state_file
from fedmc_flwr.sim.world import MultiCloudSim


def _busy_world(small_demo: ExperimentConfig) -> MultiCloudSim:
    """Outages and tiny queues: many masked nodes, fallbacks and refusals."""
    world = replace(
        small_demo.world, outage_rate=0.3, outage_mean_s=2.0, queue_capacity=3, queue_threshold=2
    )
    sim = MultiCloudSim(world, small_demo.reward, np.arange(12) % world.regions)
    sim.reset(np.arange(12))
    return sim


def _valid_actions(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return (mask * rng.random(mask.shape)).argmax(axis=1)


def test_dispatch_costs_are_minus_the_reward_of_each_dispatch_bit_for_bit(
    small_demo: ExperimentConfig,
) -> None:
    """The cost kernel works out each region's terms once for all its nodes; the step
    prices one node at a time. Both must give the same number to the last bit."""
    sim = _busy_world(small_demo)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(200):
        actions = _valid_actions(sim.mask, rng)
        costs = sim.dispatch_costs()
        state = sim.get_state()
        result = sim.step(actions)
        served = ~result.invalid & ~result.refused
        rows = np.flatnonzero(served)
        np.testing.assert_array_equal(result.reward[rows], -costs[rows, actions[rows]])
        checked += len(rows)
        assert np.isinf(costs[~state["mask"]]).all()
    assert checked > 1000


def test_privileged_inputs_equal_the_masked_reductions_bit_for_bit(
    small_demo: ExperimentConfig,
) -> None:
    """Worked out in place on one cost array, they are the least and the mean capped cost
    over the valid nodes exactly as the selecting form computes them."""
    sim = _busy_world(small_demo)
    rng = np.random.default_rng(1)
    masked = 0
    for _ in range(200):
        valid = sim.mask
        costs = np.minimum(sim.dispatch_costs(), privileged.COST_CAP)
        hidden = privileged.privileged_inputs(sim)
        least = np.where(valid, costs, np.inf).min(axis=1).astype(np.float32)
        mean = (np.where(valid, costs, 0.0).sum(axis=1) / valid.sum(axis=1)).astype(np.float32)
        np.testing.assert_array_equal(hidden[:, 1], least)
        np.testing.assert_array_equal(hidden[:, 2], mean)
        masked += int((~valid).sum())
        sim.step(_valid_actions(valid, rng))
    assert masked > 0


def _numpy_privileged_inputs(sim: MultiCloudSim) -> np.ndarray:
    """`privileged.privileged_inputs` as numpy calls: what the compiled form replaced."""
    state, mean_job = sim.state, sim.spec.mean_service_s
    costs, valid = sim.dispatch_costs(), state.mask
    out = np.empty((sim.num_envs, privileged.WIDTH), dtype=np.float32)
    out[:, 0] = state.size / mean_job
    out[:, 1] = np.minimum(costs.min(axis=1), privileged.COST_CAP)
    np.minimum(costs, privileged.COST_CAP, out=costs)
    costs *= valid
    out[:, 2] = costs.sum(axis=1) / valid.sum(axis=1)
    out[:, 3] = state.backlog.mean(axis=1) / (10.0 * mean_job)
    return out


def test_compiled_privileged_inputs_are_numpys_numbers_bit_for_bit(
    small_demo: ExperimentConfig,
) -> None:
    sim = _busy_world(small_demo)
    rng = np.random.default_rng(2)
    for _ in range(100):
        np.testing.assert_array_equal(
            privileged.privileged_inputs(sim).view(np.int32),
            _numpy_privileged_inputs(sim).view(np.int32),
        )
        sim.step(_valid_actions(sim.mask, rng))


@pytest.mark.parametrize("length", [*range(1, 40), 127, 128, 129, 300, 1000, 10_001])
def test_compiled_sum_is_numpys_pairwise_sum(length: int) -> None:
    rows = np.random.default_rng(length).normal(size=(3, length))
    rows *= 10.0 ** np.random.default_rng(length + 1).integers(-6, 6, size=rows.shape)
    for row in rows:
        assert privileged._sum(row).hex() == row.sum().hex()


def test_adopting_a_state_takes_its_arrays_and_copying_leaves_them_alone() -> None:
    sim = MultiCloudSim(WorldConfig(), ExperimentConfig().reward, [0, 1])
    sim.reset([3, 4])
    saved = sim.get_state()
    sim.set_state(saved)
    assert not np.shares_memory(sim.state.backlog, saved["backlog"])
    sim.set_state(saved, adopt=True)
    assert np.shares_memory(sim.state.backlog, saved["backlog"])
    frozen = {name: value.copy() for name, value in saved.items()}
    frozen["ring"].flags.writeable = False  # the kernels write it: a copy is taken
    sim.set_state(frozen, adopt=True)
    assert not np.shares_memory(sim.state.ring, frozen["ring"])
    assert sim.state.ring.flags.writeable


@pytest.fixture
def resets(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many envs each `MultiCloudSim.reset_envs` call restarted, in order."""
    calls: list[int] = []
    original = MultiCloudSim.reset_envs

    def counted(self: MultiCloudSim, envs: np.ndarray, *args: object, **kwargs: object) -> object:
        calls.append(len(envs))
        return original(self, envs, *args, **kwargs)

    monkeypatch.setattr(MultiCloudSim, "reset_envs", counted)
    return calls


def test_a_learner_starts_its_worlds_only_when_it_needs_them(
    tmp_path: Path, resets: list[int]
) -> None:
    cfg = tiny_cfg(privileged_critic=True)
    trained = PPOLearner(learner_plan(cfg, [0, 1]), seed=2)
    assert resets == []  # built, not started
    trained.train_round(16)
    assert resets == [cfg.ppo.num_envs]
    trained.save(tmp_path / "state.npz")
    resets.clear()
    resumed = PPOLearner(learner_plan(cfg, [0, 1]), seed=2)
    resumed.load(tmp_path / "state.npz")
    judged = PPOLearner(learner_plan(cfg, [0, 1]), seed=2)
    judged.set_weights(trained.get_weights())
    judged.policy()
    assert resets == []  # the loaded state replaces the start; judging needs no worlds
    ours_saved, theirs_saved = resumed.state(), trained.state()
    for name, value in theirs_saved.items():  # the rings' free slots are not saved
        if name != "sim.ring":
            np.testing.assert_array_equal(ours_saved[name], value, err_msg=name)
    live = [state_file.compact(s.sim.get_state())[state_file.LIVE] for s in (resumed, trained)]
    np.testing.assert_array_equal(*live)
    np.testing.assert_array_equal(resumed.obs, trained.obs)
    ours, theirs = resumed.train_round(16), trained.train_round(16)
    del ours["steps_per_second"], theirs["steps_per_second"]  # the clock's, not the learner's
    assert ours == theirs


def test_a_late_start_gives_the_worlds_an_early_one_would() -> None:
    cfg = tiny_cfg()
    learner = PPOLearner(learner_plan(cfg, [0, 1]), seed=3)
    seeds = [training_seed(learner.seed, k, 0) for k in range(cfg.ppo.num_envs)]
    sim = MultiCloudSim(cfg.world, cfg.reward, np.arange(cfg.ppo.num_envs) % 2)
    obs, mask = sim.reset(np.array(seeds, dtype=np.uint64))
    np.testing.assert_array_equal(learner.obs, obs)
    np.testing.assert_array_equal(learner.mask, mask)


def test_worlds_resumed_from_their_live_queues_step_as_the_whole_rings_do(
    small_demo: ExperimentConfig,
) -> None:
    """Tiny queues that wrap their rings, fill and refuse: a world set from the expanded
    compact state steps exactly as the world it was taken from, and the file keeps one
    value per queued job."""
    sim = _busy_world(small_demo)
    rng = np.random.default_rng(2)
    for _ in range(150):
        sim.step(_valid_actions(sim.mask, rng))
    saved = sim.get_state()
    compact = state_file.compact(saved)
    assert "ring" not in compact and compact[state_file.LIVE].size == saved["count"].sum() > 0
    twin = _busy_world(small_demo)
    twin.set_state(state_file.expand(compact))
    wrapped = 0
    for _ in range(150):
        actions = _valid_actions(sim.mask, rng)
        wrapped += int((sim.state.head + sim.state.count > sim.state.ring.shape[2]).sum())
        ours, theirs = twin.step(actions), sim.step(actions)
        for name, value in theirs._asdict().items():
            np.testing.assert_array_equal(getattr(ours, name), value, err_msg=name)
    assert wrapped > 0  # some queue ran past its ring's end and wrapped round


def test_a_state_saved_whole_loads_and_a_mismatched_one_is_refused() -> None:
    sim = MultiCloudSim(WorldConfig(), ExperimentConfig().reward, [0, 1])
    sim.reset([3, 4])
    whole = sim.get_state()
    assert state_file.expand(whole).keys() == whole.keys()
    compact = state_file.compact(whole)
    compact["count"] = compact["count"] + 1
    with pytest.raises(ValueError, match="saved queues do not match"):
        state_file.expand(compact)


def test_each_message_gets_its_own_copy_of_the_config_parsed_once(
    small_demo: ExperimentConfig,
) -> None:
    message = {"experiment": to_yaml(small_demo)}
    client_app._parsed.cache_clear()
    first, second = experiment_from(message), experiment_from(message)
    assert first == second == small_demo and first is not second
    first.world.regions += 1  # one message's learner may change its copy
    assert experiment_from(message).world.regions == small_demo.world.regions
    assert client_app._parsed.cache_info().misses == 1
