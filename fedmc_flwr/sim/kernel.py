"""Compiled inner loops of MultiCloudSim (numba, no Python objects).

One call steps every environment of a batch. Each environment owns a counter-based
random stream (splitmix64 over a per-env state word), so an environment's trajectory
depends only on its seed and its actions, never on the batch size or the order of the
loop. Queues are FCFS: a node's unfinished work follows Lindley's recursion (exact
waiting times), and a ring of predicted completion times (float64) gives its job count.

Masks and admission. A node is offered while it is live and holds fewer than
`queue_capacity` jobs. When every live node is that full, the mask falls back to the live
nodes whose ring has room (the ring holds `queue_capacity` plus some headroom, see
`signals.hard_capacity`), so an admitted job is always counted. In the pathological case
where no live node has room at all, the mask offers every live node and the job is
refused: it adds no load and no completion, and scores as if served at the worst valid
node, with an SLO violation.

No free drops. A job sent to a masked node (or an action out of range) is served at the
valid node where its immediate weighted cost is highest, with that node's real latency,
cost, carbon and energy and its load added: an invalid action never scores better than the
worst way of serving the job.

Episode start. `reset_kernel` puts each env's clock at its phase of the day (drawn from the
env's own stream unless given) and lets the world dispatch `warmup_jobs` jobs by itself,
each to the valid node of shortest expected delay on the true state (RTT from the ingress
+ (backlog + job size) / effective rate), before the first job a policy sees.

Every kernel takes three named tuples, laid out by `world.MultiCloudSim` and read by
field name: `State` (what moves), `StepOut` (what a step writes besides) and `Statics`
(the world's parameters, as gymnax's `EnvParams`: `statics.slo_s`, `statics.w_latency`,
each region's `statics.price_mean[r]`). What serving a job at a node comes to is an
`Outcome` (latency, violation, cost, energy, carbon, sojourn), and `_weighted_cost` is the
reward's one formula over it. Numba compiles a named tuple as a plain tuple, so a name
costs nothing at run time.

Trace-driven worlds (`sources.py`). A world whose rate, price or carbon follows a real
series reads it piecewise constant, one value per trace step: env b is in trace second
`origin[b] + t * speedup`, its step `segment[b]`. With a rate series, the next arrival
inverts the integral of the piecewise-constant rate step by step (one uniform), which is
exact for a non-homogeneous Poisson process; the burst state scales it as before. Every
trace branch tests a flag of the statics (`trace_rate`, ...), so a synthetic world runs the
arithmetic it always did.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from fedmc_flwr.sim import compile_cache
from fedmc_flwr.sim.layout import (
    BACKGROUND,
    CARBON,
    CLOCK_COS,
    CLOCK_SIN,
    EXPECTED_DELAY,
    LOCAL,
    MAX_BACKGROUND,
    NODE_WIDTH,
    POWER,
    PRICE,
    PRICE_MULT,
    QUEUE,
    RTT,
    SPEED,
    UP,
)

# before the first @njit below: numba picks a function's cache locator when decorating it
compile_cache.install()


class Statics(NamedTuple):
    """The world's parameters by name: what a world is, as opposed to where it stands.

    `world.pack_statics` fills them: every field that `signals.WorldSpec` holds under the
    same name as it is there (its docstrings say what each means), the others derived.
    Every scalar has the type its annotation says, so that every world hands the kernels
    one numba type. [N] per node, [R] per region."""

    # as `signals.WorldSpec` has them
    speed: np.ndarray
    power_w: np.ndarray
    price_mult: np.ndarray
    rtt_s: np.ndarray
    nodes_per_region: int
    price_mean: np.ndarray
    price_swing: np.ndarray
    carbon_mean: np.ndarray
    carbon_swing: np.ndarray
    background_mean: np.ndarray
    background_swing: np.ndarray
    burstiness: np.ndarray
    region_outage: np.ndarray
    mean_service_s: float
    pareto_alpha: float
    slo_s: float
    queue_threshold: int
    queue_capacity: int
    warmup_jobs: int
    diurnal_period_s: float
    arrival_swing: float
    outage_mean_s: float
    slowdown_rate: float
    slowdown_mean_s: float
    slowdown_share: float
    declared_size: bool
    declared_size_error: float
    cost_ref_usd: float
    carbon_ref_g: float

    # derived from the spec, the world's constants and the arena
    node_region: np.ndarray
    """[N] each node's region."""
    cos_phase: np.ndarray
    """[R] cos of each region's phase of the day."""
    sin_phase: np.ndarray
    """[R] sin of each region's phase of the day."""
    arrival_rate: np.ndarray
    """[R] each region's mean arrival rate, jobs/s (scaled down together in the arena)."""
    outage_rate: float
    """Chance per job that some node goes down: every node's rate, summed."""
    egress_usd: float
    """Charge of sending a job to another region than its own, USD."""
    pue: float
    """Power usage effectiveness of every datacentre."""
    burst_share: float
    """Long-run share of a region's jobs that arrive in a burst."""
    burst_exit: float
    """Chance per job of a region that its burst ends."""
    joint: bool
    """Every region's workload arrives at once (the joint arena)."""

    # the reward's weights, one `w_<term>` per field of `RewardWeights`
    w_latency: float
    w_violations: float
    w_cost: float
    w_carbon: float

    # the trace a world replays (`sources.TraceSignals`; all off in a synthetic world)
    trace_rate: bool
    """The arrival rates follow `rate` (else the synthetic daily cycle)."""
    trace_price: bool
    """The prices follow `price`."""
    trace_carbon: bool
    """The carbon intensities follow `carbon`."""
    trace_jobs: bool
    """The job sizes are drawn from `job_size` (else from `pareto_alpha`'s law)."""
    trace_step_s: float
    """Length of one step of the traces, trace seconds."""
    trace_speedup: float
    """Trace seconds per world second."""
    trace_starts: int
    """How many start points an episode may draw in the trace."""
    trace_start_unit_s: float
    """Trace seconds between two start points."""
    trace_on_clock: bool
    """The trace follows the world's clock (`trace_time: day`), else the episode's start."""
    # The real series a trace-driven world replays, one value per trace step (placeholders
    # when it has none): region r's is `values[r, :len[r]]` and wraps (`sources.Grid`).
    # Flat fields, not a tuple of their own: the parallel kernel takes no nested tuple.
    rate: np.ndarray
    """[R, T] mean-one shape of each region's arrival rate."""
    rate_len: np.ndarray
    price: np.ndarray
    """[R, T] USD per hour of a speed-1.0 node."""
    price_len: np.ndarray
    carbon: np.ndarray
    """[R, T] gCO2eq/kWh."""
    carbon_len: np.ndarray
    job_size: np.ndarray
    """[J] the log's job sizes, mean one, by region and step (`sources.JobSizes`)."""
    job_start: np.ndarray
    """[R, K + 1] where region r's jobs of step k start in `job_size`."""


class State(NamedTuple):
    """A batch's mutable arrays (B envs, N nodes, R regions): everything that moves, one
    argument of every kernel, so that a kernel reads `state.backlog[b, n]` by name and
    `MultiCloudSim.get_state` saves it field by field."""

    t: np.ndarray
    """[B] each env's clock, s."""
    clock: np.ndarray
    """[B, 2] sin and cos of each env's time of day."""
    backlog: np.ndarray
    """[B, N] each node's unfinished work, s at unit speed (Lindley's recursion)."""
    ring: np.ndarray
    """[B, N, C] each node's predicted completion times, a ring of C slots."""
    next_done: np.ndarray
    """[B, N] each node's earliest predicted completion (inf when idle)."""
    head: np.ndarray
    """[B, N] each ring's first occupied slot."""
    count: np.ndarray
    """[B, N] jobs at each node."""
    down_until: np.ndarray
    """[B, N] the time each node comes back up (<= now when it is up)."""
    slow_until: np.ndarray
    """[B, N] the time each slowed node regains its speed (<= now at full speed)."""
    rng: np.ndarray
    """[B] each env's random stream word (uint64)."""
    burst: np.ndarray
    """[B, R] each region's burst state, 0 or 1."""
    size: np.ndarray
    """[B] the waiting job's true size, s at unit speed."""
    declared: np.ndarray
    """[B] the size the waiting job declares (`world.declared_size`)."""
    ingress: np.ndarray
    """[B] the waiting job's region of arrival."""
    obs: np.ndarray
    """[B, D] float32 observation of the waiting job (the rows of `layout.py`)."""
    mask: np.ndarray
    """[B, N] bool: the nodes the waiting job may go to."""
    origin: np.ndarray
    """[B] the trace second at world time 0 (trace-driven worlds; 0 otherwise)."""
    segment: np.ndarray
    """[B] the trace step each env is in now (before wrapping; trace-driven worlds)."""


class StepOut(NamedTuple):
    """What one step writes besides the state, and what `MultiCloudSim.step` returns: the
    next job's view and the dispatched job's outcome (the step reads `State.mask`, so the
    next mask goes here, not there)."""

    obs: np.ndarray
    """[B, D] float32 observation of the next job's arrival."""
    mask: np.ndarray
    """[B, N] bool: the nodes the next job may go to."""
    reward: np.ndarray
    """[B] float64 reward of the job just dispatched: minus its weighted cost."""
    metrics: np.ndarray
    """[B, 5] float64 real-unit metrics of the job just dispatched (columns METRIC_NAMES:
    latency ms, violation, cost USD, carbon g, energy kWh)."""
    invalid: np.ndarray
    """[B] bool: the action was masked, so the job went to the worst valid node."""
    refused: np.ndarray
    """[B] bool: no live node had room, so the job was refused."""


class Outcome(NamedTuple):
    """What serving one job at one node comes to, in SI units: what the reward weighs
    (`_weighted_cost`) and the step's metrics report."""

    latency_s: float
    """Round trip from the ingress, wait in the queue and service."""
    violation: float
    """1.0 if the job misses the SLO or finds the queue over its threshold, else 0.0."""
    cost_usd: float
    """The node's price for the service time, and the egress charge if it left its region."""
    energy_kwh: float
    """The node's power over the service time, times the PUE."""
    carbon_g: float
    """The energy at the region's grid carbon intensity."""
    sojourn_s: float
    """Wait and service: when the node will be done with the job, from now."""


class Site(NamedTuple):
    """What every node of one region shares for one env's job now: the terms of `_served`
    that depend on the region, its clock and trace step, not on the node."""

    free: float
    """The share of a node's speed other tenants leave (1 - background)."""
    link: float
    """Round-trip time from the job's ingress region, seconds."""
    remote: bool
    """The region is not the job's own (the egress charge applies)."""
    price: float
    """Hourly price of a speed-1.0 node."""
    carbon: float
    """The carbon intensity's level: the trace's value, or the region's mean."""
    carbon_day: float
    """Its daily factor: 1.0 under a trace, else 1 - swing x the local time of day."""


# columns of the per-step metrics array
LATENCY_MS, SLO_VIOLATION, COST_USD, CARBON_G, ENERGY_KWH = range(5)
METRIC_NAMES = ("latency_ms", "slo_violation", "cost_usd", "carbon_g", "energy_kwh")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_INV_2_53 = 1.0 / 9007199254740992.0
_SALT_RADIUS = np.uint64(0xD1B54A32D192ED03)  # two odd words for the side draws
_SALT_ANGLE = np.uint64(0x8CB92BA72F3D8DD7)
_SALT_START = np.uint64(0x5851F42D4C957F2D)  # and one for a trace's start point


@njit(cache=True, inline="always")
def _mix(z):
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@njit(cache=True, inline="always")
def _unit(z):
    """A uniform in (0, 1) from one 64-bit state word (its mix's top 53 bits)."""
    return ((_mix(z) >> _S11) + 0.5) * _INV_2_53


@njit(cache=True, inline="always")
def _uniform(rng, b):
    """Next uniform in (0, 1) of env b's stream."""
    z = rng[b] + _GOLDEN
    rng[b] = z
    return _unit(z)


@njit(cache=True)
def seed_streams(seeds, rng):
    """Derive every env's stream state from its seed (one splitmix round, twice mixed)."""
    for b in range(seeds.shape[0]):
        rng[b] = _mix(_mix(np.uint64(seeds[b]) + _GOLDEN) + _GOLDEN)


@njit(cache=True, inline="always")
def _job_size(rng, b, statics):
    u = _uniform(rng, b)
    alpha = statics.pareto_alpha
    if alpha > 0.0:
        scale = statics.mean_service_s * (alpha - 1.0) / alpha
        return scale * u ** (-1.0 / alpha)
    return -statics.mean_service_s * math.log(u)


@njit(cache=True, inline="always")
def _side_uniform(rng, b, salt):
    """A uniform in (0, 1) read beside env b's stream without advancing it: a function of
    the stream's state and `salt` alone, so drawing it changes no later draw."""
    return _unit(rng[b] ^ salt)


@njit(cache=True, inline="always")
def _declare(rng, b, statics, size):
    """The size a job declares: its true size times a mean-one log-normal error of sigma
    `declared_size_error` (Box-Muller from two side draws, so the jobs, arrivals and
    outages of a world are the same whatever its declarations)."""
    sigma = statics.declared_size_error
    if sigma <= 0.0:
        return size
    radius = math.sqrt(-2.0 * math.log(_side_uniform(rng, b, _SALT_RADIUS)))
    z = radius * math.cos(2.0 * math.pi * _side_uniform(rng, b, _SALT_ANGLE))
    return size * math.exp(sigma * z - 0.5 * sigma * sigma)


@njit(cache=True, inline="always")
def _background(statics, r, s, c):
    day = _local_day(statics, r, s, c)
    share = statics.background_mean[r] * (1.0 + statics.background_swing[r] * day)
    return min(max(share, 0.0), MAX_BACKGROUND)


@njit(cache=True, inline="always")
def _num_regions(statics):
    return statics.rtt_s.shape[0]


@njit(cache=True, inline="always")
def _local_day(statics, r, s, c):
    """sin of region r's local time of day, from the global clock's sin and cos."""
    return s * statics.cos_phase[r] + c * statics.sin_phase[r]


@njit(cache=True, inline="always")
def _traced(statics):
    """Whether any signal of the world follows a trace."""
    return statics.trace_rate or statics.trace_price or statics.trace_carbon or statics.trace_jobs


@njit(cache=True, inline="always")
def _segment_at(origin, now, statics):
    """The trace step an env of this `origin` is in at world time `now`."""
    return math.floor((origin + now * statics.trace_speedup) / statics.trace_step_s)


@njit(cache=True, inline="always")
def _segment_end(origin, k, statics):
    """The world time at which trace step k of an env of this `origin` ends."""
    return ((k + 1) * statics.trace_step_s - origin) / statics.trace_speedup


@njit(cache=True, inline="always")
def _held(series, lengths, r, k):
    """Region r's value of a piecewise-constant series in trace step k (it wraps)."""
    return series[r, k % lengths[r]]


@njit(cache=True, inline="always")
def _price(statics, r, day, k):
    """Region r's hourly price of a speed-1.0 node: its trace's, or its daily cycle's."""
    if statics.trace_price:
        return _held(statics.price, statics.price_len, r, k)
    return statics.price_mean[r] * (1.0 + statics.price_swing[r] * day)


@njit(cache=True, inline="always")
def _site(statics, r, ingress, s, c, k):
    """The `Site` of region r for a job from region `ingress` at clock (s, c), trace step k."""
    day = _local_day(statics, r, s, c)
    if statics.trace_carbon:
        carbon, carbon_day = _held(statics.carbon, statics.carbon_len, r, k), 1.0
    else:
        carbon, carbon_day = statics.carbon_mean[r], 1.0 - statics.carbon_swing[r] * day
    return Site(
        1.0 - _background(statics, r, s, c),
        statics.rtt_s[ingress, r],
        r != ingress,
        _price(statics, r, day, k),
        carbon,
        carbon_day,
    )


@njit(cache=True, inline="always")
def _served(statics, site, n, size, backlog, count, pace):
    """The `Outcome` of a job of this `size` at node n of `site`'s region, which holds
    `backlog` seconds of work in `count` jobs and runs at `pace` of its speed (`_pace`).
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
def _pace(statics, slow_until, now):
    """The share of its speed a node serves at `now`: `slowdown_share` until `slow_until`,
    then all of it. The work a slowed node drains and the jobs it is given both run at
    this pace; a job keeps the completion time priced when it was dispatched, as it keeps
    the background load of that moment."""
    return statics.slowdown_share if slow_until > now else 1.0


@njit(cache=True, inline="always")
def _outcome(b, n, ingress, size, clock, backlog, count, statics, k, pace):
    """The `Outcome` of sending env b's job of this `size` to node n (in trace step k)."""
    site = _site(statics, n // statics.nodes_per_region, ingress, clock[b, 0], clock[b, 1], k)
    return _served(statics, site, n, size, backlog[b, n], count[b, n], pace)


@njit(cache=True, inline="always")
def _job_outcome(b, n, state, statics):
    """`_outcome` of env b's waiting job on node n, on the true state."""
    return _outcome(
        b,
        n,
        state.ingress[b],
        state.size[b],
        state.clock,
        state.backlog,
        state.count,
        statics,
        state.segment[b],
        _pace(statics, state.slow_until[b, n], state.t[b]),
    )


@njit(cache=True, inline="always")
def _weighted_cost(statics, outcome):
    """The reward's terms, each normalised and weighted: the reward is minus their sum."""
    return (
        statics.w_latency * outcome.latency_s / statics.slo_s
        + statics.w_violations * outcome.violation
        + statics.w_cost * outcome.cost_usd / statics.cost_ref_usd
        + statics.w_carbon * outcome.carbon_g / statics.carbon_ref_g
    )


@njit(cache=True, inline="always")
def _observe(b, state, obs, mask, statics):
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
    for r in range(_num_regions(statics)):  # nodes are numbered region by region
        day = _local_day(statics, r, s, c)
        price = _price(statics, r, day, k)
        if statics.trace_carbon:
            carbon = _held(statics.carbon, statics.carbon_len, r, k)
        else:
            carbon = statics.carbon_mean[r] * (1.0 - statics.carbon_swing[r] * day)
        background = _background(statics, r, s, c)
        busy = statics.mean_service_s / (1.0 - background)
        job = state.declared[b] / (1.0 - background) if declares else 0.0
        link = rtt[i, r]
        local = 1.0 if r == i else 0.0
        for n in range(r * per_region, (r + 1) * per_region):
            o = n * NODE_WIDTH
            queue = count[b, n]
            obs[b, o + QUEUE] = queue
            obs[b, o + UP] = _pace(statics, slow_until[b, n], t) if down_until[b, n] <= t else 0.0
            if declares:
                obs[b, o + EXPECTED_DELAY] = link + (queue * busy + job) / speed[n]
            else:
                obs[b, o + EXPECTED_DELAY] = link + (queue + 1.0) * (busy / speed[n])
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


@njit(cache=True, inline="always")
def _admit(b, n, sojourn, state):
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


@njit(cache=True)
def _worst_valid(b, state, statics):
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
        score = _weighted_cost(statics, _job_outcome(b, n, state, statics))
        if score > worst_cost:
            worst, worst_cost = n, score
    return worst


@njit(cache=True)
def _shortest_expected_delay(b, state, statics):
    """The valid node of shortest expected delay for env b's job, on the true state."""
    speed, rtt = statics.speed, statics.rtt_s
    mask, backlog, size = state.mask, state.backlog, state.size
    s, c = state.clock[b, 0], state.clock[b, 1]
    best, best_delay = 0, np.inf
    for n in range(mask.shape[1]):
        if not mask[b, n]:
            continue
        r = n // statics.nodes_per_region
        rate = speed[n] * (1.0 - _background(statics, r, s, c))
        delay = rtt[state.ingress[b], r] + (backlog[b, n] + size[b]) / rate
        if delay < best_delay:
            best, best_delay = n, delay
    return best


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
    return statics.arrival_rate[r] * mult * (1.0 + swing * _local_day(statics, r, s, c))


@njit(cache=True, inline="always")
def _trace_rate(statics, burst, b, r, k):
    """Region r's arrival rate (jobs/s) in env b in trace step k: its mean, its burst
    state, its trace's shape."""
    mult = _burst_mult(statics, burst, b, r)
    return statics.arrival_rate[r] * mult * _held(statics.rate, statics.rate_len, r, k)


@njit(cache=True, inline="always")
def _offered_in(statics, burst, b, k, i):
    """The rate env b's next job comes at in trace step k: region i's, or (i < 0, joint)
    every region's together."""
    if i >= 0:
        return _trace_rate(statics, burst, b, i, k)
    total = 0.0
    for r in range(_num_regions(statics)):
        total += _trace_rate(statics, burst, b, r, k)
    return total


@njit(cache=True, inline="always")
def _trace_arrival(state, statics, b, i):
    """World time and trace step of env b's next arrival under the trace's rate (region
    i's, or every region's for i < 0): an Exp(1) need spent step by step against the
    integral of the piecewise-constant rate, so the arrival is exact (one uniform)."""
    origin = state.origin[b]
    need = -math.log(_uniform(state.rng, b))
    now = state.t[b]
    k = _segment_at(origin, now, statics)
    while True:
        rate = _offered_in(statics, state.burst, b, k, i)
        room = _segment_end(origin, k, statics) - now
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
    u = _uniform(state.rng, b)
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
        if _uniform(rng, b) < statics.burst_exit:
            burst[b, r] = 0
    elif _uniform(rng, b) < statics.burst_exit * share / (1.0 - share):
        burst[b, r] = 1


@njit(cache=True, inline="always")
def _trace_advance(state, statics, b):
    """`_advance`'s arrival under a rate trace: the time to env b's next job, and (joint)
    whose it is, picked by the regions' rates in the step it arrives in."""
    rng, burst, ingress = state.rng, state.burst, state.ingress
    if statics.joint:
        arrival, k = _trace_arrival(state, statics, b, -1)
        target = _uniform(rng, b) * _offered_in(statics, burst, b, k, -1)
        nregions = _num_regions(statics)
        i, acc = nregions - 1, 0.0
        for r in range(nregions):
            acc += _trace_rate(statics, burst, b, r, k)
            if target < acc:
                i = r
                break
        ingress[b] = i
        _step_burst(rng, b, burst, i, statics)
    else:
        _step_burst(rng, b, burst, ingress[b], statics)
        arrival, _ = _trace_arrival(state, statics, b, ingress[b])
    return arrival - state.t[b]


@njit(cache=True, inline="always")
def _advance(b, state, statics):
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
    nregions = _num_regions(statics)
    if statics.trace_rate:
        dt = _trace_advance(state, statics, b)
    elif statics.joint:
        total = 0.0
        for r in range(nregions):
            total += _arrival_rate(statics, burst, b, r, s, c)
        dt = -math.log(_uniform(rng, b)) / total
        target = _uniform(rng, b) * total
        i, acc = nregions - 1, 0.0
        for r in range(nregions):
            acc += _arrival_rate(statics, burst, b, r, s, c)
            if target < acc:
                i = r
                break
        ingress[b] = i
        _step_burst(rng, b, burst, i, statics)
    else:
        i = ingress[b]
        _step_burst(rng, b, burst, i, statics)
        dt = -math.log(_uniform(rng, b)) / _arrival_rate(statics, burst, b, i, s, c)
    before = t[b]
    now = before + dt
    t[b] = now
    n_nodes = backlog.shape[1]
    per_region = n_nodes // nregions
    capacity = ring.shape[2]
    for r in range(nregions):  # nodes are numbered region by region
        free = 1.0 - _background(statics, r, s, c)
        for n in range(r * per_region, (r + 1) * per_region):
            pace = _pace(statics, slow_until[b, n], before)
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
    if _uniform(rng, b) < statics.outage_rate:  # some node goes down, by its region's weight
        total = 0.0
        for r in range(nregions):
            total += statics.region_outage[r] * per_region
        # Inverse CDF over the nodes. With every weight 1 the partial sums are the integers,
        # so the node is int(u * n_nodes): the same draw as an estate with one rate.
        target = _uniform(rng, b) * total
        n, acc = n_nodes - 1, 0.0
        for m in range(n_nodes):
            acc += statics.region_outage[m // per_region]
            if target < acc:
                n = m
                break
        duration = -statics.outage_mean_s * math.log(_uniform(rng, b))
        up = 0
        for m in range(n_nodes):
            if down_until[b, m] <= now:
                up += 1
        if down_until[b, n] <= now and up > 1:  # never take the last live node down
            down_until[b, n] = now + duration
    # Drawn only in a world with slowdowns, so that the others keep their streams.
    if statics.slowdown_rate > 0.0 and _uniform(rng, b) < statics.slowdown_rate:
        n = min(int(_uniform(rng, b) * n_nodes), n_nodes - 1)
        until = now - statics.slowdown_mean_s * math.log(_uniform(rng, b))
        slow_until[b, n] = max(slow_until[b, n], until)
    if _traced(statics):
        state.segment[b] = _segment_at(state.origin[b], now, statics)
    size[b] = _logged_size(state, statics, b) if statics.trace_jobs else _job_size(rng, b, statics)
    if statics.declared_size:
        state.declared[b] = _declare(rng, b, statics, size[b])


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
        drawn = _uniform(state.rng, b)
        phase = drawn if math.isnan(phases[j]) else phases[j]
        t[b] = phase * statics.diurnal_period_s
        if _traced(statics):  # a start point of the trace, read beside the stream
            u = _side_uniform(state.rng, b, _SALT_START)
            start = float(math.floor(u * statics.trace_starts)) * statics.trace_start_unit_s
            on_clock = statics.trace_on_clock
            state.origin[b] = start if on_clock else start - t[b] * statics.trace_speedup
            state.segment[b] = _segment_at(state.origin[b], t[b], statics)
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
                n = _shortest_expected_delay(b, state, statics)
                if state.count[b, n] < ring_size:
                    _admit(b, n, _job_outcome(b, n, state, statics).sojourn_s, state)
            _advance(b, state, statics)
            _observe(b, state, state.obs, state.mask, statics)


@njit(cache=True, inline="always")
def _step_env(b, actions, state, out, statics):
    """Env b: dispatch its waiting job to its action, then advance to its next job."""
    mask, metrics = state.mask, out.metrics
    a = actions[b]
    n = a
    bad = not (0 <= a < mask.shape[1] and mask[b, a])
    if bad:  # no free drops: served where it costs most
        n = _worst_valid(b, state, statics)
    full = state.count[b, n] >= state.ring.shape[2]
    if full:  # no live node has room: refused, scored at the worst
        n = _worst_valid(b, state, statics)
    job = _job_outcome(b, n, state, statics)
    if full:  # a violation, whatever the worst node's latency
        job = Outcome(job.latency_s, 1.0, job.cost_usd, job.energy_kwh, job.carbon_g, job.sojourn_s)
    else:
        _admit(b, n, job.sojourn_s, state)
    out.invalid[b] = bad
    out.refused[b] = full
    metrics[b, LATENCY_MS] = job.latency_s * 1000.0
    metrics[b, SLO_VIOLATION] = job.violation
    metrics[b, COST_USD] = job.cost_usd
    metrics[b, CARBON_G] = job.carbon_g
    metrics[b, ENERGY_KWH] = job.energy_kwh
    out.reward[b] = -_weighted_cost(statics, job)
    _advance(b, state, statics)
    _observe(b, state, out.obs, out.mask, statics)


@njit(cache=True, _nrt=False)
def _step_envs(first, stop, actions, state, out, statics):
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
    _step_envs(np.int64(0), actions.shape[0], actions, state, out, statics)


@njit(cache=True, parallel=True)
def step_kernel_parallel(actions, state, out, statics, shares):
    """`step_kernel` on `numba.set_num_threads` threads, for large batches.

    The batch is cut into `shares` contiguous shares of envs (one per thread), and each
    share runs the serial kernel's own loop (`_step_envs`, one call per share). The caller
    gives the count: read inside, `numba.get_num_threads` would make the kernel
    uncachable. Each env touches only its
    own rows, so the result is the same bit for bit on any number of threads
    (`tests/test_world.py` compares the kernels).

    Why shares, not a `prange` over the envs: inlined into a `prange` body, some of the
    env step's writes through the named tuples' fields were lost (numba 0.68.1), and
    called once per env instead, the call with its reference counting cost more than the
    env's own work, so two threads ran slower than one. The share's bounds are int64:
    numba types a `prange` index as int64 while typing the loop and as uint64 while
    lowering it, and `_step_envs` would otherwise be compiled for both.
    """
    envs = actions.shape[0]
    shares = max(1, min(envs, shares))
    for k in prange(shares):
        first = np.int64(k) * envs // shares
        stop = (np.int64(k) + 1) * envs // shares
        _step_envs(first, stop, actions, state, out, statics)


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
    arithmetic as `_outcome`. Compiled without reference counting, as `_step_envs` is and
    for its reason: the loop allocates nothing, and with it each (env, node) paid atomic
    increments and decrements for every array `_served` unpacks."""
    per_region = statics.nodes_per_region
    for b in range(out.shape[0]):
        s, c = clock[b, 0], clock[b, 1]
        for r in range(_num_regions(statics)):  # nodes are numbered region by region
            site = _site(statics, r, ingress[b], s, c, segment[b])
            for n in range(r * per_region, (r + 1) * per_region):
                if not mask[b, n]:
                    out[b, n] = np.inf
                    continue
                pace = _pace(statics, slow_until[b, n], t[b])
                job = _served(statics, site, n, size[b], backlog[b, n], count[b, n], pace)
                out[b, n] = _weighted_cost(statics, job)
