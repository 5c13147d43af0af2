"""What serving one job at one node comes to: the region's site at the job's time (its
free share, price, carbon and link from the ingress), the node's pace (a slowed node's
share of its speed), the `Outcome` in SI units, and the reward's one formula over it
(`weighted_cost`). A trace-driven world reads its price and carbon piecewise constant,
one value per trace step (`segment_at`).
"""

from __future__ import annotations

import math

from numba import njit

from fedmc_flwr.sim import compile_cache
from fedmc_flwr.sim.layout import MAX_BACKGROUND
from fedmc_flwr.sim.records import Outcome, Site

# before the first @njit below: numba picks a function's cache locator when decorating it
compile_cache.install()


@njit(cache=True, inline="always")
def background_of(statics, r, s, c):
    day = local_day(statics, r, s, c)
    share = statics.background_mean[r] * (1.0 + statics.background_swing[r] * day)
    return min(max(share, 0.0), MAX_BACKGROUND)


@njit(cache=True, inline="always")
def num_regions(statics):
    return statics.rtt_s.shape[0]


@njit(cache=True, inline="always")
def local_day(statics, r, s, c):
    """sin of region r's local time of day, from the global clock's sin and cos."""
    return s * statics.cos_phase[r] + c * statics.sin_phase[r]


@njit(cache=True, inline="always")
def traced(statics):
    """Whether any signal of the world follows a trace."""
    return statics.trace_rate or statics.trace_price or statics.trace_carbon or statics.trace_jobs


@njit(cache=True, inline="always")
def segment_at(origin, now, statics):
    """The trace step an env of this `origin` is in at world time `now`."""
    return math.floor((origin + now * statics.trace_speedup) / statics.trace_step_s)


@njit(cache=True, inline="always")
def segment_end(origin, k, statics):
    """The world time at which trace step k of an env of this `origin` ends."""
    return ((k + 1) * statics.trace_step_s - origin) / statics.trace_speedup


@njit(cache=True, inline="always")
def held(series, lengths, r, k):
    """Region r's value of a piecewise-constant series in trace step k (it wraps)."""
    return series[r, k % lengths[r]]


@njit(cache=True, inline="always")
def price_of(statics, r, day, k):
    """Region r's hourly price of a speed-1.0 node: its trace's, or its daily cycle's."""
    if statics.trace_price:
        return held(statics.price, statics.price_len, r, k)
    return statics.price_mean[r] * (1.0 + statics.price_swing[r] * day)


@njit(cache=True, inline="always")
def site_of(statics, r, ingress, s, c, k):
    """The `Site` of region r for a job from region `ingress` at clock (s, c), trace step k."""
    day = local_day(statics, r, s, c)
    if statics.trace_carbon:
        carbon, carbon_day = held(statics.carbon, statics.carbon_len, r, k), 1.0
    else:
        carbon, carbon_day = statics.carbon_mean[r], 1.0 - statics.carbon_swing[r] * day
    return Site(
        1.0 - background_of(statics, r, s, c),
        statics.rtt_s[ingress, r],
        r != ingress,
        price_of(statics, r, day, k),
        carbon,
        carbon_day,
    )


@njit(cache=True, inline="always")
def served(statics, site, n, size, backlog, count, pace):
    """The `Outcome` of a job of this `size` at node n of `site`'s region, which holds
    `backlog` seconds of work in `count` jobs and runs at `pace` of its speed (`pace`).
    The carbon is `energy * carbon * carbon_day` in that order: a trace's intensity times
    1.0 is the product `energy * intensity` exactly, so traced and synthetic worlds keep
    their arithmetic; so does a pace of 1.0 with the speed."""
    rate = statics.speed[n] * pace * site.free
    wait = backlog / rate
    busy = size / rate
    latency = site.link + wait + busy
    violation = 1.0 if (latency > statics.slo_s or count >= statics.queue_threshold) else 0.0
    cost = site.price * statics.price_mult[n] * busy / 3600.0
    if site.remote:
        cost += statics.egress_usd
    energy = statics.power_w[n] * busy * statics.pue / 3.6e6
    carbon = energy * site.carbon * site.carbon_day
    return Outcome(latency, violation, cost, energy, carbon, wait + busy)


@njit(cache=True, inline="always")
def pace_of(statics, slow_until, now):
    """The share of its speed a node serves at `now`: `slowdown_share` until `slow_until`,
    then all of it. The work a slowed node drains and the jobs it is given both run at
    this pace; a job keeps the completion time priced when it was dispatched, as it keeps
    the background load of that moment."""
    return statics.slowdown_share if slow_until > now else 1.0


@njit(cache=True, inline="always")
def outcome(b, n, ingress, size, clock, backlog, count, statics, k, pace):
    """The `Outcome` of sending env b's job of this `size` to node n (in trace step k)."""
    site = site_of(statics, n // statics.nodes_per_region, ingress, clock[b, 0], clock[b, 1], k)
    return served(statics, site, n, size, backlog[b, n], count[b, n], pace)


@njit(cache=True, inline="always")
def job_outcome(b, n, state, statics):
    """`outcome` of env b's waiting job on node n, on the true state."""
    return outcome(
        b,
        n,
        state.ingress[b],
        state.size[b],
        state.clock,
        state.backlog,
        state.count,
        statics,
        state.segment[b],
        pace_of(statics, state.slow_until[b, n], state.t[b]),
    )


@njit(cache=True, inline="always")
def weighted_cost(statics, outcome):
    """The reward's terms, each normalised and weighted: the reward is minus their sum."""
    return (
        statics.w_latency * outcome.latency_s / statics.slo_s
        + statics.w_violations * outcome.violation
        + statics.w_cost * outcome.cost_usd / statics.cost_ref_usd
        + statics.w_carbon * outcome.carbon_g / statics.carbon_ref_g
    )
