"""The exact optimal dispatcher where one exists: Poisson arrivals, a few exponential servers.

Why: a learner's lead over a dispatcher says nothing about how far it is from the best
policy. On one small family of estates the best policy can be computed exactly: jobs
arrive as a Poisson process (rate `lambda`), each is sent on arrival to one of K FCFS
servers of exponential service rates `mu_i`, and the dispatcher sees the queue lengths.
Then the queue lengths are a continuous-time Markov decision process, and the policy that
minimises the mean response time is the one that minimises the mean number in system
(Little's law: `E[T] = E[L] / lambda`).

How (each step from the queueing literature):

- Uniformisation (Lippman 1975): with `Lambda = lambda + sum(mu)` the process is a
  discrete-time chain that moves at rate `Lambda`; a departure from an empty queue and an
  arrival that finds every queue full are self-loops.
- Truncation: queue i holds at most `caps[i]` jobs; a full queue cannot be chosen, and
  an arrival that finds every queue full is lost. `QueueingSystem.doubled` is the check
  that the truncation does not matter: solve again with every cap doubled.
- Relative value iteration for the average cost (Puterman 1994, section 8.5): with the
  cost rate `c(x) = sum(x)`,
  `h'(x) = [c(x) + lambda min_i h(x + e_i) + sum_i mu_i h(x - e_i)] / Lambda - h'(0)`.
  `min` and `max` of `h' - h` bound the optimal average cost over `Lambda` (Odoni's
  bounds), so the answer comes with an interval, and the iteration stops when it is
  narrow.
- A fixed dispatch rule (`RULES`: SED, JSQ, uniform random; or any policy array, the
  optimal one included) is evaluated by the same iteration with its own choice in place
  of the `min`, on the same truncated chain, so every rule is compared on one footing.
  Ties are shared uniformly, as the dispatchers in `policies/heuristics.py` break them;
  `sed_slower_ties` is SED that sends them to the slower server instead, a stronger rule.

What it is checked against (`tests/test_optimum.py`): one server is M/M/1; random dispatch
splits the arrivals into independent M/M/1 queues; with equal speeds the optimum is JSQ
(Winston 1977); at very low load the optimum is SED. With unequal speeds the optimum is a
switching curve (Hajek 1984): SED is close, not optimal, and the gap grows with the
speed ratio and the load.

`TableDispatcher` runs a policy array in `MultiCloudSim` (one region whose nodes are the
servers), so the world and the solver can be checked against each other.

numpy only: the sim layer never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fedmc_flwr.sim.layout import ObsLayout

RULES = ("sed", "jsq", "random")
"""The dispatch rules `evaluate` knows by name, as `policies/heuristics.py` has them."""
TIE_TOLERANCE = 1e-9
"""Relative difference under which two scores tie (`(x_i + 1) / mu_i` in floating point)."""


@dataclass(frozen=True)
class QueueingSystem:
    """K exponential FCFS servers fed by one Poisson stream, truncated for the solver."""

    rates: tuple[float, ...]
    """Service rate of each server (jobs per unit time)."""
    arrival_rate: float
    """Poisson arrival rate `lambda`, below the total service rate."""
    caps: tuple[int, ...]
    """Most jobs queue i may hold (in service included): the truncation."""

    def __post_init__(self) -> None:
        if not self.rates or len(self.caps) != len(self.rates):
            raise ValueError(f"need one cap per server: rates {self.rates}, caps {self.caps}")
        if min(self.rates) <= 0 or min(self.caps) < 1:
            raise ValueError(f"rates must be > 0 and caps >= 1: {self.rates}, {self.caps}")
        if not 0 < self.arrival_rate < sum(self.rates):
            raise ValueError(
                f"arrival rate {self.arrival_rate} must lie in (0, {sum(self.rates)}) for a "
                "stable system"
            )

    @classmethod
    def at_load(
        cls, speeds: Sequence[float], load: float, caps: int | Sequence[int]
    ) -> QueueingSystem:
        """Servers of these speeds (mean service time 1 at speed 1) offered `load` of their
        total capacity; `caps` one cap for all or one per server."""
        rates = tuple(float(s) for s in speeds)
        caps = (int(caps),) * len(rates) if np.isscalar(caps) else tuple(int(c) for c in caps)
        return cls(rates, load * sum(rates), caps)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c + 1 for c in self.caps)

    def doubled(self) -> QueueingSystem:
        """The same system truncated at twice every cap: the truncation's check."""
        return replace(self, caps=tuple(2 * c for c in self.caps))


@dataclass(frozen=True)
class Evaluation:
    """A policy's long-run performance on the truncated chain."""

    rule: str
    mean_jobs: float
    """Mean number of jobs in the system (the average cost), midpoint of its bounds."""
    mean_response: float
    """Mean response time, `mean_jobs / lambda` (Little's law; the jobs lost when every
    queue is full are too few to count at a truncation that passes the doubling check),
    in the rates' time unit."""
    response_bounds: tuple[float, float]
    """Odoni's lower and upper bounds on the mean response time when the iteration stopped."""
    iterations: int
    policy: np.ndarray | None = None
    """For the optimum: the server each state sends an arrival to (-1 where every queue
    is full), indexed by the queue lengths."""


class _Chain:
    """The uniformised chain's neighbours of a function h on the grid of queue lengths,
    into preallocated arrays (one relative value iteration is a few array copies)."""

    def __init__(self, system: QueueingSystem) -> None:
        self.system = system
        shape = system.shape
        self.cost = np.indices(shape).sum(axis=0).astype(np.float64)
        self.total_rate = system.arrival_rate + sum(system.rates)
        self.up = np.empty((len(shape), *shape))
        """`up[i]`: h(x + e_i); where queue i is full, what `fill_up` was told."""
        self.spare = np.empty(shape)
        self._cuts = []
        for axis in range(len(shape)):

            def cut(part: slice, axis: int = axis) -> tuple[slice, ...]:
                index = [slice(None)] * len(shape)
                index[axis] = part
                return tuple(index)

            # queue `axis` below its cap, above 0, at its cap, empty
            parts = (slice(0, -1), slice(1, None), slice(-1, None), slice(0, 1))
            self._cuts.append(tuple(cut(part) for part in parts))

    def fill_up(self, h: np.ndarray, at_cap: np.ndarray | float) -> np.ndarray:
        """`up` for this h, with `at_cap` (an array like h, or a number) where the queue is
        full."""
        for axis, (low, high, last, _) in enumerate(self._cuts):
            self.up[axis][low] = h[high]
            self.up[axis][last] = at_cap if np.isscalar(at_cap) else at_cap[last]
        return self.up

    def add_departures(self, h: np.ndarray, out: np.ndarray) -> None:
        """out += sum_i mu_i h(x - e_i), with h(x) where queue i is empty."""
        for rate, (low, high, _, empty) in zip(self.system.rates, self._cuts, strict=True):
            self.spare[high] = h[low]
            self.spare[empty] = h[empty]
            self.spare *= rate
            out += self.spare


def _iterate(
    system: QueueingSystem,
    arrival_term: Callable[[_Chain, np.ndarray], np.ndarray],
    tol: float,
    max_iterations: int,
    rule: str,
) -> tuple[Evaluation, np.ndarray, _Chain]:
    """Relative value iteration with `arrival_term(chain, h)` as the arrival's expected
    next value; stops when Odoni's bounds lie within `tol` of each other (relative)."""
    chain = _Chain(system)
    lam, total = system.arrival_rate, chain.total_rate
    h = np.zeros(system.shape)
    for iteration in range(1, max_iterations + 1):
        nxt = chain.cost + lam * arrival_term(chain, h)
        chain.add_departures(h, nxt)
        nxt /= total
        gain = nxt - h
        low, high = float(gain.min()), float(gain.max())
        h = nxt - nxt.flat[0]
        if high - low <= tol * high:
            bounds = (low * total / lam, high * total / lam)
            mean = 0.5 * (bounds[0] + bounds[1])
            evaluation = Evaluation(rule, mean * lam, mean, bounds, iteration)
            return evaluation, h, chain
    raise RuntimeError(
        f"relative value iteration for {rule} on {system} did not reach a relative "
        f"span of {tol} in {max_iterations} iterations"
    )


def optimal(
    system: QueueingSystem, tol: float = 1e-7, max_iterations: int = 2_000_000
) -> Evaluation:
    """The dispatch policy of least mean response time on the truncated chain, its value
    and its bounds."""

    def best(chain: _Chain, h: np.ndarray) -> np.ndarray:
        choice = chain.fill_up(h, np.inf).min(axis=0)
        return np.where(np.isinf(choice), h, choice)  # every queue full: the job is lost

    evaluation, h, chain = _iterate(system, best, tol, max_iterations, "optimal")
    scores = chain.fill_up(h, np.inf)
    policy = np.where(np.isinf(scores.min(axis=0)), -1, scores.argmin(axis=0))
    return replace(evaluation, policy=policy)


def rule_probabilities(system: QueueingSystem, rule: str | np.ndarray) -> np.ndarray:
    """`[K, *shape]`: the chance that an arrival in each state goes to each server under
    `rule` (a name of `RULES`, or a policy array as `optimal` returns). Full queues get 0;
    ties are shared equally; a state whose queues are all full sends nowhere (all 0)."""
    k = len(system.rates)
    lengths, full = _grid(system)
    if isinstance(rule, np.ndarray):
        if rule.shape != system.shape:
            raise ValueError(f"a policy array of shape {rule.shape}; expected {system.shape}")
        chosen = np.stack([rule == i for i in range(k)])
        if (chosen & full).any():
            raise ValueError("the policy sends a job to a full queue")
        return chosen.astype(np.float64)
    tied = _tied(system, rule, lengths, full)
    count = tied.sum(axis=0)
    return np.where(tied, 1.0 / np.maximum(count, 1), 0.0)


def _grid(system: QueueingSystem) -> tuple[np.ndarray, np.ndarray]:
    """`[K, *shape]` each: every state's queue lengths, and which queues are full."""
    lengths = np.indices(system.shape).astype(np.float64)
    full = np.stack([lengths[i] >= cap for i, cap in enumerate(system.caps)])
    return lengths, full


def _tied(system: QueueingSystem, rule: str, lengths: np.ndarray, full: np.ndarray) -> np.ndarray:
    """`[K, *shape]`: the servers whose score under `rule` is least in each state."""
    k = len(system.rates)
    rates = np.asarray(system.rates).reshape((k,) + (1,) * k)
    scores = {
        "sed": (lengths + 1.0) / rates,
        "jsq": lengths,
        "random": np.zeros_like(lengths),
    }
    if rule not in scores:
        raise ValueError(f"unknown rule {rule!r}; expected one of {RULES} or a policy array")
    score = np.where(full, np.inf, scores[rule])
    least = score.min(axis=0)
    return (score <= least + TIE_TOLERANCE * np.abs(least)) & ~full


def sed_slower_ties(system: QueueingSystem) -> np.ndarray:
    """SED that sends a tie to the slowest of the tied servers, as a policy array (-1
    where every queue is full). A tie means the job finishes as soon on either server;
    the slower one takes it and keeps the fast server free for the jobs behind, which
    makes this a stronger rule than SED's even split (at 2:1 it is the optimum at load
    0.5), and so a fairer bar for a learner."""
    k = len(system.rates)
    lengths, full = _grid(system)
    tied = _tied(system, "sed", lengths, full)
    rates = np.asarray(system.rates, dtype=np.float64).reshape((k,) + (1,) * k)
    slowest = np.where(tied, rates, np.inf).argmin(axis=0)
    return np.where(tied.any(axis=0), slowest, -1)


def evaluate(
    system: QueueingSystem,
    rule: str | np.ndarray,
    tol: float = 1e-7,
    max_iterations: int = 2_000_000,
) -> Evaluation:
    """A fixed dispatch rule's long-run performance on the truncated chain."""
    chance = rule_probabilities(system, rule)
    lost = 1.0 - chance.sum(axis=0)

    def follow(chain: _Chain, h: np.ndarray) -> np.ndarray:
        return np.einsum("k...,k...->...", chance, chain.fill_up(h, h)) + lost * h

    name = rule if isinstance(rule, str) else "policy"
    return _iterate(system, follow, tol, max_iterations, name)[0]


def mm1_response(rate: float, arrival_rate: float) -> float:
    """Mean response time of an M/M/1 queue, `1 / (mu - lambda)` (inf when unstable)."""
    return 1.0 / (rate - arrival_rate) if arrival_rate < rate else float("inf")


def split_response(rates: Sequence[float], shares: Sequence[float], arrival_rate: float) -> float:
    """Mean response time when each job goes to server i with chance `shares[i]`, whatever
    the queues (a Bernoulli split): independent M/M/1 queues, weighted by their shares."""
    return float(
        sum(
            p * mm1_response(mu, p * arrival_rate) for mu, p in zip(rates, shares, strict=True) if p
        )
    )


class TableDispatcher:
    """A policy array (`Evaluation.policy`) as a dispatcher of `MultiCloudSim`: an estate of
    one region whose nodes are the servers, in order. It reads each node's queue length
    from the observation and looks the server up, so it knows no more than the queue
    lengths, which is all the solver's state holds. A queue longer than the table's cap
    (a world deeper than the truncation) is read at the cap; where the table names no
    server or a masked one, the first valid node takes the job."""

    def __init__(self, policy: np.ndarray, layout: ObsLayout, name: str = "optimal") -> None:
        if layout.num_nodes != policy.ndim:
            raise ValueError(f"a table of {policy.ndim} servers on an estate of {layout.num_nodes}")
        self.name = name
        self.policy = policy
        self.queue = layout.node("queue")
        self.caps = np.array(policy.shape) - 1

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        lengths = np.minimum(obs[:, self.queue].astype(np.int64), self.caps)
        chosen = self.policy[tuple(lengths.T)]
        rows = np.arange(len(obs))
        usable = (chosen >= 0) & mask[rows, np.maximum(chosen, 0)]
        return np.where(usable, chosen, mask.argmax(axis=1)).astype(np.int64)
