"""What a privileged critic reads beside the observation: the simulation's hidden state.

In simulation the critic may know what no deployed policy can (the asymmetric, or
privileged, actor-critic): the waiting job's true size and the exact work queued at each
node, which the world keeps and the observation only estimates (queue lengths of
mean-size jobs). The critic only shapes the advantages of training; the actor, the part
that is exported and deployed, reads the observation alone, so what it learns can act
where nothing hidden is known.

Why these: a job's reward is mostly its own latency, which its size and the backlog it
joins decide. A critic that knows them predicts each step's reward far better, and the
advantage, the reward's surprise beyond the critic's prediction, loses the noise of
sizes no action could have changed.

Four numbers per world, on scales near 1 without running statistics (so nothing more
travels with the weights): the waiting job's size in mean jobs; the least and the mean
immediate weighted cost over the valid nodes (`MultiCloudSim.dispatch_costs`, what the
reward will be, on the reward's own scale, capped at `COST_CAP`); the mean exact backlog
over the nodes, in tens of mean jobs.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedmc_flwr.config import PPOConfig
from fedmc_flwr.sim import compile_cache
from fedmc_flwr.sim.world import MultiCloudSim

compile_cache.install()  # before the first @njit: numba picks the cache locator then

WIDTH = 4
"""Privileged inputs per world."""
COST_CAP = 10.0
"""Immediate costs above this (a node far behind) count as this: the mean stays on scale."""


def width(ppo: PPOConfig) -> int:
    """Privileged inputs per world a learner of these settings reads (0: none)."""
    return WIDTH if ppo.privileged_critic else 0


def privileged_inputs(sim: MultiCloudSim) -> np.ndarray:
    """`[B, WIDTH]` float32: the hidden state each world's critic reads (see the module).

    In place, on the one `[B, A]` cost array: on a 10,000-node estate every pass over it
    is 80,000 values a step. The least cost is taken before the cap (masked actions are
    inf, and every world has a valid node), which is the least capped cost exactly; the
    mean multiplies the capped costs by the mask (x 1.0 or x 0.0, exact) rather than
    selecting them. Compiled (`hidden_state`): numpy's dozen calls on a `[64, 18]` estate cost
    the learner some 30 us a step, 3 ms a rollout. Its sums are numpy's own (`_sum`), so
    the numbers are those numpy gave bit for bit."""
    state = sim.state
    out = np.empty((sim.num_envs, WIDTH), dtype=np.float32)
    costs = sim.dispatch_costs()
    hidden_state(state.size, costs, state.mask, state.backlog, sim.spec.mean_service_s, out)
    return out


@njit(cache=True, error_model="numpy")
def hidden_state(
    size: np.ndarray,
    costs: np.ndarray,
    valid: np.ndarray,
    backlog: np.ndarray,
    mean_job: float,
    out: np.ndarray,
) -> None:
    """`privileged_inputs`' numbers into `out`, world by world: numpy's arithmetic (a
    world with no valid node divides by 0 as numpy does), the float64 results rounded to
    float32 as numpy's assignment rounds them."""
    batch, actions = costs.shape
    for b in range(batch):
        out[b, 0] = size[b] / mean_job
        least = np.inf
        live = 0
        for a in range(actions):
            least = min(least, costs[b, a])
            costs[b, a] = min(costs[b, a], COST_CAP) * valid[b, a]
            live += valid[b, a]
        out[b, 1] = min(least, COST_CAP)
        out[b, 2] = _sum(costs[b]) / live
        out[b, 3] = _sum(backlog[b]) / backlog.shape[1] / (10.0 * mean_job)


@njit(cache=True)
def _sum(row: np.ndarray) -> float:
    """`row.sum()` as numpy takes it, bit for bit: the reduction starts from 0.0 and adds
    numpy's pairwise sum (`pairwise_sum` in its `loops_utils.h.src`: under 8 values one
    after another from -0.0; up to 128 in 8 interleaved partial sums, joined as a tree,
    then the rest; beyond, the two halves, split at a multiple of 8, each summed so)."""
    return 0.0 + _pairwise(row)


@njit(cache=True)
def _pairwise(row: np.ndarray) -> float:
    n = len(row)
    if n < 8:
        total = -0.0
        for i in range(n):
            total += row[i]
        return total
    if n <= 128:
        r0, r1, r2, r3 = row[0], row[1], row[2], row[3]
        r4, r5, r6, r7 = row[4], row[5], row[6], row[7]
        i = 8
        while i < n - n % 8:
            r0, r1, r2, r3 = r0 + row[i], r1 + row[i + 1], r2 + row[i + 2], r3 + row[i + 3]
            r4, r5, r6, r7 = r4 + row[i + 4], r5 + row[i + 5], r6 + row[i + 6], r7 + row[i + 7]
            i += 8
        total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            total += row[i]
            i += 1
        return total
    half = n // 2
    half -= half % 8
    return _pairwise(row[:half]) + _pairwise(row[half:])
