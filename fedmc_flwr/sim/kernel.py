"""The compiled entry points of MultiCloudSim (numba, no Python objects): reset a batch's
envs, and step every env of a batch in one call, on one thread or several.

The world's parts are modules of their own: `records` (the named tuples every kernel
takes), `streams` (each env's random stream), `dynamics` (arrivals, queues, outages and
slowdowns between two jobs), `serving` (what serving a job at a node comes to, and the
reward's formula), `observation` (what a dispatcher sees and may choose) and `dispatch`
(the world's own rules: the warm-up's shortest expected delay, the worst valid node, the
myopic costs). Numba inlines across them, so the split costs nothing at run time
(`bench/bench_sim.py --against`).

No free drops. A job sent to a masked node (or an action out of range) is served at the
valid node where its immediate weighted cost is highest, with that node's real latency,
cost, carbon and energy and its load added: an invalid action never scores better than the
worst way of serving the job.

Episode start. `reset_kernel` puts each env's clock at its phase of the day (drawn from the
env's own stream unless given) and lets the world dispatch `warmup_jobs` jobs by itself,
each to the valid node of shortest expected delay on the true state (RTT from the ingress
+ (backlog + job size) / effective rate), before the first job a policy sees.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from fedmc_flwr.sim import compile_cache
from fedmc_flwr.sim.dispatch import shortest_expected_delay, worst_valid
from fedmc_flwr.sim.dynamics import admit, advance
from fedmc_flwr.sim.observation import observe
from fedmc_flwr.sim.records import (
    CARBON_G,
    COST_USD,
    ENERGY_KWH,
    LATENCY_MS,
    SLO_VIOLATION,
    Outcome,
)
from fedmc_flwr.sim.serving import job_outcome, segment_at, traced, weighted_cost
from fedmc_flwr.sim.streams import SALT_START, side_uniform, uniform

# before the first @njit below: numba picks a function's cache locator when decorating it
compile_cache.install()


@njit(cache=True)
def reset_kernel(envs, phases, state, statics):
    """Restart the listed envs at their phase of the day, warm them up, observe them.

    `phases[j]` is env `envs[j]`'s start as a fraction of the day, NaN to take the uniform
    its stream draws first (drawn in either case, so an explicit phase equal to the drawn
    one gives the same trajectory). A trace-driven world then draws the env's start
    point in the trace beside the stream (a side draw, which moves no later draw). Then
    `warmup_jobs` jobs go, one by one as they arrive, to the valid node of shortest
    expected delay; none is scored.
    """
    t, clock = state.t, state.clock
    ring_size = state.ring.shape[2]
    warmup = statics.warmup_jobs
    for j in range(envs.shape[0]):
        b = envs[j]
        drawn = uniform(state.rng, b)
        phase = drawn if math.isnan(phases[j]) else phases[j]
        t[b] = phase * statics.diurnal_period_s
        if traced(statics):  # a start point of the trace, read beside the stream
            u = side_uniform(state.rng, b, SALT_START)
            start = float(math.floor(u * statics.trace_starts)) * statics.trace_start_unit_s
            on_clock = statics.trace_on_clock
            state.origin[b] = start if on_clock else start - t[b] * statics.trace_speedup
            state.segment[b] = segment_at(state.origin[b], t[b], statics)
        theta = 2.0 * math.pi * phase
        clock[b, 0] = math.sin(theta)
        clock[b, 1] = math.cos(theta)
        state.backlog[b, :] = 0.0
        state.head[b, :] = 0
        state.next_done[b, :] = np.inf
        state.count[b, :] = 0
        state.down_until[b, :] = 0.0
        state.slow_until[b, :] = 0.0
        state.burst[b, :] = 0
        for w in range(warmup + 1):
            if w > 0:  # dispatch the waiting job by shortest expected delay, unscored
                n = shortest_expected_delay(b, state, statics)
                if state.count[b, n] < ring_size:
                    admit(b, n, job_outcome(b, n, state, statics).sojourn_s, state)
            advance(b, state, statics)
            observe(b, state, state.obs, state.mask, statics)


@njit(cache=True, inline="always")
def _step_env(b, actions, state, out, statics):
    """Env b: dispatch its waiting job to its action, then advance to its next job."""
    mask, metrics = state.mask, out.metrics
    a = actions[b]
    n = a
    bad = not (0 <= a < mask.shape[1] and mask[b, a])
    if bad:  # no free drops: served where it costs most
        n = worst_valid(b, state, statics)
    full = state.count[b, n] >= state.ring.shape[2]
    if full:  # no live node has room: refused, scored at the worst
        n = worst_valid(b, state, statics)
    job = job_outcome(b, n, state, statics)
    if full:  # a violation, whatever the worst node's latency
        job = Outcome(job.latency_s, 1.0, job.cost_usd, job.energy_kwh, job.carbon_g, job.sojourn_s)
    else:
        admit(b, n, job.sojourn_s, state)
    out.invalid[b] = bad
    out.refused[b] = full
    metrics[b, LATENCY_MS] = job.latency_s * 1000.0
    metrics[b, SLO_VIOLATION] = job.violation
    metrics[b, COST_USD] = job.cost_usd
    metrics[b, CARBON_G] = job.carbon_g
    metrics[b, ENERGY_KWH] = job.energy_kwh
    out.reward[b] = -weighted_cost(statics, job)
    advance(b, state, statics)
    observe(b, state, out.obs, out.mask, statics)


@njit(cache=True, _nrt=False)
def step_envs(first, stop, actions, state, out, statics):
    """`_step_env` for envs `first` to `stop - 1`: the loop of both step kernels.

    Compiled without numba's reference counting (`_nrt=False`, which numba's own parfor
    bodies also run without): the loop allocates nothing, but with it every env's
    iteration paid atomic increments and decrements for the arrays its inlined helpers
    unpack and pass on, about 3x the cost of the env's own arithmetic."""
    for b in range(first, stop):
        _step_env(b, actions, state, out, statics)


@njit(cache=True, _nrt=False)
def step_kernel(actions, state, out, statics):
    """Dispatch every env's pending job to its action, then advance to the next job.

    `state.mask` is the mask the actions were chosen under; the next job's observation and
    mask go to `out.obs` and `out.mask`; `out.invalid[b]` and `out.refused[b]` say whether
    the job just dispatched had a masked action (it went to the worst valid node), or found
    no room anywhere (see the module docstring). One thread: on several threads the parallel
    kernel's idle workers spin after each call, which on a busy machine steals the CPU from
    the learner's work between steps.
    """
    # np.int64(0), not 0: numba would type the literal as a signature of its own, and
    # compile the loop twice, once for each kernel
    step_envs(np.int64(0), actions.shape[0], actions, state, out, statics)


@njit(cache=True, parallel=True)
def step_kernel_parallel(actions, state, out, statics, shares):
    """`step_kernel` on `numba.set_num_threads` threads, for large batches.

    The batch is cut into `shares` contiguous shares of envs (one per thread), and each
    share runs the serial kernel's own loop (`step_envs`, one call per share). The caller
    gives the count: read inside, `numba.get_num_threads` would make the kernel
    uncachable. Each env touches only its
    own rows, so the result is the same bit for bit on any number of threads
    (`tests/test_world.py` compares the kernels).

    Why shares, not a `prange` over the envs: inlined into a `prange` body, some of the
    env step's writes through the named tuples' fields were lost (numba 0.68.1), and
    called once per env instead, the call with its reference counting cost more than the
    env's own work, so two threads ran slower than one. The share's bounds are int64:
    numba types a `prange` index as int64 while typing the loop and as uint64 while
    lowering it, and `step_envs` would otherwise be compiled for both.
    """
    envs = actions.shape[0]
    shares = max(1, min(envs, shares))
    for k in prange(shares):
        first = np.int64(k) * envs // shares
        stop = (np.int64(k) + 1) * envs // shares
        step_envs(first, stop, actions, state, out, statics)
