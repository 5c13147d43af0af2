"""The world's own dispatch rules, compiled beside it: shortest expected delay (the
warm-up's rule), the worst valid node (where a masked action's job is served) and the
immediate weighted cost of every action (the myopic dispatchers' and oracles' prices).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedmc_flwr.sim import compile_cache
from fedmc_flwr.sim.serving import (
    background_of,
    job_outcome,
    num_regions,
    pace_of,
    served,
    site_of,
    weighted_cost,
)

# before the first @njit below: numba picks a function's cache locator when decorating it
compile_cache.install()


@njit(cache=True)
def worst_valid(b, state, statics):
    """The valid node where env b's job costs most (all nodes if none is valid)."""
    mask = state.mask
    n_nodes = mask.shape[1]
    any_valid = False
    for n in range(n_nodes):
        any_valid = any_valid or mask[b, n]
    worst, worst_cost = 0, -np.inf
    for n in range(n_nodes):
        if any_valid and not mask[b, n]:
            continue
        score = weighted_cost(statics, job_outcome(b, n, state, statics))
        if score > worst_cost:
            worst, worst_cost = n, score
    return worst


@njit(cache=True)
def shortest_expected_delay(b, state, statics):
    """The valid node of shortest expected delay for env b's job, on the true state."""
    speed, rtt = statics.speed, statics.rtt_s
    mask, backlog, size = state.mask, state.backlog, state.size
    s, c = state.clock[b, 0], state.clock[b, 1]
    best, best_delay = 0, np.inf
    for n in range(mask.shape[1]):
        if not mask[b, n]:
            continue
        r = n // statics.nodes_per_region
        rate = speed[n] * (1.0 - background_of(statics, r, s, c))
        delay = rtt[state.ingress[b], r] + (backlog[b, n] + size[b]) / rate
        if delay < best_delay:
            best, best_delay = n, delay
    return best


@njit(cache=True, _nrt=False)
def dispatch_cost_kernel(
    clock, backlog, count, size, ingress, segment, t, slow_until, mask, out, statics
):
    """Immediate weighted cost of every action for every env's pending job (inf if masked).

    It takes the job sizes and backlogs as arrays of their own, not the `State`, so that the
    caller can price the job as the observation knows it (declared size, mean jobs). A
    slowed node is priced at its pace, which the observation shows (`up`).
    Region by region: what every node of a region shares (`Site`: its time of day, price,
    carbon, free share) is worked out once per region, not once per node, with the same
    arithmetic as `outcome`. Compiled without reference counting, as `step_envs` is and
    for its reason: the loop allocates nothing, and with it each (env, node) paid atomic
    increments and decrements for every array `served` unpacks."""
    per_region = statics.nodes_per_region
    for b in range(out.shape[0]):
        s, c = clock[b, 0], clock[b, 1]
        for r in range(num_regions(statics)):  # nodes are numbered region by region
            site = site_of(statics, r, ingress[b], s, c, segment[b])
            for n in range(r * per_region, (r + 1) * per_region):
                if not mask[b, n]:
                    out[b, n] = np.inf
                    continue
                pace = pace_of(statics, slow_until[b, n], t[b])
                job = served(statics, site, n, size[b], backlog[b, n], count[b, n], pace)
                out[b, n] = weighted_cost(statics, job)
