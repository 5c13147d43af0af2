"""The world obeys queueing theory, its own masks, its carbon accounting and its seeds."""

from __future__ import annotations

from dataclasses import replace

import numba
import numpy as np
import pytest

from fedmc_flwr.config import ExperimentConfig, WorldConfig
from fedmc_flwr.policies.heuristics import RandomPolicy
from fedmc_flwr.sim import kernel
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
    waiting = sojourn = 0.0
    for k in range(warmup + steps):
        actions = policy.act(obs, mask)
        background = obs[:, sim.layout.node("background")][np.arange(envs), actions]
        service_s = sim.state.size / (sim.spec.speed[actions] * (1.0 - background))
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
    intensity = obs[0, sim.layout.node("carbon")][targets]
    np.testing.assert_allclose(outcomes[:, ENERGY], outcomes[0, ENERGY])
    np.testing.assert_allclose(outcomes[:, CARBON] / outcomes[:, ENERGY], intensity, rtol=1e-6)
    assert list(np.argsort(outcomes[:, CARBON])) == list(np.argsort(intensity))
    assert outcomes[:, CARBON].min() < outcomes[:, CARBON].max() / 10


def test_a_masked_action_is_served_at_the_worst_valid_node(small_demo: ExperimentConfig) -> None:
    """No free drops: a job sent to a masked node goes where its immediate weighted cost is
    highest, exactly as if that node had been chosen (same outcome, same next state)."""
    world = replace(small_demo.world, outage_rate=0.3, outage_mean_s=2.0)
    envs = 16
    sim = MultiCloudSim(world, small_demo.reward, np.arange(envs) % world.regions)
    obs, mask = sim.reset(np.arange(envs))
    rows = np.arange(envs)
    rng = np.random.default_rng(0)
    redirected = 0
    for _ in range(300):
        up = obs[:, sim.layout.node("up")] > 0
        assert not (mask & ~up).any(), "a node in an outage is offered"
        # env by env: a masked node if there is one, else a valid one
        actions = (np.where(~mask, 2.0, 1.0) * rng.random(mask.shape)).argmax(axis=1)
        masked = ~mask[rows, actions]
        costs = sim.dispatch_costs()  # inf on masked nodes
        worst = np.where(mask, costs, -np.inf).argmax(axis=1)
        state = sim.get_state()
        result = sim.step(actions)
        after = sim.get_state()
        np.testing.assert_array_equal(result.invalid, masked)
        np.testing.assert_allclose(result.reward[masked], -costs[rows, worst][masked], rtol=1e-12)
        sim.set_state(state)
        served = sim.step(np.where(masked, worst, actions))
        for field in ("obs", "mask", "reward", "metrics"):
            np.testing.assert_array_equal(getattr(served, field), getattr(result, field))
        for name, value in sim.get_state().items():
            np.testing.assert_array_equal(value, after[name], err_msg=name)
        redirected += int(masked.sum())
        obs, mask = result.obs, result.mask
    assert redirected > 100  # the test did exercise outages


def _deterministic_actions(sim: MultiCloudSim, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Shortest queue, lowest index: a policy with no random state of its own."""
    return np.where(mask, obs[:, sim.layout.node("queue")], np.inf).argmin(axis=1)


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
@pytest.mark.slow
def test_results_do_not_depend_on_the_thread_count(small_demo: ExperimentConfig) -> None:
    envs, steps = 255, 150  # shares of unequal size on two or four threads
    world, ingress, seeds = _outage_batch(small_demo, envs)
    serial = _trajectory(MultiCloudSim(world, small_demo.reward, ingress), seeds, steps)
    threads = min(4, numba.config.NUMBA_NUM_THREADS)
    parallel = _trajectory(
        MultiCloudSim(world, small_demo.reward, ingress, threads=threads), seeds, steps
    )
    for one, other in zip(serial, parallel, strict=True):
        np.testing.assert_array_equal(one, other)
    # compiled here (not loaded from the cache), the kernels' loop has one signature: the
    # share bounds reach it as int64 in both of numba's passes, not once as uint64 too
    assert len(kernel.step_envs.signatures) <= 1


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


def _no_warmup(cfg: ExperimentConfig, **changes) -> WorldConfig:
    return replace(cfg.world, warmup_jobs=0, **changes)


def test_explicit_phases_set_each_clock(small_demo: ExperimentConfig) -> None:
    world = _no_warmup(small_demo)
    period = world.diurnal_period_s
    phases = np.array([0.0, 0.1, 0.375, 0.5, 0.9, 0.999])
    sim = MultiCloudSim(world, small_demo.reward, np.arange(6) % world.regions)
    obs, _ = sim.reset(np.full(6, 7), phases)
    first_gap = sim.state.t - phases * period  # the clock ran to the first arrival only
    assert (first_gap > 0).all() and (first_gap < 0.05).all()
    theta = 2 * np.pi * sim.state.t / period
    clock = obs[:, sim.layout.globals_span]
    np.testing.assert_allclose(clock, np.c_[np.sin(theta), np.cos(theta)], rtol=1e-6)
    # the same phases with the warm-up: the first job comes later in the same day
    warm = MultiCloudSim(small_demo.world, small_demo.reward, np.arange(6) % world.regions)
    warm.reset(np.full(6, 7), phases)
    assert ((warm.state.t - phases * period) > first_gap).all()
    assert ((warm.state.t - phases * period) < 0.05 * period).all()


def test_drawn_phases_cover_the_day_reproducibly_whatever_the_batch(
    small_demo: ExperimentConfig,
) -> None:
    world = _no_warmup(small_demo)
    envs = 256
    seeds = np.arange(envs) * 104729 + 11
    sim = MultiCloudSim(world, small_demo.reward, np.arange(envs) % world.regions)
    sim.reset(seeds)
    phase = sim.state.t / world.diurnal_period_s  # phase + one inter-arrival time
    assert set(np.floor(phase * 8).astype(int).tolist()) == set(range(8))
    for k in (0, 17, 255):
        alone = MultiCloudSim(world, small_demo.reward, [k % world.regions])
        alone.reset(seeds[k : k + 1])
        assert alone.state.t[0] == sim.state.t[k]
    again = MultiCloudSim(world, small_demo.reward, np.arange(envs) % world.regions)
    again.reset(seeds)
    np.testing.assert_array_equal(again.state.t, sim.state.t)


def test_bad_phases_are_clear_errors(small_demo: ExperimentConfig) -> None:
    sim = MultiCloudSim(small_demo.world, small_demo.reward, [0, 1])
    with pytest.raises(ValueError, match="one phase per env"):
        sim.reset([1, 2], [0.5])
    for bad in ([0.5, 1.0], [-0.1, 0.2], [np.nan, 0.2]):
        with pytest.raises(ValueError, match=r"in \[0, 1\)"):
            sim.reset([1, 2], bad)


def _true_sed(sim: MultiCloudSim) -> np.ndarray:
    """Shortest expected delay on the true state: RTT + (backlog + size) / effective rate."""
    spec, regions = sim.spec, np.repeat(np.arange(sim.num_regions), sim.nodes_per_region)
    s, c = sim.state.clock[:, :1], sim.state.clock[:, 1:]
    day = s * np.cos(spec.phase)[regions] + c * np.sin(spec.phase)[regions]
    share = spec.background_mean[regions] * (1 + spec.background_swing[regions] * day)
    rate = spec.speed * (1 - np.clip(share, 0.0, 0.95))
    delay = (
        spec.rtt_s[sim.state.ingress][:, regions]
        + (sim.state.backlog + sim.state.size[:, None]) / rate
    )
    return np.where(sim.mask, delay, np.inf).argmin(axis=1)


def test_warm_up_is_unscored_sed_dispatch_from_an_empty_estate(
    small_demo: ExperimentConfig,
) -> None:
    """Reset with W warm-up jobs is reset with none followed by W steps of true-state SED:
    same state bit for bit, and none of those jobs appears in anything the sim returns."""
    warmup, envs = small_demo.world.warmup_jobs, 12
    assert warmup >= 100
    seeds, phases = np.arange(envs) + 40, np.linspace(0, 1, envs, endpoint=False)
    ingress = np.arange(envs) % small_demo.world.regions
    warm = MultiCloudSim(small_demo.world, small_demo.reward, ingress)
    obs, _ = warm.reset(seeds, phases)
    assert (obs[:, warm.layout.node("queue")].sum(axis=1) > 0).all(), "the estate is not busy"
    assert (warm.state.backlog.sum(axis=1) > 0).all()
    cold = MultiCloudSim(_no_warmup(small_demo), small_demo.reward, ingress)
    cold.reset(seeds, phases)
    assert (cold.state.count == 0).all()
    for _ in range(warmup):
        cold.step(_true_sed(cold))
    for name, value in warm.get_state().items():
        np.testing.assert_array_equal(value, cold.get_state()[name], err_msg=name)
    # the first scored job is the one after the warm-up, and only it
    first = warm.step(_true_sed(warm))
    again = cold.step(_true_sed(cold))
    np.testing.assert_array_equal(first.reward, again.reward)
    np.testing.assert_array_equal(first.metrics, again.metrics)


def test_a_job_admitted_when_every_live_node_is_full_is_counted(
    small_demo: ExperimentConfig,
) -> None:
    """Tiny queues, heavy load and outages: the mask often falls back to full live nodes.
    Every admitted job must stay in its node's count until its (FCFS) departure."""
    world = _no_warmup(small_demo, queue_capacity=2, queue_threshold=1, load=0.95, outage_rate=0.05)
    envs = 8
    sim = MultiCloudSim(world, small_demo.reward, np.arange(envs) % world.regions)
    _, mask = sim.reset(np.arange(envs) + 5)
    rows = np.arange(envs)
    done_at: list[list[list[float]]] = [[[] for _ in range(sim.num_actions)] for _ in rows]
    rng = np.random.default_rng(1)
    overfull = 0
    for _ in range(1500):
        actions = np.where(mask, rng.random(mask.shape), -1.0).argmax(axis=1)
        overfull += int((sim.state.count[rows, actions] >= world.queue_capacity).sum())
        arrival = sim.state.t.copy()
        result = sim.step(actions)
        regions = actions // sim.nodes_per_region
        sojourn = result.metrics[:, LATENCY] / 1000.0 - sim.spec.rtt_s[sim.state.ingress, regions]
        for b, a in enumerate(actions):
            if not result.refused[b]:  # no room anywhere: turned away, never queued
                node = done_at[b][a]  # FCFS: no job leaves before the one ahead of it
                node.append(max([arrival[b] + sojourn[b], *node[-1:]]))
        for b in rows:
            expected = [sum(1 for c in node if c > sim.state.t[b] + 1e-9) for node in done_at[b]]
            assert sim.state.count[b].tolist() == expected
        mask = result.mask
    assert overfull > 50, overfull  # the fallback was exercised
    assert sim.state.count.max() > world.queue_capacity


def test_with_no_room_anywhere_the_job_is_refused_at_the_worst_price(
    small_demo: ExperimentConfig,
) -> None:
    world = _no_warmup(small_demo, queue_capacity=2, queue_threshold=1, outage_rate=0.0)
    sim = MultiCloudSim(world, small_demo.reward, [0])
    sim.reset([3], [0.0])
    hard = sim.spec.hard_capacity
    assert sim.state.ring.shape[2] == hard > world.queue_capacity
    state = sim.get_state()
    later = state["t"][0] + 100.0
    state["ring"][:] = later
    state["next_done"][:] = later
    state["count"][:] = hard
    state["backlog"][:] = 50.0
    sim.set_state(state)
    costs = sim.dispatch_costs()[0]  # the stored mask offers every (live) node
    result = sim.step(np.array([int(np.argmin(costs))]))
    assert result.refused[0] and not result.invalid[0]
    assert result.reward[0] <= -costs.max()
    assert result.metrics[0, METRIC_NAMES.index("slo_violation")] == 1.0
    assert (sim.state.count == hard).all() and (
        sim.state.backlog <= 50.0
    ).all()  # no load was added
    assert result.mask.all()  # no room anywhere: every live node is offered


def test_the_busiest_region_offers_the_configured_load(small_demo: ExperimentConfig) -> None:
    """Mean arrival rate x mean service time over the mean spare capacity, per region."""
    for regions in (1, 3, 4, 8):
        world = replace(small_demo.world, regions=regions, load=0.9)
        spec = MultiCloudSim(world, small_demo.reward, [0]).spec
        node_region = np.repeat(np.arange(regions), spec.nodes_per_region)
        spare = np.sum(spec.speed * (1.0 - spec.background_mean[node_region]))
        offered = spec.arrival_rate * spec.mean_service_s / spare
        assert (offered <= world.load * (1 + 1e-12)).all(), regions
        assert offered.max() == pytest.approx(world.load, rel=1e-12)
        assert offered.min() < world.load or regions == 1


def test_completion_times_keep_their_precision_late_in_time(
    small_demo: ExperimentConfig,
) -> None:
    """The same world shifted a million days later runs the same queues: completion times
    are float64 (a float32 ring rounds them to about a second at that age)."""
    ingress = np.arange(8) % small_demo.world.regions
    sim = MultiCloudSim(small_demo.world, small_demo.reward, ingress)
    assert sim.state.ring.dtype == np.float64
    obs, mask = sim.reset(np.arange(8), np.zeros(8))
    state = sim.get_state()
    shift = 1e6 * small_demo.world.diurnal_period_s
    late = dict(state)
    for name in ("t", "ring", "next_done", "down_until"):
        late[name] = state[name] + shift
    early_frames = _run(sim, obs, mask, 400)
    sim.set_state(late)
    late_frames = _run(sim, obs, mask, 400)
    for early, shifted in zip(early_frames, late_frames, strict=True):
        np.testing.assert_array_equal(early[0], shifted[0])  # queue lengths
        np.testing.assert_allclose(early[1], shifted[1], rtol=1e-5)  # latencies


def _run(sim: MultiCloudSim, obs: np.ndarray, mask: np.ndarray, steps: int) -> list:
    frames = []
    for _ in range(steps):
        result = sim.step(_deterministic_actions(sim, obs, mask))
        obs, mask = result.obs, result.mask
        frames.append((obs[:, sim.layout.node("queue")], result.metrics[:, LATENCY]))
    return frames
