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

from fedmc_flwr.config import PPOConfig
from fedmc_flwr.sim.world import MultiCloudSim

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
    selecting them, and sums the same values in the same order."""
    state = sim.state
    mean_job = sim.spec.mean_service_s
    costs = sim.dispatch_costs()
    valid = state.mask
    out = np.empty((sim.num_envs, WIDTH), dtype=np.float32)
    out[:, 0] = state.size / mean_job
    out[:, 1] = np.minimum(costs.min(axis=1), COST_CAP)
    np.minimum(costs, COST_CAP, out=costs)
    costs *= valid
    out[:, 2] = costs.sum(axis=1) / valid.sum(axis=1)
    out[:, 3] = state.backlog.mean(axis=1) / (10.0 * mean_job)
    return out
