"""Where a world's signals come from: synthetic, files, or a live cluster.

A signal source turns a world's config into `TraceSignals`: per-region piecewise-constant
series of the arrival rate, the price and the carbon intensity, and job sizes from a log.
The kernel samples them at each env's clock. A signal left None keeps the synthetic daily
cycle of `signals.py`. Three sources give them: `SyntheticSource` (none, today's world),
`FileSource` (the `world.*` trace keys: packaged series and a user's files) and the
Prometheus adapter (`integrations/prometheus.py`: what a real cluster reported).

What is mapped, and how (docs/design.md, "Trace-driven worlds"):
- time: trace second `tau = origin + t * speedup` at world time `t`. With
  `world.trace_time: day` the speedup is `86400 / world.diurnal_period_s` (one trace day
  per world day); with `real` it is `world.trace_speedup`. Each episode's origin is a
  start point drawn from its seed: a whole trace day with `day` (so the trace's hours
  stay on the world's clock), a whole step with `real`.
- arrival rates: each region's series divided by its own mean is the shape; the region's
  mean rate is the synthetic world's (`world.load` of the estate's spare capacity for the
  busiest region), so `world.load` keeps its meaning. A user's rate file or job log also
  keeps its regions' relative levels, unless `world.region_load` sets them.
- price (USD/h of a speed-1.0 node) and carbon (gCO2eq/kWh): the values as they are; the
  reward's normalisers then use each region's mean over the series.
- job sizes: the log's, scaled so that its mean job is `world.mean_service_ms`; each job
  takes the size of a job drawn from the log's jobs of its region in the same segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fedmc_flwr.config import PACKAGED_STEP_S, WorldConfig
from fedmc_flwr.sim import traces
from fedmc_flwr.sim.regions import region_catalogue

DAY_S = 86400.0
MAX_STEPS = 1_000_000
"""Most trace steps a job log may span (a year at 32 s steps): a log's quiet periods are
kept as steps of rate 0, and its arrays grow with the span."""


@dataclass(frozen=True)
class Grid:
    """One signal of every region: `values[r, :lengths[r]]`, one value per segment;
    replay wraps around each region's length. A file's regions all have the file's
    length (`traces.on_grid`); only packaged series of different datasets differ."""

    values: np.ndarray
    """[R, T] float64 (padded past each region's length)."""
    lengths: np.ndarray
    """[R] int64 segments of each region's series."""

    @classmethod
    def stack(cls, series: list[np.ndarray]) -> Grid:
        lengths = np.array([len(s) for s in series], dtype=np.int64)
        values = np.zeros((len(series), int(lengths.max())))
        for r, s in enumerate(series):
            values[r, : len(s)] = s
        return cls(values, lengths)

    def scaled(self, factor: np.ndarray) -> Grid:
        """Each region's series times its own factor."""
        return Grid(self.values * factor[:, None], self.lengths)

    def means(self) -> np.ndarray:
        """[R] each region's mean over its own series."""
        return np.array([self.values[r, :n].mean() for r, n in enumerate(self.lengths)])


@dataclass(frozen=True)
class JobSizes:
    """The log's jobs by region and segment: region r's jobs of segment k are
    `sizes[starts[r, k] : starts[r, k + 1]]`, mean one over the whole log."""

    sizes: np.ndarray
    starts: np.ndarray
    """[R, K + 1] int64."""


@dataclass(frozen=True)
class TraceSignals:
    """What a source gives the world; None keeps the synthetic signal."""

    step_s: float
    """Trace seconds per segment of every grid."""
    speedup: float
    """Trace seconds per world second."""
    start_unit_s: float
    """Start points are whole multiples of this many trace seconds."""
    on_clock: bool = False
    """Trace time follows the world's clock from its phase (`world.trace_time: day`, the
    trace's hours on the world's day); False: it starts at the start point whatever the
    phase."""
    rate: Grid | None = None
    """Mean-one shape of each region's arrival rate."""
    rate_level: np.ndarray | None = None
    """[R] relative mean rates (busiest 1) the source knows; None: the world's spread."""
    rate_jobs_s: np.ndarray | None = None
    """[R] mean jobs per second a cluster reported (NaN: the world's own); replaces the
    rate `world.load` gives."""
    price: Grid | None = None
    carbon: Grid | None = None
    jobs: JobSizes | None = None

    @property
    def starts(self) -> int:
        """Start points an episode may draw (at least 1)."""
        grids = [g for g in (self.rate, self.price, self.carbon) if g is not None]
        if not grids:
            return 1
        span = min(int(g.lengths.min()) for g in grids) * self.step_s
        return max(1, int(span // self.start_unit_s))


class SignalSource(Protocol):
    """Anything that gives a world its signals."""

    def signals(self, world: WorldConfig, regions: list[str]) -> TraceSignals | None: ...


class SyntheticSource:
    """Every signal synthetic (signals.py's daily cycles), whatever the config's trace
    keys say."""

    def signals(self, world: WorldConfig, regions: list[str]) -> TraceSignals | None:
        return None


def uses_traces(world: WorldConfig) -> bool:
    """Whether the config asks for any trace signal."""
    return bool(world.arrivals == "trace" or world.job_log or world.carbon_file or world.price_file)


def timing(world: WorldConfig) -> tuple[float, float]:
    """(speedup, start unit): trace seconds per world second, and what start points are
    whole multiples of."""
    if world.trace_time == "day":
        return DAY_S / world.diurnal_period_s, DAY_S
    return world.trace_speedup, world.trace_step_s


def _file_grid(path: str, kind: str, names: list[str], step_s: float) -> tuple[Grid, np.ndarray]:
    """A series file on the world's grid, one row per estate region, and its regions' means."""
    series = traces.read_series(path, kind)
    traces.check_regions(series.path, traces.REGION[0], list(series.times), names)
    missing = [r for r in names if r not in series.times]
    if missing:
        raise traces.TraceError(
            f"{series.path}: column {traces.REGION[0]!r}: region {missing[0]!r} of the "
            "estate has no rows"
        )
    traces.check_gaps(series, step_s)
    length = traces.segments(traces.span(series), step_s)
    rows = [traces.on_grid(series.times[r], series.values[r], step_s, length) for r in names]
    grid = Grid.stack(rows)
    return grid, grid.means()


def _packaged_grid(world: WorldConfig, regions: int) -> Grid:
    names = world.rate_trace if len(world.rate_trace) > 1 else world.rate_trace * regions
    rows = []
    for name in names:
        values = traces.read_packaged(name)
        times = np.arange(len(values)) * PACKAGED_STEP_S
        length = traces.segments(times[-1], world.trace_step_s)
        rows.append(traces.on_grid(times, values, world.trace_step_s, length))
    return Grid.stack(rows)


def _job_log(world: WorldConfig, names: list[str]) -> tuple[JobSizes, Grid | None, bool]:
    """The log's sizes by region and segment, its arrival counts as rates when the world's
    arrivals follow the trace, and whether the log names its jobs' regions."""
    log = traces.read_job_log(world.job_log)
    if log.region is not None:
        traces.check_regions(log.path, traces.REGION[0], list(dict.fromkeys(log.region)), names)
    step = world.trace_step_s
    span = log.arrival.max() / step
    if world.arrivals == "trace" and span >= MAX_STEPS:
        raise traces.TraceError(
            f"{log.path}: column {traces.ARRIVAL[0]!r}: the jobs span {span:.3g} steps of "
            f"{step:g} s, more than {MAX_STEPS:,} (raise world.trace_step_s)"
        )
    segments = int(span) + 1 if world.arrivals == "trace" else 1
    sizes = log.size / log.size.mean()
    flat, starts, counts = [], np.zeros((len(names), segments + 1), dtype=np.int64), []
    for r, name in enumerate(names):
        mine = np.ones(len(sizes), bool) if log.region is None else log.region == name
        if not mine.any():
            raise traces.TraceError(
                f"{log.path}: column {traces.REGION[0]!r}: region {name!r} of the estate has "
                "no jobs"
            )
        arrival = log.arrival[mine]
        k = np.minimum((arrival // step).astype(np.int64), segments - 1)
        order = np.argsort(k, kind="stable")
        per_segment = np.bincount(k, minlength=segments)
        starts[r, 1:] = np.cumsum(per_segment) + sum(len(f) for f in flat)
        starts[r, 0] = sum(len(f) for f in flat)
        flat.append(sizes[mine][order])
        counts.append(per_segment.astype(np.float64))
    jobs = JobSizes(np.concatenate(flat), starts)
    counted = Grid.stack(counts) if world.arrivals == "trace" else None
    return jobs, counted, log.region is not None


def _shape(grid: Grid, path: str, names: list[str]) -> Grid:
    """Each region's series over its own mean (a mean-one shape)."""
    means = grid.means()
    if (means <= 0).any():
        region = names[int(np.argmin(means))]
        raise traces.TraceError(
            f"{path}: column {traces.RATE[0]!r}: region {region!r}: the rate is 0 throughout"
        )
    return Grid(grid.values / means[:, None], grid.lengths)


class FileSource:
    """The `world.*` trace keys: packaged series, a user's rate file, job log, carbon and
    price series. Files are read once per process (and again when they change)."""

    def signals(self, world: WorldConfig, regions: list[str]) -> TraceSignals | None:
        if not uses_traces(world):
            return None
        names = list(world.trace_regions) or regions
        speedup, unit = timing(world)
        step = world.trace_step_s
        rate = level = jobs = price = carbon = None
        if world.job_log:
            jobs, counts, by_region = _job_log(world, names)
            if counts is not None:
                rate = _shape(counts, world.job_log, names)
                level = counts.means() / counts.means().max() if by_region else None
        if world.rate_file:
            grid, means = _file_grid(world.rate_file, "rate", names, step)
            rate, level = _shape(grid, world.rate_file, names), means / means.max()
        elif world.rate_trace:
            rate = _shape(_packaged_grid(world, len(names)), "world.rate_trace", names)
        if world.price_file:
            price, _ = _file_grid(world.price_file, "price", names, step)
        if world.carbon_file:
            carbon, _ = _file_grid(world.carbon_file, "carbon", names, step)
        return TraceSignals(
            step_s=world.trace_step_s,
            speedup=speedup,
            start_unit_s=unit,
            on_clock=world.trace_time == "day",
            rate=rate,
            rate_level=level,
            price=price,
            carbon=carbon,
            jobs=jobs,
        )


def check_files(world: WorldConfig) -> None:
    """Read and check every file `world` names, so that a bad one stops a command before
    any work rather than when its first world is built; `TraceError` in one line."""
    FileSource().signals(world, [r.name for r in region_catalogue(world.regions)])
