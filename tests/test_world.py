"""The world obeys queueing theory, its own masks, its carbon accounting and its seeds."""

from __future__ import annotations

from dataclasses import replace

import numba
import numpy as np
import pytest

from fedmc_flwr.config import ExperimentConfig, WorldConfig
from fedmc_flwr.policies.heuristics import RandomPolicy
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim

LATENCY, COST, CARBON, ENERGY = (
    METRIC_NAMES.index(name) for name in ("latency_ms", "cost_usd", "carbon_g", "energy_kwh")
)


def test_random_dispatch_on_identical_servers_is_mm1(
    identical_world: WorldConfig, small_demo: ExperimentConfig
) -> None:
    """Uniform random dispatch splits Poisson arrivals into N independent M/M/1 queues:
    mean waiting time rho / (mu - lambda), mean sojourn 1 / (mu - lambda)."""
    world = replace(identical_world, queue_capacity=4096)  # no full node ever masks a choice
    envs, warmup, steps, ingress = 64, 2000, 6000, 1
    sim = MultiCloudSim(world, small_demo.reward, np.full(envs, ingress))
    policy = RandomPolicy(sim, seed=3)
    obs, mask = sim.reset(np.arange(envs) + 500)
    per_region = sim.nodes_per_region
    waiting = sojourn = 0.0
    for k in range(warmup + steps):
        actions = policy.act(obs, mask)
        background = obs[np.arange(envs), sim.layout.background.start + actions // per_region]
        service_s = sim.size / (sim.spec.speed[actions] * (1.0 - background))
        result = sim.step(actions)
        if k >= warmup:
            latency_s = result.metrics[:, LATENCY] / 1000.0
            waiting += float((latency_s - service_s).sum())
            sojourn += float(latency_s.sum())
        obs, mask = result.obs, result.mask
    jobs = envs * steps
    mu = 1.0 / sim.spec.mean_service_s
    lam = sim.spec.arrival_rate[ingress] / sim.num_actions
    assert 0.5 < lam / mu < 0.9  # a load where waiting is substantial
    assert abs(waiting / jobs / (lam / mu / (mu - lam)) - 1.0) < 0.05
    assert abs(sojourn / jobs * (mu - lam) - 1.0) < 0.05


def test_a_greener_region_lowers_carbon_for_the_same_job(small_demo: ExperimentConfig) -> None:
    """Same state, same job, same instance type: only the target region's grid differs."""
    world = replace(small_demo.world, background_load=0.0)  # equal energy on equal nodes
    sim = MultiCloudSim(world, small_demo.reward, [0])
    obs, _ = sim.reset([11])
    state = sim.get_state()
    speed = sim.spec.speed.reshape(sim.num_regions, sim.nodes_per_region)
    targets = [
        int(np.flatnonzero(row == 1.0)[0]) + r * sim.nodes_per_region for r, row in enumerate(speed)
    ]
    outcomes = []
    for action in targets:
        sim.set_state(state)
        outcomes.append(sim.step(np.array([action])).metrics[0])
    outcomes = np.array(outcomes)
    intensity = obs[0, sim.layout.carbon]
    np.testing.assert_allclose(outcomes[:, ENERGY], outcomes[0, ENERGY])
    np.testing.assert_allclose(outcomes[:, CARBON] / outcomes[:, ENERGY], intensity, rtol=1e-6)
    assert list(np.argsort(outcomes[:, CARBON])) == list(np.argsort(intensity))
    assert outcomes[:, CARBON].min() < outcomes[:, CARBON].max() / 10


def test_masked_nodes_never_receive_a_job(small_demo: ExperimentConfig) -> None:
    """A job sent to a node in an outage is dropped (timeout, violation, no cost), never queued."""
    world = replace(small_demo.world, outage_rate=0.3, outage_mean_s=2.0)
    envs = 16
    sim = MultiCloudSim(world, small_demo.reward, np.arange(envs) % world.regions)
    obs, mask = sim.reset(np.arange(envs))
    rng = np.random.default_rng(0)
    dropped = 0
    for _ in range(400):
        up = obs[:, sim.layout.up] > 0
        assert not (mask & ~up).any(), "a node in an outage is offered"
        # env by env: a masked node if there is one, else a valid one
        prefer_masked = np.where(~mask, 2.0, 1.0) * rng.random(mask.shape)
        actions = prefer_masked.argmax(axis=1)
        masked = ~mask[np.arange(envs), actions]
        before = sim.backlog[np.arange(envs), actions].copy()
        result = sim.step(actions)
        after = sim.backlog[np.arange(envs), actions]
        assert (after[masked] <= before[masked]).all(), "a masked node received work"
        np.testing.assert_array_equal(result.metrics[masked, LATENCY], 2 * world.slo_ms)
        np.testing.assert_array_equal(result.metrics[masked, COST], 0.0)
        dropped += int(masked.sum())
        obs, mask = result.obs, result.mask
    assert dropped > 100  # the test did exercise outages


def _deterministic_actions(sim: MultiCloudSim, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Shortest queue, lowest index: a policy with no random state of its own."""
    return np.where(mask, obs[:, sim.layout.queue], np.inf).argmin(axis=1)


def _trajectory(sim: MultiCloudSim, seeds: np.ndarray, steps: int) -> list[np.ndarray]:
    obs, mask = sim.reset(seeds)
    frames = [obs]
    for _ in range(steps):
        result = sim.step(_deterministic_actions(sim, obs, mask))
        obs, mask = result.obs, result.mask
        frames += [obs, mask, result.reward, result.metrics]
    return frames


def _outage_batch(cfg: ExperimentConfig, envs: int) -> tuple[WorldConfig, np.ndarray, np.ndarray]:
    """small_demo with frequent outages, its envs spread over the regions, scattered seeds."""
    world = replace(cfg.world, outage_rate=0.05)
    return world, np.arange(envs) % cfg.world.regions, np.arange(envs) * 7919 + 3


def test_same_seed_same_trajectory_whatever_the_batch(small_demo: ExperimentConfig) -> None:
    envs, steps = 64, 150
    world, ingress, seeds = _outage_batch(small_demo, envs)
    batch = _trajectory(MultiCloudSim(world, small_demo.reward, ingress), seeds, steps)
    for k in range(envs):
        alone = _trajectory(
            MultiCloudSim(world, small_demo.reward, ingress[k : k + 1]), seeds[k : k + 1], steps
        )
        for whole, single in zip(batch, alone, strict=True):
            np.testing.assert_array_equal(whole[k : k + 1], single)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two threads")
def test_parallel_kernel_matches_the_serial_one(small_demo: ExperimentConfig) -> None:
    envs, steps = 256, 150
    world, ingress, seeds = _outage_batch(small_demo, envs)
    serial = _trajectory(MultiCloudSim(world, small_demo.reward, ingress), seeds, steps)
    threads = min(4, numba.config.NUMBA_NUM_THREADS)
    parallel = _trajectory(
        MultiCloudSim(world, small_demo.reward, ingress, threads=threads), seeds, steps
    )
    for one, other in zip(serial, parallel, strict=True):
        np.testing.assert_array_equal(one, other)


def test_get_state_set_state_resumes_bit_for_bit(small_demo: ExperimentConfig) -> None:
    ingress = np.arange(8) % small_demo.world.regions
    sim = MultiCloudSim(small_demo.world, small_demo.reward, ingress)
    obs, mask = sim.reset(np.arange(8))
    for _ in range(200):
        result = sim.step(_deterministic_actions(sim, obs, mask))
        obs, mask = result.obs, result.mask
    state = sim.get_state()

    def run(world_sim: MultiCloudSim, obs: np.ndarray, mask: np.ndarray) -> list[np.ndarray]:
        out = []
        for _ in range(200):
            result = world_sim.step(_deterministic_actions(world_sim, obs, mask))
            obs, mask = result.obs, result.mask
            out += [obs, mask, result.reward, result.metrics]
        return out

    first = run(sim, obs, mask)
    resumed = MultiCloudSim(small_demo.world, small_demo.reward, ingress)
    resumed.set_state(state)
    second = run(resumed, state["obs"], state["mask"])
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_returned_observations_are_never_overwritten(small_demo: ExperimentConfig) -> None:
    sim = MultiCloudSim(small_demo.world, small_demo.reward, [0, 1])
    sim.reset([1, 2])
    result = sim.step(np.array([0, 0]))
    kept = result.obs.copy()
    sim.reset_envs([0], [99])
    sim.set_state(sim.get_state())
    np.testing.assert_array_equal(result.obs, kept)
