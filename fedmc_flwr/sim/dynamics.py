"""What happens between two jobs: the next arrival, the clock, the queues' drain, outages
and slowdowns, and the next job's size.

Queues are FCFS: a node's unfinished work follows Lindley's recursion (exact waiting
times), and a ring of predicted completion times (float64) gives its job count.

Trace-driven worlds (`sources.py`). A world whose rate follows a real series reads it
piecewise constant, one value per trace step: env b is in trace second
`origin[b] + t * speedup`, its step `segment[b]`. The next arrival inverts the integral
of the piecewise-constant rate step by step (one uniform), which is exact for a
non-homogeneous Poisson process; the burst state scales it as before. Every trace branch
tests a flag of the statics (`trace_rate`, ...), so a synthetic world runs the arithmetic
it always did; so does a world without slowdowns, which draws nothing for them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from fedmc_flwr.sim import compile_cache
from fedmc_flwr.sim.serving import (
    background_of,
    held,
    local_day,
    num_regions,
    pace_of,
    segment_at,
    segment_end,
    traced,
)
from fedmc_flwr.sim.streams import SALT_ANGLE, SALT_RADIUS, SALT_SIZE, side_uniform, uniform

# before the first @njit below: numba picks a function's cache locator when decorating it
compile_cache.install()


@njit(cache=True, inline="always")
def _job_size(rng, b, statics):
    """One job's size, from one uniform of env b's stream (a log-normal takes its angle
    from a side draw, so every law advances the stream alike)."""
    u = uniform(rng, b)
    alpha = statics.pareto_alpha
    if alpha > 0.0:
        scale = statics.mean_service_s * (alpha - 1.0) / alpha
        return scale * u ** (-1.0 / alpha)
    sigma = statics.lognormal_sigma
    if sigma > 0.0:
        z = math.sqrt(-2.0 * math.log(u)) * math.cos(
            2.0 * math.pi * side_uniform(rng, b, SALT_SIZE)
        )
        return statics.mean_service_s * math.exp(sigma * z - 0.5 * sigma * sigma)
    return -statics.mean_service_s * math.log(u)


@njit(cache=True, inline="always")
def _declare(rng, b, statics, size):
    """The size a job declares: its true size times a mean-one log-normal error of sigma
    `declared_size_error` (Box-Muller from two side draws, so the jobs, arrivals and
    outages of a world are the same whatever its declarations)."""
    sigma = statics.declared_size_error
    if sigma <= 0.0:
        return size
    radius = math.sqrt(-2.0 * math.log(side_uniform(rng, b, SALT_RADIUS)))
    z = radius * math.cos(2.0 * math.pi * side_uniform(rng, b, SALT_ANGLE))
    return size * math.exp(sigma * z - 0.5 * sigma * sigma)


@njit(cache=True, inline="always")
def admit(b, n, sojourn, state):
    """Queue env b's job on node n: its work joins the backlog, its completion the ring."""
    ring, head, count = state.ring, state.head, state.count
    capacity = ring.shape[2]
    state.backlog[b, n] += state.size[b]
    k = count[b, n]
    slot = head[b, n] + k
    slot = slot - capacity if slot >= capacity else slot
    ring[b, n, slot] = state.t[b] + sojourn
    count[b, n] = k + 1
    if k == 0:
        state.next_done[b, n] = ring[b, n, slot]


@njit(cache=True, inline="always")
def _burst_mult(statics, burst, b, r):
    """Region r's rate multiplier in env b's burst state (it averages 1)."""
    share = statics.burst_share
    depth = statics.burstiness[r]
    return 1.0 + depth if burst[b, r] == 1 else 1.0 - depth * share / (1.0 - share)


@njit(cache=True, inline="always")
def _arrival_rate(statics, burst, b, r, s, c):
    """Region r's arrival rate (jobs/s) in env b now: its mean, its burst state, its day."""
    mult = _burst_mult(statics, burst, b, r)
    swing = statics.arrival_swing
    return statics.arrival_rate[r] * mult * (1.0 + swing * local_day(statics, r, s, c))


@njit(cache=True, inline="always")
def _trace_rate(statics, burst, b, r, k):
    """Region r's arrival rate (jobs/s) in env b in trace step k: its mean, its burst
    state, its trace's shape."""
    mult = _burst_mult(statics, burst, b, r)
    return statics.arrival_rate[r] * mult * held(statics.rate, statics.rate_len, r, k)


@njit(cache=True, inline="always")
def _offered_in(statics, burst, b, k, i):
    """The rate env b's next job comes at in trace step k: region i's, or (i < 0, joint)
    every region's together."""
    if i >= 0:
        return _trace_rate(statics, burst, b, i, k)
    total = 0.0
    for r in range(num_regions(statics)):
        total += _trace_rate(statics, burst, b, r, k)
    return total


@njit(cache=True, inline="always")
def _trace_arrival(state, statics, b, i):
    """World time and trace step of env b's next arrival under the trace's rate (region
    i's, or every region's for i < 0): an Exp(1) need spent step by step against the
    integral of the piecewise-constant rate, so the arrival is exact (one uniform)."""
    origin = state.origin[b]
    need = -math.log(uniform(state.rng, b))
    now = state.t[b]
    k = segment_at(origin, now, statics)
    while True:
        rate = _offered_in(statics, state.burst, b, k, i)
        room = segment_end(origin, k, statics) - now
        if room > 0.0:
            if rate * room >= need:
                return now + need / rate, k
            need -= rate * room
            now += room
        k += 1


@njit(cache=True, inline="always")
def _logged_size(state, statics, b):
    """A job of the log, at the world's mean service time: drawn uniformly (one uniform)
    from its region's jobs of the current trace step, or of the whole log where that
    step has none."""
    starts = statics.job_start
    u = uniform(state.rng, b)
    r = state.ingress[b]
    steps = starts.shape[1] - 1
    k = state.segment[b] % steps
    lo, hi = starts[r, k], starts[r, k + 1]
    if hi <= lo:
        lo, hi = starts[r, 0], starts[r, steps]
    j = lo + min(int(u * (hi - lo)), hi - lo - 1)
    return statics.mean_service_s * statics.job_size[j]


@njit(cache=True, inline="always")
def _step_burst(rng, b, burst, r, statics):
    """Move region r's burst chain in env b by one of its arrivals (one uniform)."""
    share = statics.burst_share
    if burst[b, r] == 1:
        if uniform(rng, b) < statics.burst_exit:
            burst[b, r] = 0
    elif uniform(rng, b) < statics.burst_exit * share / (1.0 - share):
        burst[b, r] = 1


@njit(cache=True, inline="always")
def _rate_now(statics, burst, b, r, k, s, c):
    """Region r's arrival rate in env b: its trace's in trace step k under a rate trace,
    else its daily cycle's at clock (s, c)."""
    if statics.trace_rate:
        return _trace_rate(statics, burst, b, r, k)
    return _arrival_rate(statics, burst, b, r, s, c)


@njit(cache=True, inline="always")
def _joint_ingress(state, statics, b, target, k, s, c):
    """Whose env b's joint arrival is: the first region whose running total of rates
    passes `target` (a uniform times the total), so a region's share of the jobs is its
    share of the rate; that region's burst chain moves."""
    nregions = num_regions(statics)
    i, acc = nregions - 1, 0.0
    for r in range(nregions):
        acc += _rate_now(statics, state.burst, b, r, k, s, c)
        if target < acc:
            i = r
            break
    state.ingress[b] = i
    _step_burst(state.rng, b, state.burst, i, statics)


@njit(cache=True, inline="always")
def _trace_advance(state, statics, b):
    """`advance`'s arrival under a rate trace: the time to env b's next job, and (joint)
    whose it is, picked by the regions' rates in the step it arrives in."""
    rng, burst, ingress = state.rng, state.burst, state.ingress
    if statics.joint:
        arrival, k = _trace_arrival(state, statics, b, -1)
        target = uniform(rng, b) * _offered_in(statics, burst, b, k, -1)
        _joint_ingress(state, statics, b, target, k, 0.0, 0.0)
    else:
        _step_burst(rng, b, burst, ingress[b], statics)
        arrival, _ = _trace_arrival(state, statics, b, ingress[b])
    return arrival - state.t[b]


@njit(cache=True, inline="always")
def advance(b, state, statics):
    """Draw the next arrival and move env b's clock, queues and outages up to it.

    One ingress: the job is that region's. Joint (`statics.joint`): every region's workload
    arrives at once, superposed, and the job is region r's with probability r's share of
    the total rate; `ingress[b]` becomes that region. A region's burst chain moves at each
    of its own arrivals in either case.
    """
    speed = statics.speed
    t, clock, backlog, rng, burst = state.t, state.clock, state.backlog, state.rng, state.burst
    ring, next_done, head, count = state.ring, state.next_done, state.head, state.count
    down_until, size, ingress = state.down_until, state.size, state.ingress
    slow_until = state.slow_until
    s, c = clock[b, 0], clock[b, 1]
    nregions = num_regions(statics)
    if statics.trace_rate:
        dt = _trace_advance(state, statics, b)
    elif statics.joint:
        total = 0.0
        for r in range(nregions):
            total += _arrival_rate(statics, burst, b, r, s, c)
        dt = -math.log(uniform(rng, b)) / total
        _joint_ingress(state, statics, b, uniform(rng, b) * total, 0, s, c)
    else:
        i = ingress[b]
        _step_burst(rng, b, burst, i, statics)
        dt = -math.log(uniform(rng, b)) / _arrival_rate(statics, burst, b, i, s, c)
    before = t[b]
    now = before + dt
    t[b] = now
    n_nodes = backlog.shape[1]
    per_region = n_nodes // nregions
    capacity = ring.shape[2]
    for r in range(nregions):  # nodes are numbered region by region
        free = 1.0 - background_of(statics, r, s, c)
        for n in range(r * per_region, (r + 1) * per_region):
            pace = pace_of(statics, slow_until[b, n], before)
            work = backlog[b, n] - speed[n] * pace * free * dt
            backlog[b, n] = work if work > 0.0 else 0.0
            if next_done[b, n] <= now:  # contiguous check first; the ring is strided
                k = count[b, n]
                h = head[b, n]
                while k > 0 and ring[b, n, h] <= now:
                    h = h + 1 if h + 1 < capacity else 0
                    k -= 1
                count[b, n] = k
                head[b, n] = h
                next_done[b, n] = ring[b, n, h] if k > 0 else np.inf
    theta = 2.0 * math.pi * now / statics.diurnal_period_s
    clock[b, 0] = math.sin(theta)
    clock[b, 1] = math.cos(theta)
    if uniform(rng, b) < statics.outage_rate:  # some node goes down, by its region's weight
        total = 0.0
        for r in range(nregions):
            total += statics.region_outage[r] * per_region
        # Inverse CDF over the nodes. With every weight 1 the partial sums are the integers,
        # so the node is int(u * n_nodes): the same draw as an estate with one rate.
        target = uniform(rng, b) * total
        n, acc = n_nodes - 1, 0.0
        for m in range(n_nodes):
            acc += statics.region_outage[m // per_region]
            if target < acc:
                n = m
                break
        duration = -statics.outage_mean_s * math.log(uniform(rng, b))
        up = 0
        for m in range(n_nodes):
            if down_until[b, m] <= now:
                up += 1
        if down_until[b, n] <= now and up > 1:  # never take the last live node down
            down_until[b, n] = now + duration
    # Drawn only in a world with slowdowns, so that the others keep their streams.
    if statics.slowdown_rate > 0.0 and uniform(rng, b) < statics.slowdown_rate:
        n = min(int(uniform(rng, b) * n_nodes), n_nodes - 1)
        until = now - statics.slowdown_mean_s * math.log(uniform(rng, b))
        slow_until[b, n] = max(slow_until[b, n], until)
    if traced(statics):
        state.segment[b] = segment_at(state.origin[b], now, statics)
    size[b] = _logged_size(state, statics, b) if statics.trace_jobs else _job_size(rng, b, statics)
    if statics.declared_size:
        state.declared[b] = _declare(rng, b, statics, size[b])
