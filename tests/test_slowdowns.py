"""A slowed node keeps taking jobs at a share of its speed, shows it in `up` alone, and a
rule that reads `up` steers around it where shortest expected delay does not."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedmc_flwr.config import ExperimentConfig
from fedmc_flwr.policies.heuristics import MyopicExpectedPolicy, SEDPolicy
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim

LATENCY = METRIC_NAMES.index("latency_ms")


def test_a_slowed_node_serves_at_its_share(small_demo: ExperimentConfig) -> None:
    """The same job on the same node, once at full speed and once slowed: its time at the
    node (wait and service) is divided by the share."""
    world = replace(small_demo.world, slowdown_rate=0.0, slowdown_share=0.25, outage_rate=0.0)
    fast = MultiCloudSim(world, small_demo.reward, [0])
    slow = MultiCloudSim(world, small_demo.reward, [0])
    obs, _ = fast.reset([5])
    slow.reset([5])
    node = 3
    state = fast.get_state()
    state["slow_until"][0, node] = state["t"][0] + 1e6
    slow.set_state(state)
    rtt = float(obs[0, fast.layout.node("rtt")][node])
    action = np.array([node])
    at_full = fast.step(action).metrics[0, LATENCY] / 1000.0 - rtt
    at_share = slow.step(action).metrics[0, LATENCY] / 1000.0 - rtt
    assert at_full > 0
    assert np.isclose(at_share * 0.25, at_full, rtol=1e-9)


def test_slowdowns_show_in_up_and_leave_the_mask_alone(small_demo: ExperimentConfig) -> None:
    world = replace(small_demo.world, slowdown_rate=0.05, slowdown_share=0.1, outage_rate=0.0)
    sim = MultiCloudSim(world, small_demo.reward, np.zeros(16, dtype=np.int64))
    policy = SEDPolicy(sim, seed=0)
    obs, mask = sim.reset(np.arange(16))
    up = sim.layout.node("up")
    seen = set()
    for _ in range(300):
        seen |= set(np.unique(obs[:, up]).tolist())
        assert mask.any(axis=1).all()
        slowed = (obs[:, up] > 0.0) & (obs[:, up] < 1.0)
        full = obs[:, sim.layout.node("queue")] >= world.queue_capacity
        assert mask[slowed & ~full].all()  # slowed, not full: still offered
        result = sim.step(policy.act(obs, mask))
        obs, mask = result.obs, result.mask
    assert seen == {np.float32(0.1), np.float32(1.0)}


def test_a_rule_that_reads_up_beats_one_that_reads_the_catalogue(
    small_demo: ExperimentConfig,
) -> None:
    """Myopic-expected prices a slowed node at its pace; SED's expected delay keeps the
    instance type's speed. With frequent slowdowns the first loses far less reward to them."""
    rewards = {}
    for rate in (0.0, 0.01):
        world = replace(small_demo.world, slowdown_rate=rate)
        for rule in (SEDPolicy, MyopicExpectedPolicy):
            sim = MultiCloudSim(world, small_demo.reward, np.zeros(32, dtype=np.int64))
            policy = rule(sim, seed=0)
            obs, mask = sim.reset(np.arange(32) + 100)
            total = 0.0
            for _ in range(400):
                result = sim.step(policy.act(obs, mask))
                total += float(result.reward.mean())
                obs, mask = result.obs, result.mask
            rewards[rate, rule.name] = total / 400
    sed_loss = rewards[0.0, "sed"] - rewards[0.01, "sed"]
    myopic_loss = rewards[0.0, "myopic-expected"] - rewards[0.01, "myopic-expected"]
    assert sed_loss > 0.2
    assert myopic_loss < sed_loss / 2
