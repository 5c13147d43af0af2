"""The classic dispatchers every learner is judged against, each in its strongest honest form.

Every dispatcher acts on a whole batch at once (numpy, no loop over envs) and reads only
what a real load balancer could know: the observation (queues, live nodes, prices, carbon,
background load, which nodes are local to the ingress, through `sim.layout`) and the
estate's static facts (`sim.spec`: node speeds and powers, RTTs, mean service time, SLO),
which they read in float64 from the spec rather than from the float32 observation. Only
the oracles read hidden state (the waiting job's true size, the exact backlogs, or one of
the two), as references.
None ever returns a masked action: every choice is an argmin or argmax over valid actions
only, and the world guarantees at least one valid action per env.

Ties are broken uniformly at random from the policy's own seeded generator, so that no
node is favoured by its index and evaluation stays reproducible.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from fedmc_flwr import choices
from fedmc_flwr.sim.signals import EGRESS_USD_PER_JOB, PUE
from fedmc_flwr.sim.world import MultiCloudSim


def _argmin_random_ties(score: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row-wise argmin of `score` (inf = excluded), ties broken uniformly at random."""
    best = score == score.min(axis=1, keepdims=True)
    return np.where(best, rng.random(score.shape), -1.0).argmax(axis=1)


class _Dispatcher(ABC):
    """Static facts of the estate, read once, and the estimates several dispatchers share;
    each dispatcher derives from it and serves `policies.base.Policy`."""

    name = ""
    oracle = False
    """It reads what the observation hides: a reference, never a competitor, and no
    imitation teacher (`ppo.imitation_teacher`)."""

    def __init__(self, sim: MultiCloudSim, seed: int = 0) -> None:
        spec = sim.spec
        self.layout = sim.layout
        self.num_regions = sim.num_regions
        self.per_region = sim.nodes_per_region
        self.node_region = np.repeat(np.arange(sim.num_regions), sim.nodes_per_region)
        self.speed = spec.speed
        self.rtt_to_node = spec.rtt_s[:, self.node_region]
        """[R, N] round-trip time from each ingress region to each node."""
        self.mean_service_s = spec.mean_service_s
        self.rng = np.random.default_rng(seed)

    @abstractmethod
    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """[B, obs_dim] observations and [B, A] masks -> [B] actions, never a masked one."""

    def _queue(self, obs: np.ndarray) -> np.ndarray:
        return obs[:, self.layout.node("queue")]

    def _by_region(self, per_node: np.ndarray) -> np.ndarray:
        """[B, N] -> [B, R, nodes_per_region] (nodes are numbered region by region)."""
        return per_node.reshape(len(per_node), self.num_regions, self.per_region)

    def _busy_s(self, obs: np.ndarray) -> np.ndarray:
        """[B, N] expected service time of a mean job, slowed by other tenants' load."""
        background = obs[:, self.layout.node("background")]
        return self.mean_service_s / (self.speed * (1.0 - background))

    def _local(self, obs: np.ndarray) -> np.ndarray:
        """[B, N] True where the node sits in the ingress region."""
        return obs[:, self.layout.node("local")] > 0.5

    def _ingress(self, obs: np.ndarray) -> np.ndarray:
        return self.node_region[self._local(obs).argmax(axis=1)]

    def _expected_delay(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """[B, N] RTT + (queue + 1) mean jobs at the node's effective speed; inf if masked."""
        delay = self.rtt_to_node[self._ingress(obs)] + (self._queue(obs) + 1.0) * self._busy_s(obs)
        return np.where(mask, delay, np.inf)


class RandomPolicy(_Dispatcher):
    """Uniform over the valid nodes: each node becomes an M/M/1 queue (the floor)."""

    name = "random"

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.where(mask, self.rng.random(mask.shape), -1.0).argmax(axis=1)


class RoundRobinPolicy(_Dispatcher):
    """Smooth weighted round-robin (NGINX's), weights = node speed, over the valid nodes.

    What production balancers ship: each valid node earns its weight per job and the
    richest is served and pays back the total, so a node of twice the speed gets twice the
    jobs, evenly interleaved. On identical nodes it is plain cyclic round-robin.
    """

    name = "round-robin"

    def __init__(self, sim: MultiCloudSim, seed: int = 0) -> None:
        super().__init__(sim, seed)
        self.credit = np.zeros((sim.num_envs, sim.num_actions))

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        earned = np.where(mask, self.speed, 0.0)
        self.credit += earned
        choice = np.where(mask, self.credit, -np.inf).argmax(axis=1)
        self.credit[np.arange(len(choice)), choice] -= earned.sum(axis=1)
        return choice


class JSQPolicy(_Dispatcher):
    """Join the shortest queue (fewest jobs) among valid nodes, random tie-break."""

    name = "jsq"

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return _argmin_random_ties(np.where(mask, self._queue(obs), np.inf), self.rng)


class TwoTierPolicy(_Dispatcher):
    """Tier 1: the region with the shortest mean queue over its live nodes; Tier 2: its
    shortest valid node. Regions without a valid node are skipped; ties are random."""

    name = "two-tier"

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        queue = self._queue(obs)
        live = self._by_region(obs[:, self.layout.node("up")])
        region_queue = (self._by_region(queue) * live).sum(axis=2) / np.maximum(live.sum(2), 1)
        has_valid = self._by_region(mask).any(axis=2)
        region = _argmin_random_ties(np.where(has_valid, region_queue, np.inf), self.rng)
        in_region = mask & (self.node_region[None, :] == region[:, None])
        return _argmin_random_ties(np.where(in_region, queue, np.inf), self.rng)


class PowerOfTwoPolicy(_Dispatcher):
    """JSQ(d=2): sample two distinct valid nodes uniformly, join the shorter queue."""

    name = "power-of-2"

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        keys = np.where(mask, self.rng.random(mask.shape), -1.0)
        if mask.shape[1] == 1:
            return np.zeros(len(mask), dtype=np.int64)
        pair = np.argpartition(-keys, 1, axis=1)[:, :2]  # the two largest keys, in any order
        rows = np.arange(len(mask))
        first, second = pair[:, 0], pair[:, 1]
        queue = self._queue(obs)
        take_second = mask[rows, second] & (queue[rows, second] < queue[rows, first])
        return np.where(take_second, second, first)


class SEDPolicy(_Dispatcher):
    """Shortest expected delay: min over valid nodes of RTT(ingress, region) +
    (queue + 1) * mean_service / (speed * (1 - background share)): the classic rule, a
    mean job even where jobs declare their sizes (`world.declared_size`)."""

    name = "sed"

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return _argmin_random_ties(self._expected_delay(obs, mask), self.rng)


class _GreedyRegionPolicy(_Dispatcher):
    """Among regions whose SED node is expected to meet the SLO (delay within the SLO and
    queue under the violation threshold), the one where that node serves the job at the
    lowest expected `_per_job` figure; then that node. No region qualifies: plain SED."""

    def __init__(self, sim: MultiCloudSim, seed: int = 0) -> None:
        super().__init__(sim, seed)
        self.slo_s = sim.spec.slo_s
        self.queue_threshold = sim.spec.queue_threshold
        self.power_w = sim.spec.power_w
        self.price_mult = sim.spec.price_mult

    @abstractmethod
    def _per_job(self, obs: np.ndarray) -> np.ndarray:
        """[B, N] the expected figure (cost or carbon) of the job on each node."""

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        delay = self._expected_delay(obs, mask)
        rows = np.arange(len(obs))[:, None]
        by_region = self._by_region(delay)
        local = _argmin_random_ties(by_region.reshape(-1, self.per_region), self.rng)
        sed_node = local.reshape(len(obs), self.num_regions) + self.per_region * np.arange(
            self.num_regions
        )
        node_delay = delay[rows, sed_node]
        meets = (node_delay <= self.slo_s) & (
            self._queue(obs)[rows, sed_node] < self.queue_threshold
        )
        figure = np.where(meets, self._per_job(obs)[rows, sed_node], np.inf)
        region = _argmin_random_ties(figure, self.rng)
        greedy = sed_node[rows[:, 0], region]
        fallback = _argmin_random_ties(delay, self.rng)
        return np.where(meets.any(axis=1), greedy, fallback)


class CheapestRegionPolicy(_GreedyRegionPolicy):
    """Cost-greedy: expected cost = price * node price factor * busy time (+ egress if the
    region is not the ingress region), from the observed prices and background load."""

    name = "cheapest-region"

    def _per_job(self, obs: np.ndarray) -> np.ndarray:
        price = obs[:, self.layout.node("price")] * self.price_mult
        egress = np.where(self._local(obs), 0.0, 1.0)
        return price * self._busy_s(obs) / 3600.0 + EGRESS_USD_PER_JOB * egress


class GreenestRegionPolicy(_GreedyRegionPolicy):
    """Carbon-greedy: expected carbon = grid intensity * node power * busy time * PUE, from
    the observed carbon intensities and background load."""

    name = "greenest-region"

    def _per_job(self, obs: np.ndarray) -> np.ndarray:
        carbon = obs[:, self.layout.node("carbon")]
        return carbon * self.power_w * self._busy_s(obs) * PUE / 3.6e6


class MyopicExpectedPolicy(_Dispatcher):
    """The least immediate weighted cost (latency, SLO violation, cost, carbon) as the
    observation can know it: the job at its mean size (or its declared size with
    `world.declared_size`), behind `queue` mean-size jobs (`sim.dispatch_costs`), ties
    broken at random. A fair competitor: what a myopic learner can reach, so a learner's
    lead over it is foresight.

    Its subclasses are the oracles: the same rule knowing hidden state (`knows_size`, the
    waiting job's true size; `knows_backlogs`, the exact work queued at each node). They
    must act on the very `sim` they were built for, between that sim's steps. The four
    split the myopic oracle's lead into what each hidden fact buys."""

    name = "myopic-expected"
    knows_size = False
    knows_backlogs = False

    def __init__(self, sim: MultiCloudSim, seed: int = 0) -> None:
        super().__init__(sim, seed)
        self.sim = sim

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        costs = self.sim.dispatch_costs(self.knows_size, self.knows_backlogs)
        return _argmin_random_ties(np.where(mask, costs, np.inf), self.rng)


class MyopicOraclePolicy(MyopicExpectedPolicy):
    """Knows the job's true size and the exact backlogs: a strong reference, not a
    learner (it reads what no deployed dispatcher can)."""

    name = "myopic-oracle"
    oracle = True
    knows_size = True
    knows_backlogs = True


class SizeOraclePolicy(MyopicExpectedPolicy):
    """Knows the job's true size only; queued work as the observation estimates it."""

    name = "myopic-oracle-size"
    oracle = True
    knows_size = True


class BacklogOraclePolicy(MyopicExpectedPolicy):
    """Knows the exact backlogs only; the waiting job as a mean (or declared) one."""

    name = "myopic-oracle-backlogs"
    oracle = True
    knows_backlogs = True


DISPATCHERS: dict[str, type[_Dispatcher]] = {
    dispatcher.name: dispatcher
    for dispatcher in (
        RandomPolicy,
        RoundRobinPolicy,
        JSQPolicy,
        TwoTierPolicy,
        PowerOfTwoPolicy,
        SEDPolicy,
        CheapestRegionPolicy,
        GreenestRegionPolicy,
        MyopicExpectedPolicy,
        MyopicOraclePolicy,
        SizeOraclePolicy,
        BacklogOraclePolicy,
    )
}
"""Every dispatcher by its name, the one list of them: the config allows these names
(`choices.DISPATCHERS`); each takes the sim it acts on (and `seed=` where it draws)."""
choices.DISPATCHERS.implemented_by(DISPATCHERS, lambda dispatcher: dispatcher.oracle)

ORACLES: frozenset[str] = frozenset(name for name, d in DISPATCHERS.items() if d.oracle)
"""Dispatchers that read hidden state: references, never competitors."""
