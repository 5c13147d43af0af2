"""What a dispatcher sees of env b's waiting job and where it may send it: the
observation's rows (`layout.py`) and the mask.

Masks and admission. A node is offered while it is live and holds fewer than
`queue_capacity` jobs. When every live node is that full, the mask falls back to the live
nodes whose ring has room (the ring holds `queue_capacity` plus some headroom, see
`signals.hard_capacity`), so an admitted job is always counted. In the pathological case
where no live node has room at all, the mask offers every live node and the job is
refused: it adds no load and no completion, and scores as if served at the worst valid
node, with an SLO violation. A slowed node stays offered; only its `up` says so.
"""

from __future__ import annotations

import math

from numba import njit

from fedmc_flwr.sim import compile_cache
from fedmc_flwr.sim.layout import (
    BACKGROUND,
    CARBON,
    CLOCK_COS,
    CLOCK_SIN,
    EXPECTED_DELAY,
    LOCAL,
    NODE_WIDTH,
    POWER,
    PRICE,
    PRICE_MULT,
    QUEUE,
    RTT,
    SPEED,
    UP,
)
from fedmc_flwr.sim.serving import background_of, held, local_day, num_regions, pace_of, price_of

# before the first @njit below: numba picks a function's cache locator when decorating it
compile_cache.install()


@njit(cache=True, inline="always")
def observe(b, state, obs, mask, statics):
    """Write env b's observation (the rows of `layout.py`) and mask (fallbacks: see above)
    into `obs` and `mask`: the state's own at a reset, a step's `StepOut` after a step.

    The expected delay prices the waiting job as a mean job, or at its declared size when
    jobs declare theirs (`declared_size`); the undeclared formula is kept as it was so
    that worlds without declarations stay the same bit for bit."""
    speed, power, price_mult = statics.speed, statics.power_w, statics.price_mult
    rtt, per_region = statics.rtt_s, statics.nodes_per_region
    t, count, down_until = state.t[b], state.count, state.down_until
    slow_until = state.slow_until
    n_nodes = count.shape[1]
    ring_size = state.ring.shape[2]
    capacity = statics.queue_capacity
    s, c = state.clock[b, 0], state.clock[b, 1]
    any_valid = False
    for n in range(n_nodes):
        valid = down_until[b, n] <= t and count[b, n] < capacity
        mask[b, n] = valid
        any_valid = any_valid or valid
    if not any_valid:  # every live node is full: admit into the headroom rather than drop
        for n in range(n_nodes):
            valid = down_until[b, n] <= t and count[b, n] < ring_size
            mask[b, n] = valid
            any_valid = any_valid or valid
    if not any_valid:  # no room anywhere: every live node (the job will be refused)
        for n in range(n_nodes):
            mask[b, n] = down_until[b, n] <= t
    i = state.ingress[b]
    declares = statics.declared_size
    k = state.segment[b]
    for r in range(num_regions(statics)):  # nodes are numbered region by region
        day = local_day(statics, r, s, c)
        price = price_of(statics, r, day, k)
        if statics.trace_carbon:
            carbon = held(statics.carbon, statics.carbon_len, r, k)
        else:
            carbon = statics.carbon_mean[r] * (1.0 - statics.carbon_swing[r] * day)
        background = background_of(statics, r, s, c)
        busy = statics.mean_service_s / (1.0 - background)
        job = state.declared[b] / (1.0 - background) if declares else 0.0
        link = rtt[i, r]
        local = 1.0 if r == i else 0.0
        for n in range(r * per_region, (r + 1) * per_region):
            o = n * NODE_WIDTH
            queue = count[b, n]
            obs[b, o + QUEUE] = queue
            obs[b, o + UP] = pace_of(statics, slow_until[b, n], t) if down_until[b, n] <= t else 0.0
            if declares:
                delay = link + (queue * busy + job) / speed[n]
            else:
                delay = link + (queue + 1.0) * (busy / speed[n])
            if statics.log_delay:
                delay = math.log1p(delay / statics.mean_service_s)
            obs[b, o + EXPECTED_DELAY] = delay
            obs[b, o + PRICE] = price
            obs[b, o + CARBON] = carbon
            obs[b, o + BACKGROUND] = background
            obs[b, o + SPEED] = speed[n]
            obs[b, o + POWER] = power[n]
            obs[b, o + PRICE_MULT] = price_mult[n]
            obs[b, o + RTT] = link
            obs[b, o + LOCAL] = local
    g = n_nodes * NODE_WIDTH
    obs[b, g + CLOCK_SIN] = s
    obs[b, g + CLOCK_COS] = c
