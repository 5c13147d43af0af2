"""The dispatchers do what their definitions say, never pick a masked node, and rank as
queueing theory says they should."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedmc_flwr import choices
from fedmc_flwr.config import (
    ConfigError,
    ExperimentConfig,
    PPOConfig,
    WorldConfig,
    allowed_values,
    imitation_teachers,
    load_config,
)
from fedmc_flwr.policies.heuristics import (
    DISPATCHERS,
    ORACLES,
    JSQPolicy,
    MyopicOraclePolicy,
    RoundRobinPolicy,
    TwoTierPolicy,
)
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim

LATENCY, CARBON = METRIC_NAMES.index("latency_ms"), METRIC_NAMES.index("carbon_g")


def test_the_config_allows_exactly_the_registered_dispatchers() -> None:
    """The config reads the names from the registry (`choices.DISPATCHERS`): the names it
    allows and the dispatchers there cannot differ, and each is explained where it is
    declared (its class docstring)."""
    assert choices.DISPATCHERS.facts() == {name: d.oracle for name, d in DISPATCHERS.items()}
    assert {name for name in DISPATCHERS if name.startswith("myopic-oracle")} == ORACLES
    teachers = tuple(name for name in DISPATCHERS if name not in ORACLES)
    assert allowed_values(PPOConfig, "imitation_teacher") == teachers
    assert DISPATCHERS["two-tier"] is TwoTierPolicy
    assert all(dispatcher.__doc__ for dispatcher in DISPATCHERS.values())


def test_a_dispatcher_is_an_entry_in_its_registry(
    monkeypatch: pytest.MonkeyPatch, small_demo_path: Path
) -> None:
    """A dispatcher added by its entry in `DISPATCHERS` alone is a name the config accepts
    (a teacher), and one that declares itself an oracle is refused as a teacher."""

    class Shortest(JSQPolicy):
        """JSQ under another name."""

        name = "shortest"

    class Peeking(MyopicOraclePolicy):
        """The myopic oracle under another name."""

        name = "peeking"

    monkeypatch.setitem(DISPATCHERS, Shortest.name, Shortest)
    monkeypatch.setitem(DISPATCHERS, Peeking.name, Peeking)
    assert load_config(small_demo_path, ["ppo.imitation_teacher=shortest"]).ppo.imitation_teacher
    with pytest.raises(ConfigError, match=r"ppo\.imitation_teacher = 'peeking' is not allowed"):
        load_config(small_demo_path, ["ppo.imitation_teacher=peeking"])


@pytest.mark.parametrize("name", list(DISPATCHERS))
def test_never_a_masked_action_under_outages_and_full_queues(
    name: str, small_demo: ExperimentConfig, rollout
) -> None:
    world = replace(
        small_demo.world, outage_rate=0.3, outage_mean_s=2.0, queue_capacity=4, queue_threshold=3
    )
    sim = MultiCloudSim(world, small_demo.reward, np.arange(12) % world.regions)
    policy = DISPATCHERS[name](sim)
    assert policy.name == name
    rollout(sim, policy, np.arange(12), 300)  # asserts every action is valid
    assert (~sim.mask).any(), "the test must exercise masks"


def _fresh(cfg: ExperimentConfig, world: WorldConfig | None = None, envs: int = 1):
    sim = MultiCloudSim(world or cfg.world, cfg.reward, np.zeros(envs, dtype=np.int64))
    obs, mask = sim.reset(np.arange(envs))
    return sim, obs, mask


def test_random_is_uniform_over_valid_nodes(small_demo: ExperimentConfig) -> None:
    sim, obs, mask = _fresh(small_demo, envs=4000)
    mask[:, :3] = False
    actions = DISPATCHERS["random"](sim, seed=1).act(obs, mask)
    counts = np.bincount(actions, minlength=sim.num_actions)
    assert counts[:3].sum() == 0
    assert np.abs(counts[3:] / len(actions) - 1 / 15).max() < 0.02
    again = DISPATCHERS["random"](sim, seed=1).act(obs, mask)
    np.testing.assert_array_equal(actions, again)


def test_round_robin_cycles_over_valid_nodes_weighted_by_speed(
    small_demo: ExperimentConfig, identical_world: WorldConfig
) -> None:
    sim, obs, mask = _fresh(small_demo, identical_world)
    policy = RoundRobinPolicy(sim)
    mask[0, 4] = False
    picks = [int(policy.act(obs, mask)[0]) for _ in range(34)]
    assert picks == [n for n in range(18) if n != 4] * 2
    sim, obs, mask = _fresh(small_demo)
    policy = RoundRobinPolicy(sim)
    picks = np.array([policy.act(obs, mask)[0] for _ in range(100 * int(sim.spec.speed.sum()))])
    shares = np.bincount(picks, minlength=sim.num_actions) / len(picks)
    np.testing.assert_allclose(shares, sim.spec.speed / sim.spec.speed.sum(), atol=0.002)


def test_jsq_and_power_of_two_join_shorter_queues(small_demo: ExperimentConfig) -> None:
    sim, obs, mask = _fresh(small_demo, envs=2000)
    queue = sim.layout.node("queue")
    obs[:, queue] = 5.0
    obs[:, queue.start + 7 * queue.step] = 2.0
    obs[:, queue.start + 11 * queue.step] = 2.0
    jsq = DISPATCHERS["jsq"](sim).act(obs, mask)
    assert set(jsq.tolist()) == {7, 11}  # both tied minima are used
    only_two = np.zeros_like(mask)
    only_two[:, [3, 7]] = True
    assert (DISPATCHERS["power-of-2"](sim).act(obs, only_two) == 7).all()
    pow2 = DISPATCHERS["power-of-2"](sim).act(obs, mask)
    sampled_a_short_one = 1 - (16 / 18) * (15 / 17)
    assert abs(np.isin(pow2, [7, 11]).mean() - sampled_a_short_one) < 0.04


def test_two_tier_uses_mean_queue_of_live_nodes_then_shortest_node(
    small_demo: ExperimentConfig,
) -> None:
    sim, obs, mask = _fresh(small_demo)
    queue = [0, 9, 9, 9, 9, 9, 4, 4, 4, 4, 4, 1, 0, 4, 4, 4, 4, 4]  # region by region
    obs[0, sim.layout.node("queue")] = queue
    up = sim.layout.node("up")
    obs[0, up.start + 12 * up.step] = 0.0  # down: region 2's live mean is 4, not 3.33
    mask[0, 12] = False
    assert TwoTierPolicy(sim).act(obs, mask)[0] == 11  # region 1 (mean 3.5), its shortest


def _expected_delay(sim: MultiCloudSim, obs: np.ndarray, node: int) -> float:
    """SED's definition, one node at a time."""
    region = node // sim.nodes_per_region
    ingress = int(np.argmax(obs[sim.layout.node("local")])) // sim.nodes_per_region
    background = obs[sim.layout.node("background")][node]
    rate = sim.spec.speed[node] * (1.0 - background)
    queue = obs[sim.layout.node("queue")][node]
    return sim.spec.rtt_s[ingress, region] + (queue + 1) * sim.spec.mean_service_s / rate


def test_sed_minimises_expected_delay(small_demo: ExperimentConfig, rollout) -> None:
    sim = MultiCloudSim(small_demo.world, small_demo.reward, np.arange(6) % 3)
    rollout(sim, DISPATCHERS["random"](sim), np.arange(6), 300)  # reach a loaded state
    obs, mask = sim.obs, sim.mask
    actions = DISPATCHERS["sed"](sim).act(obs, mask)
    for b, action in enumerate(actions):
        delays = [_expected_delay(sim, obs[b], n) for n in np.flatnonzero(mask[b])]
        assert _expected_delay(sim, obs[b], action) == pytest.approx(min(delays))
        observed = obs[b, sim.layout.node("expected_delay")]  # the feature a learner reads
        every = [_expected_delay(sim, obs[b], n) for n in range(sim.num_actions)]
        np.testing.assert_allclose(observed, every, rtol=1e-5)


def test_greedy_regions_prefer_cheap_or_green_regions_that_meet_the_slo(
    small_demo: ExperimentConfig,
) -> None:
    sim, obs, mask = _fresh(small_demo)
    per_region = sim.nodes_per_region

    def region_of(name: str, view: np.ndarray) -> int:
        return int(DISPATCHERS[name](sim).act(view, mask)[0]) // per_region

    carbon = obs[0, sim.layout.node("carbon")][::per_region]  # one node per region
    assert region_of("greenest-region", obs) == int(np.argmin(carbon))
    cheap = obs.copy()
    price = sim.layout.node("price")
    region_one = slice(price.start + per_region * price.step, None, price.step)
    cheap[0, region_one][:per_region] *= 0.1
    assert region_of("cheapest-region", cheap) == 1
    # the greenest region cannot meet the SLO (queues at the threshold): the next one wins
    busy = obs.copy()
    greenest = int(np.argmin(carbon))
    busy[0, sim.layout.node("queue")][greenest * per_region : (greenest + 1) * per_region] = (
        sim.spec.queue_threshold
    )
    assert region_of("greenest-region", busy) == int(np.argsort(carbon)[1])
    # no region can: plain shortest expected delay
    jammed = obs.copy()
    jammed[0, sim.layout.node("queue")] = sim.spec.queue_threshold + np.arange(sim.num_actions) % 3
    best = min(_expected_delay(sim, jammed[0], n) for n in range(sim.num_actions))
    for name in ("cheapest-region", "greenest-region"):
        action = DISPATCHERS[name](sim).act(jammed, mask)[0]
        assert _expected_delay(sim, jammed[0], action) == pytest.approx(best)


def test_myopic_oracle_takes_the_cheapest_immediate_cost(
    small_demo: ExperimentConfig, rollout
) -> None:
    sim = MultiCloudSim(small_demo.world, small_demo.reward, np.arange(6) % 3)
    rollout(sim, DISPATCHERS["jsq"](sim), np.arange(6), 200)
    actions = DISPATCHERS["myopic-oracle"](sim).act(sim.obs, sim.mask)
    costs = sim.dispatch_costs()
    np.testing.assert_array_equal(costs[np.arange(6), actions], costs.min(axis=1))


def test_myopic_expected_reads_no_hidden_state(small_demo: ExperimentConfig, rollout) -> None:
    """The same observable state with other job sizes and backlogs: the same costs and
    actions, where the oracle's costs move; and a mean-size job behind empty queues costs
    what the oracle says it costs."""
    sim = MultiCloudSim(small_demo.world, small_demo.reward, np.arange(6) % 3)
    rollout(sim, DISPATCHERS["jsq"](sim), np.arange(6), 200)
    expected, oracle = sim.dispatch_costs(False, False), sim.dispatch_costs()
    actions = DISPATCHERS["myopic-expected"](sim, seed=3).act(sim.obs, sim.mask)
    np.testing.assert_array_equal(expected[np.arange(6), actions], expected.min(axis=1))
    sim.state.size[:] *= 3.0
    sim.state.backlog[:] *= 0.5
    np.testing.assert_array_equal(sim.dispatch_costs(False, False), expected)
    np.testing.assert_array_equal(
        DISPATCHERS["myopic-expected"](sim, seed=3).act(sim.obs, sim.mask), actions
    )
    assert not np.array_equal(sim.dispatch_costs(), oracle)
    sim.state.size[:] = sim.spec.mean_service_s
    sim.state.backlog[:] = 0.0
    sim.state.count[:] = 0
    np.testing.assert_allclose(sim.dispatch_costs(False, False), sim.dispatch_costs())


def test_each_split_oracle_reads_the_one_hidden_fact_it_names(
    small_demo: ExperimentConfig, rollout
) -> None:
    """The size oracle's costs move with the job's size and not with the backlogs; the
    backlog oracle's the other way round."""
    sim = MultiCloudSim(small_demo.world, small_demo.reward, np.arange(6) % 3)
    rollout(sim, DISPATCHERS["jsq"](sim), np.arange(6), 200)
    size_only, backlog_only = sim.dispatch_costs(True, False), sim.dispatch_costs(False, True)
    sim.state.backlog[:] *= 0.5
    np.testing.assert_array_equal(sim.dispatch_costs(True, False), size_only)
    assert not np.array_equal(sim.dispatch_costs(False, True), backlog_only)
    sim.state.backlog[:] *= 2.0
    sim.state.size[:] *= 3.0
    np.testing.assert_array_equal(sim.dispatch_costs(False, True), backlog_only)
    assert not np.array_equal(sim.dispatch_costs(True, False), size_only)
    split = {"myopic-oracle-size": (True, False), "myopic-oracle-backlogs": (False, True)}
    for name, flags in split.items():
        costs = sim.dispatch_costs(*flags)
        actions = DISPATCHERS[name](sim, seed=1).act(sim.obs, sim.mask)
        np.testing.assert_array_equal(costs[np.arange(6), actions], costs.min(axis=1))


def _latencies(cfg: ExperimentConfig, world: WorldConfig, names: list[str], rollout) -> dict:
    """Per-seed mean latency of each dispatcher on the same seeds (common random numbers:
    arrivals and job sizes do not depend on the actions), every episode from midnight: the
    gaps between dispatchers vary with the time of day, so one phase keeps them sharp."""
    envs = 16
    out = {}
    for name in names:
        sim = MultiCloudSim(world, cfg.reward, np.arange(envs) % world.regions)
        seeds, phases = np.arange(envs) + 77, np.zeros(envs)
        out[name] = rollout(sim, DISPATCHERS[name](sim), seeds, 3000, phases)["latency_ms"]
    return out


@pytest.mark.parametrize("identical", [False, True], ids=["small_demo", "identical"])
def test_jsq_beats_random_and_round_robin(
    identical: bool, small_demo: ExperimentConfig, identical_world: WorldConfig, rollout
) -> None:
    world = identical_world if identical else small_demo.world
    latency = _latencies(small_demo, world, ["jsq", "random", "round-robin"], rollout)
    for other in ("random", "round-robin"):
        gap = latency[other] - latency["jsq"]
        assert gap.mean() > 5 * gap.std(ddof=1) / np.sqrt(len(gap)), other


@pytest.mark.slow
def test_no_dispatcher_beats_jsq_on_identical_servers(
    small_demo: ExperimentConfig, identical_world: WorldConfig, rollout
) -> None:
    """Winston (1977): JSQ is optimal for identical exponential servers."""
    names = list(imitation_teachers())
    latency = _latencies(small_demo, identical_world, names, rollout)
    for name in names:
        gap = latency[name] - latency["jsq"]
        assert gap.mean() >= -3 * gap.std(ddof=1) / np.sqrt(len(gap)), name


def test_latency_and_carbon_follow_the_start_phase(small_demo: ExperimentConfig) -> None:
    """The same seeds started at four phases of the day: prices, carbon, arrivals and other
    tenants' load follow the day, so SED's latency and carbon differ beyond noise."""
    envs, steps = 32, 400
    means = {}
    for phase in (0.0, 0.25, 0.5, 0.75):
        sim = MultiCloudSim(small_demo.world, small_demo.reward, np.zeros(envs, dtype=np.int64))
        policy = DISPATCHERS["sed"](sim, seed=5)
        obs, mask = sim.reset(np.arange(envs) + 300, np.full(envs, phase))
        total = np.zeros((envs, 2))
        for _ in range(steps):
            result = sim.step(policy.act(obs, mask))
            total += result.metrics[:, [LATENCY, CARBON]]
            obs, mask = result.obs, result.mask
        means[phase] = total / steps
    per_phase = np.array(list(means.values()))  # [phases, envs, 2]
    spread = per_phase.mean(axis=1).max(axis=0) - per_phase.mean(axis=1).min(axis=0)
    noise = per_phase.std(axis=1, ddof=1).max(axis=0) / np.sqrt(envs)
    assert (spread > 5 * noise).all(), (spread, noise)


class _Dropper:
    """Sends every job it can to a masked node (a drop, if drops were free), else anywhere."""

    name = "dropper"

    def __init__(self, sim: MultiCloudSim, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return (np.where(~mask, 2.0, 1.0) * self.rng.random(mask.shape)).argmax(axis=1)


def test_sending_jobs_to_masked_nodes_never_pays(small_demo: ExperimentConfig) -> None:
    """A dispatcher that picks a masked node whenever one exists (outages and full queues
    make that common) scores worse than JSQ and worse than random dispatch on the same
    seeds: with free drops it beat random dispatch."""
    envs, steps = 16, 1500
    reward = {}
    for name, factory in (("jsq", DISPATCHERS["jsq"]), ("random", DISPATCHERS["random"])):
        sim = MultiCloudSim(small_demo.world, small_demo.reward, np.arange(envs) % 3)
        reward[name] = _rollout_rewards(sim, factory(sim, seed=1), steps)
    sim = MultiCloudSim(small_demo.world, small_demo.reward, np.arange(envs) % 3)
    reward["dropper"], invalid = _rollout_rewards(sim, _Dropper(sim, seed=1), steps, True)
    assert invalid > 0.25  # it did send many jobs to masked nodes
    for other in ("jsq", "random"):
        gap = reward[other] - reward["dropper"]
        assert gap.mean() > 5 * gap.std(ddof=1) / np.sqrt(envs), other


def _rollout_rewards(sim: MultiCloudSim, policy, steps: int, count_invalid: bool = False):
    """Per-env mean reward over `steps` jobs from seeds 77.. (masked actions allowed)."""
    obs, mask = sim.reset(np.arange(sim.num_envs) + 77)
    total = np.zeros(sim.num_envs)
    invalid = 0
    for _ in range(steps):
        result = sim.step(policy.act(obs, mask))
        total += result.reward
        invalid += int(result.invalid.sum())
        obs, mask = result.obs, result.mask
    if count_invalid:
        return total / steps, invalid / (steps * sim.num_envs)
    return total / steps
