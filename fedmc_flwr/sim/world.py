"""MultiCloudSim: a batch of multi-cloud estates stepped together, one job per step.

Every environment of the batch is one estate seen from one ingress region: jobs of that
region's own workload arrive one at a time, and each step dispatches the waiting job to
one node of the estate. The action is one integer over `regions * nodes_per_region`:
`region = a // nodes_per_region` (Tier 1, the load balancer) and
`node = a % nodes_per_region` (Tier 2, the scheduler).

Observation (float32, `obs_dim = N * NODE_WIDTH + GLOBAL_WIDTH` for N nodes): one row per
node, node-major and numbered region by region, then the global features. Defined once in
`layout.py` (`MultiCloudSim.layout` gives each feature's place; `layout.feature_list`
writes this list):

- node.queue (jobs): jobs in the node's queue (incl. in service)
- node.up (share): the share of its speed the node serves at: 1 when live,
  world.slowdown_share while slowed, 0 during an outage
- node.expected_delay (s): RTT from the ingress + queue mean jobs and the waiting job (a
  mean job, or its declared size with world.declared_size) at the node's effective speed
  (shortest expected delay's estimate); log(1 + it / the mean service time) with
  world.log_delay
- node.price (USD/h): hourly price of a speed-1.0 node in the node's region
- node.carbon (gCO2eq/kWh): grid carbon intensity of the node's region
- node.background (0..1): share of the region's capacity used by other tenants
- node.speed (x 1.0): relative service speed of the node's instance type (static)
- node.power (W): dynamic power of the node at full use (static)
- node.price_mult (x 1.0): the node's price over a speed-1.0 node's (static)
- node.rtt (s): round-trip time from the ingress region to the node's region (static)
- node.local (flag): 1 if the node sits in the ingress region
- global.clock_sin (-1..1): sin of the (compressed) time of day
- global.clock_cos (-1..1): cos of the (compressed) time of day

Episodes. `reset(seeds, phases=None)` starts env b at `phases[b]` of the (compressed)
day: its clock `t` starts at `phases[b] * diurnal_period_s`, and the sin/cos clock with it.
`phases=None` draws each env's phase uniformly from the env's own stream, so episodes
cover the whole day and stay reproducible per seed. Then the world dispatches
`world.warmup_jobs` jobs by itself, each to the valid node of shortest expected delay on
the true state (RTT from the ingress region + (backlog + job size) / effective rate), with
arrivals and outages evolving as usual; the first job a policy sees meets a busy estate.
Warm-up jobs count in no reward or metric. An env's trajectory depends only on its seed,
its phase and the actions it is given, never on the batch size.

Masks and admission. The mask excludes nodes in an outage and nodes holding
`queue_capacity` jobs. When every live node is that full, it falls back to the live nodes
with room in their completion ring (`spec.hard_capacity` jobs: `queue_capacity` plus
headroom), so every admitted job is counted in its node's queue. When no live node has
room at all (a pathological case: all but a few nodes down for long), the mask offers every
live node and the job is refused: it adds no load and is scored as if served at the worst
valid node, with an SLO violation (`StepResult.refused`).

No free drops. A job sent to a masked node (or an out-of-range action) is served at the
valid node where its immediate weighted cost is highest, the worst place, with that node's
real latency, cost, carbon and energy, and its load is added there
(`StepResult.invalid`): an invalid action never scores better than serving the job.

Offered load. Each ingress region's mean arrival rate times the mean service time, over
the estate's mean spare capacity (after other tenants), is its offered load; the busiest
region's is exactly `world.load`, the others' lower (bursts and the daily cycle average 1).

Joint arena (`joint=True`). Every region's workload arrives at the same estate at once:
the arrival processes are superposed and each job belongs to the region it arrived at
(`ingress[b]` is updated per job, and with it each node's `rtt` and `local` features), which is
what a deployment of one policy per region meets. Each region's rate is scaled by the same
factor, so that together they offer the estate `world.load`, what the busiest region
offers alone; at their own rates the regions would overload it (small_demo's sum to 1.81).

Approximations.

- Time-varying speed. Other tenants' load changes a node's effective speed through the
  day. A job's latency (and its predicted completion) is priced at the speed in force when
  it arrives, while the node's backlog drains at the changing speed (held constant between
  two arrivals). On small_demo (30 envs x 200 jobs, 6000 jobs per dispatcher), the priced
  sojourn differs from an exact integration of the changing speed by 0.05% on average
  (p99 0.4%, max 0.9%) under JSQ and 0.12% (p99 0.9%, max 2.8%) under random dispatch.
- Outages. A node that goes down stops receiving new jobs only, like a drained node: the
  jobs already queued on it keep being served, and complete when they would have.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence

import numba
import numpy as np

from fedmc_flwr.config import RewardWeights, WorldConfig
from fedmc_flwr.sim import kernel, state_file
from fedmc_flwr.sim.dispatch import dispatch_cost_kernel
from fedmc_flwr.sim.layout import ObsLayout
from fedmc_flwr.sim.records import METRIC_NAMES, State, Statics, StepOut
from fedmc_flwr.sim.signals import (
    BURST_EXIT,
    BURST_SHARE,
    EGRESS_USD_PER_JOB,
    PUE,
    WorldSpec,
    build_spec,
)
from fedmc_flwr.sim.sources import Grid, SignalSource, TraceSignals
from fedmc_flwr.sim.streams import seed_streams

StepResult = StepOut
"""What one batched step returns; every array is fresh (safe to keep)."""


def _trace_scalars(trace: TraceSignals | None) -> dict[str, object]:
    """The trace's flags and clock (a synthetic world's: every flag off)."""
    if trace is None:
        flags = ("trace_rate", "trace_price", "trace_carbon", "trace_jobs", "trace_on_clock")
        clock = ("trace_step_s", "trace_speedup", "trace_starts", "trace_start_unit_s")
        return dict.fromkeys(flags, False) | dict.fromkeys(clock, 0)
    return {
        "trace_rate": trace.rate is not None,
        "trace_price": trace.price is not None,
        "trace_carbon": trace.carbon is not None,
        "trace_jobs": trace.jobs is not None,
        "trace_step_s": trace.step_s,
        "trace_speedup": trace.speedup,
        "trace_starts": trace.starts,
        "trace_start_unit_s": trace.start_unit_s,
        "trace_on_clock": trace.on_clock,
    }


def _pack_traces(spec: WorldSpec) -> dict[str, np.ndarray]:
    """The trace's series as the kernel reads them (`Statics`' last fields);
    one-value placeholders (never read: their flags are off) for the signals that
    stay synthetic.

    Every array is made C-contiguous with the kernel's dtype: numba compiles a kernel
    once per argument layout, so a source handing over a transposed (Fortran-ordered)
    grid would cost every kernel a compile of its own, some 40 s on two cores."""
    regions = spec.num_regions
    trace = spec.trace
    placeholder = Grid(np.zeros((regions, 1)), np.ones(regions, dtype=np.int64))
    fields = {}
    for name in ("rate", "price", "carbon"):
        grid = None if trace is None else getattr(trace, name)
        grid = grid or placeholder
        fields[name] = np.ascontiguousarray(grid.values, dtype=np.float64)
        fields[f"{name}_len"] = np.ascontiguousarray(grid.lengths, dtype=np.int64)
    jobs = None if trace is None else trace.jobs
    sizes = np.ones(1) if jobs is None else jobs.sizes
    starts = np.tile([0, 1], (regions, 1)) if jobs is None else jobs.starts
    fields["job_size"] = np.ascontiguousarray(sizes, dtype=np.float64)
    fields["job_start"] = np.ascontiguousarray(starts, dtype=np.int64)
    return fields


_STATIC_TYPES = typing.get_type_hints(Statics)


def pack_statics(spec: WorldSpec, joint: bool) -> Statics:
    """The kernel's parameters of a world: every field of `Statics` that the spec
    holds under the same name (its reward weights as `w_<term>`), and the few derived here.

    Each scalar is converted to its annotated type (a flag to bool, a count to int), so
    that every world hands the kernels one numba type, whatever the spec's number types;
    each array is a C-ordered copy, which `replay_signals` may change without touching the
    spec. A new parameter is then a field of `WorldSpec` and one of `Statics` of the
    same name, and nothing here."""
    # Joint: the regions' workloads shrink in proportion until together they offer what
    # the busiest offers alone (`world.load`); at their own rates they would overload the
    # estate (small_demo's three sum to 1.81).
    share = spec.arrival_rate.max() / spec.arrival_rate.sum() if joint else 1.0
    derived = {
        "node_region": np.repeat(np.arange(spec.num_regions), spec.nodes_per_region),
        "cos_phase": np.cos(spec.phase),
        "sin_phase": np.sin(spec.phase),
        "arrival_rate": spec.arrival_rate * share,
        # Each node keeps its own rate, outage_rate / N times its region's multiplier: the
        # kernel draws one outage per job with their sum, then the node by its region's
        # weight.
        "outage_rate": spec.outage_rate * spec.region_outage.mean(),
        "egress_usd": EGRESS_USD_PER_JOB,
        "pue": PUE,
        "burst_share": BURST_SHARE,
        "burst_exit": BURST_EXIT,
        "joint": joint,
        **{f"w_{term}": weight for term, weight in spec.weights.items()},
        **_trace_scalars(spec.trace),
        **_pack_traces(spec),
    }
    fields = {}
    for name, kind in _STATIC_TYPES.items():
        value = derived[name] if name in derived else getattr(spec, name)
        fields[name] = np.array(value, order="C") if kind is np.ndarray else kind(value)
    return Statics(**fields)


class MultiCloudSim:
    """A batch of B independent estates (see the module docstring for the spec).

    `ingress[b]` is the region whose workload env b serves: a federated client passes its
    own region for every env; a centralised learner may mix regions in one batch.
    `joint=True` makes every env a joint arena (see the module docstring): all regions'
    workloads arrive at once, `ingress` only fills the array that then holds, per env,
    the region of the job now waiting, read it to know whose job it is.
    `threads` is how many threads one step may use: 1 by default, because learners and
    Flower clients already keep every core busy; large batches (about 1000 envs and more)
    gain from more, small ones lose to the cost of waking the threads. Results do not
    depend on it.
    `source` gives the world's real signals (`sources.py`); None reads the config's trace
    keys, and a config without them is the synthetic world.
    """

    def __init__(
        self,
        world: WorldConfig,
        reward: RewardWeights,
        ingress: Sequence[int] | np.ndarray,
        threads: int = 1,
        joint: bool = False,
        source: SignalSource | None = None,
    ) -> None:
        if not 1 <= threads <= numba.config.NUMBA_NUM_THREADS:
            raise ValueError(f"threads must lie in [1, {numba.config.NUMBA_NUM_THREADS}]")
        self.threads = threads
        self.spec = build_spec(world, reward, source)
        ingress = np.array(ingress, dtype=np.int64)  # a copy: the joint kernel writes it
        if ingress.ndim != 1 or len(ingress) == 0:
            raise ValueError("ingress must be a non-empty 1-D sequence of region indices")
        if ingress.min() < 0 or ingress.max() >= self.spec.num_regions:
            raise ValueError(f"ingress regions must lie in [0, {self.spec.num_regions})")
        self.num_envs = len(ingress)
        self.num_regions = self.spec.num_regions
        self.nodes_per_region = self.spec.nodes_per_region
        self.num_actions = self.spec.num_nodes
        self.layout = ObsLayout(self.num_actions, self.num_regions)
        self.obs_dim = self.layout.size
        self.joint = joint
        self._statics = pack_statics(self.spec, joint)
        b, n = self.num_envs, self.num_actions
        self.state = State(
            t=np.zeros(b),
            clock=np.zeros((b, 2)),
            backlog=np.zeros((b, n)),
            ring=np.zeros((b, n, self.spec.hard_capacity)),
            next_done=np.full((b, n), np.inf),
            head=np.zeros((b, n), dtype=np.int64),
            count=np.zeros((b, n), dtype=np.int64),
            down_until=np.zeros((b, n)),
            slow_until=np.zeros((b, n)),
            rng=np.zeros(b, dtype=np.uint64),
            burst=np.zeros((b, self.num_regions), dtype=np.int64),
            size=np.zeros(b),
            declared=np.zeros(b),
            ingress=ingress,
            obs=np.zeros((b, self.obs_dim), dtype=np.float32),
            mask=np.zeros((b, n), dtype=np.bool_),
            origin=np.zeros(b),
            segment=np.zeros(b, dtype=np.int64),
        )
        """Every array that moves (`State`); the kernels write into it in place."""
        self._seeded = False

    @property
    def obs(self) -> np.ndarray:
        """[B, D] the waiting jobs' observations."""
        return self.state.obs

    @property
    def mask(self) -> np.ndarray:
        """[B, A] the actions the waiting jobs may take."""
        return self.state.mask

    def reset(
        self, seeds: Sequence[int] | np.ndarray, phases: Sequence[float] | np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Start every env afresh from its own seed; return (obs, mask) of the first job.

        `phases[b]` in [0, 1) is the fraction of the day at which env b starts; None draws
        each env's phase uniformly from its own stream. Then the world warms up (see the
        module docstring).
        """
        return self.reset_envs(np.arange(self.num_envs), seeds, phases)

    def reset_envs(
        self,
        envs: Sequence[int] | np.ndarray,
        seeds: Sequence[int] | np.ndarray,
        phases: Sequence[float] | np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Restart only the listed envs (the others keep going); return the whole batch's view.

        `phases` as in `reset`, one per listed env (None: drawn from each env's stream).
        """
        envs = np.asarray(envs, dtype=np.int64)
        seeds = np.asarray(seeds, dtype=np.uint64)
        if seeds.shape != envs.shape:
            raise ValueError(f"need one seed per env: {len(envs)} envs, {seeds.size} seeds")
        if phases is None:
            start = np.full(envs.shape, np.nan)
        else:
            start = np.asarray(phases, dtype=np.float64)
            if start.shape != envs.shape:
                raise ValueError(
                    f"need one phase per env: {len(envs)} envs, phases of shape {start.shape}"
                )
            if not ((start >= 0.0) & (start < 1.0)).all():
                raise ValueError("phases are fractions of the day: each must lie in [0, 1)")
        seed_streams(seeds, rng_view := np.zeros(len(envs), dtype=np.uint64))
        self.state.rng[envs] = rng_view
        # the last StepResult.obs was handed out: never write it
        self.state = self.state._replace(obs=self.state.obs.copy())
        kernel.reset_kernel(envs, start, self.state, self._statics)
        if len(envs) == self.num_envs:
            self._seeded = True
        return self.obs.copy(), self.mask.copy()

    def _use_threads(self) -> None:
        """numba's thread count is per calling thread and shared by every sim it steps."""
        if numba.get_num_threads() != self.threads:
            numba.set_num_threads(self.threads)

    def step(self, actions: np.ndarray) -> StepResult:
        """Dispatch every env's waiting job to `actions[b]` and move to the next job."""
        if not self._seeded:
            raise RuntimeError("call reset(seeds) before step()")
        actions = np.ascontiguousarray(actions, dtype=np.int64)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"expected {self.num_envs} actions, got shape {actions.shape}")
        out = StepOut(
            obs=np.empty_like(self.obs),
            mask=np.empty_like(self.mask),
            reward=np.empty(self.num_envs),
            metrics=np.empty((self.num_envs, len(METRIC_NAMES))),
            invalid=np.empty(self.num_envs, dtype=np.bool_),
            refused=np.empty(self.num_envs, dtype=np.bool_),
        )
        if self.threads > 1:
            self._use_threads()
            kernel.step_kernel_parallel(actions, self.state, out, self._statics, self.threads)
        else:
            kernel.step_kernel(actions, self.state, out, self._statics)
        self.state = self.state._replace(obs=out.obs, mask=out.mask)
        return out._replace(mask=out.mask.copy())  # the state keeps out.mask

    def replay_signals(
        self, arrival_rate: np.ndarray | None = None, carbon: np.ndarray | None = None
    ) -> None:
        """Set each region's arrival rate (jobs/s) and grid carbon (gCO2eq/kWh) from now on.

        Levels set by hand, from now on; a whole series replays through a signal source
        instead (`source=`, `sources.py`: files, or what a Prometheus server reported). A
        level set here replaces the synthetic daily cycle in every region; NaN keeps a
        region's own mean. The reward's normalisers stay the config's, so rewards keep
        their units.
        """
        statics = self._statics
        for level, swing, values, what in (
            ("arrival_rate", None, arrival_rate, "positive"),
            ("carbon_mean", "carbon_swing", carbon, "non-negative"),
        ):
            if values is None:
                continue
            values = np.asarray(values, dtype=np.float64)
            known = values[~np.isnan(values)]
            bad = (known <= 0).any() if swing is None else (known < 0).any()
            if values.shape != (self.num_regions,) or bad:
                raise ValueError(f"need {self.num_regions} {what} values or NaN, got {values}")
            current = getattr(statics, level)  # written in place: the kernels read it
            current[:] = np.where(np.isnan(values), current, values)
            if swing is None:
                self._statics = self._statics._replace(arrival_swing=0.0)
            else:
                getattr(statics, swing)[:] = 0.0

    def dispatch_costs(self, knows_size: bool = True, knows_backlogs: bool = True) -> np.ndarray:
        """[B, A] immediate weighted cost of each action for the waiting job (inf if masked).

        With both flags it reads the hidden state (the job's true size, the exact
        backlogs): only an oracle, a reference and not a learner, may use it. Without
        one, that part is estimated as the observation can know it: the job at its
        declared size (`world.declared_size`; a mean job without it), each queued job at
        the mean size. Without both it is the myopic cost a policy could compute, and the
        four combinations split the myopic oracle's lead into what it knows and what it
        weighs.
        """
        state = self.state
        mean = self.spec.mean_service_s
        if knows_size:
            size = state.size
        elif self.spec.declared_size:
            size = state.declared
        else:
            size = np.full(self.num_envs, mean)
        backlog = state.backlog if knows_backlogs else state.count * mean
        return self._dispatch_costs(size, backlog)

    def _dispatch_costs(self, size: np.ndarray, backlog: np.ndarray) -> np.ndarray:
        out = np.empty((self.num_envs, self.num_actions))
        state = self.state
        dispatch_cost_kernel(
            state.clock,
            backlog,
            state.count,
            size,
            state.ingress,
            state.segment,
            state.t,
            state.slow_until,
            state.mask,
            out,
            self._statics,
        )
        return out

    def get_state(self) -> dict[str, np.ndarray]:
        """Every mutable array, copied: enough to resume the batch bit for bit."""
        return {name: value.copy() for name, value in self.state._asdict().items()}

    def set_state(self, state: dict[str, np.ndarray], adopt: bool = False) -> None:
        """Resume from `get_state()` output (shapes must match this batch).

        The worlds keep copies, unless `adopt`: then they take each array as it is where
        the kernels can write it in place (its dtype, C-ordered, writeable), for a caller
        that hands the arrays over and keeps no use of them, as a learner loading a saved
        state does (on a 10,000-node estate a copy is some 30 MB)."""
        missing = [name for name in State._fields if name not in state]
        if missing:
            raise ValueError(f"state lacks {missing}: not a state of this version's world")
        arrays = {}
        for name, current in self.state._asdict().items():
            value = np.asarray(state[name])
            if value.shape != current.shape:
                raise ValueError(f"state {name!r}: shape {value.shape}, expected {current.shape}")
            usable = value.dtype == current.dtype and value.flags.c_contiguous
            if adopt and usable and value.flags.writeable:
                arrays[name] = value
            else:
                arrays[name] = value.astype(current.dtype, copy=True)
        self.state = State(**arrays)
        self._seeded = True


def warm_cache() -> None:
    """Compile (or load from the cache) every kernel the simulator runs, in this process.

    Why: on a cold cache the Ray actors of a run would all compile the same kernels at
    once, each for seconds; one compile here, before they start, lets them load instead.
    The parallel step kernel is left out: nothing runs it unless asked for threads > 1.
    """
    sim = MultiCloudSim(WorldConfig(), RewardWeights(), [0])
    sim.reset([0])
    sim.dispatch_costs()
    sim.step(np.zeros(1, dtype=np.int64))
    state_file.expand(state_file.compact(sim.get_state()))
