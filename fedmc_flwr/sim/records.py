"""The named tuples every kernel takes, laid out by `world.MultiCloudSim` and read by field
name: `State` (what moves), `StepOut` (what a step writes besides) and `Statics` (the
world's parameters, as gymnax's `EnvParams`: `statics.slo_s`, `statics.w_latency`, each
region's `statics.price_mean[r]`). What serving a job at a node comes to is an `Outcome`
(latency, violation, cost, energy, carbon, sojourn), and what every node of a region
shares for it a `Site`. Numba compiles a named tuple as a plain tuple, so a name costs
nothing at run time.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


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
    lognormal_sigma: float
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
    log_delay: bool
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
    (`weighted_cost`) and the step's metrics report."""

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
    """What every node of one region shares for one env's job now: the terms of `served`
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
