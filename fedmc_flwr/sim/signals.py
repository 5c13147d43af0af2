"""The estate's static description: regions, nodes, network, prices, carbon, workloads.

`build_spec` turns a `WorldConfig` into plain numpy arrays (a `WorldSpec`) that the step
kernel reads. The structure of the estate (which instance types sit where, how far regions
are apart) is the same for every seed and every client, as a real estate is; only the
workloads and the random events depend on the seed.

Sources and labels:
- Annual mean grid carbon intensity of the four named regions comes from
  `cloud_carbon.py`, generated from codecarbon 3.3.2's `data/cloud/impact.csv` (Google
  Cloud's 2023 region-carbon figures: us-east1 560, europe-west9 34,
  northamerica-northeast1 2, europe-central2 723 gCO2eq/kWh; location-based accounting).
  `world.carbon_file` replaces them with a real series.
- Hourly prices, the diurnal shapes of price, carbon and background load, instance speeds
  and powers, and every region past the fourth are SYNTHETIC (illustrative values drawn
  from a fixed generator), labelled so in `WorldSpec.synthetic`.
- A signal source (`sources.py`) may replace the arrival rates' shape, the prices, the
  carbon and the job sizes with real series (`WorldSpec.trace`); what it replaces is no
  longer synthetic.
- Round-trip times come from great-circle distance at 2/3 of the speed of light with a
  1.5x route inflation, plus 1 ms inside a region.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from fedmc_flwr.config import RewardWeights, WorldConfig
from fedmc_flwr.sim.regions import CATALOGUE_SEED, Region, region_catalogue
from fedmc_flwr.sim.sources import FileSource, Grid, SignalSource, TraceSignals

INSTANCE_SPEEDS = np.array([0.5, 0.75, 1.0, 1.5, 2.0])
"""Relative service speed of the instance types (synthetic)."""
INSTANCE_POWER_W = np.array([45.0, 60.0, 75.0, 105.0, 135.0])
"""Dynamic power of each instance type at full use, in watts (synthetic)."""
PUE = 1.1
"""Power usage effectiveness applied to every region."""
EGRESS_USD_PER_JOB = 2e-7
"""Data transfer charge of sending one job's payload (~10 kB) to another region."""
DIURNAL_ARRIVAL_SWING = 0.3
"""Relative amplitude of each ingress region's daily arrival cycle."""
PRICE_SWING = 0.2
"""Relative amplitude of the daily price cycle (synthetic)."""
BACKGROUND_SWING = 0.3
"""Relative amplitude of the daily background-load cycle."""
BURST_SHARE = 0.25
"""Long-run share of jobs that arrive in a burst."""
BURST_EXIT = 0.01
"""Per-job probability that a burst ends (bursts last ~100 jobs)."""


def hard_capacity(queue_capacity: int) -> int:
    """Jobs a node can hold at most: `queue_capacity` plus headroom (a quarter, at least 8)
    for the jobs admitted when every live node is full."""
    return queue_capacity + max(8, queue_capacity // 4)


def _rtt_matrix_s(regions: list[Region]) -> np.ndarray:
    lat = np.radians([r.lat for r in regions])
    lon = np.radians([r.lon for r in regions])
    dlat = lat[:, None] - lat[None, :]
    dlon = lon[:, None] - lon[None, :]
    hav = (
        np.sin(dlat / 2) ** 2 + np.cos(lat[:, None]) * np.cos(lat[None, :]) * np.sin(dlon / 2) ** 2
    )
    km = 2 * 6371.0 * np.arcsin(np.sqrt(np.clip(hav, 0.0, 1.0)))
    one_way_ms = km * 1.5 / 200.0  # fibre at ~200 km/ms, routes 1.5x the great circle
    return (2 * one_way_ms + 1.0) / 1000.0


@dataclass
class WorldSpec:
    """Static arrays of one estate, in SI units (seconds, watts, USD, g/kWh)."""

    region_names: list[str]
    nodes_per_region: int
    speed: np.ndarray
    """[N] service speed of every node (1.0 = mean_service_s per mean job)."""
    power_w: np.ndarray
    """[N] dynamic power at full use."""
    price_mult: np.ndarray
    """[N] node price relative to its region's speed-1.0 price."""
    rtt_s: np.ndarray
    """[R, R] round-trip time from ingress region to target region."""
    price_mean: np.ndarray
    """[R] mean USD per hour of a speed-1.0 node."""
    price_swing: np.ndarray
    carbon_mean: np.ndarray
    """[R] mean gCO2eq/kWh."""
    carbon_swing: np.ndarray
    background_mean: np.ndarray
    """[R] mean share of capacity taken by other tenants."""
    background_swing: np.ndarray
    phase: np.ndarray
    """[R] phase of each region's local day (from its longitude), in radians."""
    arrival_rate: np.ndarray
    """[R] mean jobs per second of each ingress region's own workload: the busiest region
    offers `world.load` times the estate's mean spare capacity, the others less."""
    arrival_swing: float
    """Relative amplitude of the daily arrival cycle."""
    burstiness: np.ndarray
    """[R] burst depth of each ingress region's workload."""
    mean_service_s: float
    slo_s: float
    queue_threshold: int
    queue_capacity: int
    """Jobs a node holds before it is masked out."""
    hard_capacity: int
    """Jobs a node can hold at most (its completion ring): see `hard_capacity()`."""
    warmup_jobs: int
    """Jobs the world dispatches by itself (shortest expected delay) when an episode starts."""
    pareto_alpha: float
    """0 for exponential or log-normal job sizes."""
    lognormal_sigma: float
    """0 for exponential or Pareto job sizes."""
    declared_size: bool
    """Jobs declare their size, and the observation prices each at its declaration."""
    declared_size_error: float
    """Sigma of the mean-one log-normal error of a declaration (0: exact)."""
    log_delay: bool
    """The observation's expected delay is log(1 + delay / mean_service_s)."""
    diurnal_period_s: float
    time_varying: bool
    outage_rate: float
    """Chance per job that some node goes down, were every region's multiplier 1."""
    outage_mean_s: float
    region_outage: np.ndarray
    """[R] multiplier of the outage rate of each region's nodes."""
    slowdown_rate: float
    """Chance per job that some node slows down (`world.slowdown_rate`)."""
    slowdown_mean_s: float
    slowdown_share: float
    """Share of its speed a slowed node keeps."""
    cost_ref_usd: float
    """Mean cost of one job spread evenly over the estate: the cost normaliser."""
    carbon_ref_g: float
    """Mean carbon of one job spread evenly over the estate: the carbon normaliser."""
    weights: dict[str, float]
    """The reward's weight of each term, by `RewardWeights`' field names."""
    synthetic: tuple[str, ...] = field(
        default=(
            "prices",
            "diurnal shapes",
            "instance speeds and powers",
            "regions past the fourth",
        )
    )
    trace: TraceSignals | None = None
    """Real series the kernel replays (`sources.py`), their NaNs already filled with the
    region's own mean; None: every signal synthetic."""

    @property
    def num_regions(self) -> int:
        return len(self.region_names)

    @property
    def num_nodes(self) -> int:
        return self.num_regions * self.nodes_per_region


def _node_types(regions: list[Region], per_region: int, heterogeneous: bool) -> np.ndarray:
    """Instance type index of every node: each region's own mix, fixed for all seeds."""
    if not heterogeneous:
        return np.full(len(regions) * per_region, 2)
    rng = np.random.default_rng(CATALOGUE_SEED + 1)
    types = []
    log_speeds = np.log(INSTANCE_SPEEDS)
    for region in regions:
        preference = -((log_speeds - region.speed_bias) ** 2) / 0.5
        p = np.exp(preference) / np.exp(preference).sum()
        types.append(rng.choice(len(INSTANCE_SPEEDS), size=per_region, p=p))
    return np.concatenate(types)


def _skew(multipliers: list[float], regions: int) -> np.ndarray:
    """Per-region multipliers of a non-IID setting (`world.region_*`); none means 1."""
    return np.asarray(multipliers, dtype=np.float64) if multipliers else np.ones(regions)


def _filled(grid: Grid | None, own: np.ndarray) -> Grid | None:
    """A series with each region's gaps (NaN: no sample) at the region's own mean."""
    if grid is None:
        return None
    return Grid(np.where(np.isnan(grid.values), own[:, None], grid.values), grid.lengths)


def traced(
    trace: TraceSignals, price: np.ndarray, carbon: np.ndarray, mult: np.ndarray
) -> tuple[TraceSignals, np.ndarray, np.ndarray]:
    """The series with gaps filled, and each region's price and carbon mean over its
    series (what the reward's normalisers then use)."""
    filled = dataclasses.replace(
        trace,
        price=_filled(None if trace.price is None else trace.price.scaled(mult[0]), price),
        carbon=_filled(None if trace.carbon is None else trace.carbon.scaled(mult[1]), carbon),
    )
    if filled.price is not None:
        price = filled.price.means()
    if filled.carbon is not None:
        carbon = filled.carbon.means()
    return filled, price, carbon


def _labels(trace: TraceSignals | None) -> tuple[str, ...]:
    """What stays synthetic once the trace's signals replace theirs."""
    labels = ["prices", "diurnal shapes", "instance speeds and powers", "regions past the fourth"]
    if trace is not None and trace.price is not None:
        labels.remove("prices")
    return tuple(labels)


def build_spec(
    world: WorldConfig, reward: RewardWeights, source: SignalSource | None = None
) -> WorldSpec:
    """Turn the config into the arrays the kernel reads (see the module docstring).

    `source` gives the real signals; None reads the config's own trace keys (none: the
    synthetic world, unchanged)."""
    regions = region_catalogue(world.regions)
    trace = (source or FileSource()).signals(world, [r.name for r in regions])
    per_region = world.nodes_per_region
    if world.node_speeds:  # chosen speeds, drawing power on the instance types' line
        speed = np.array(world.node_speeds, dtype=np.float64)
        power = np.polyval(np.polyfit(INSTANCE_SPEEDS, INSTANCE_POWER_W, 1), speed)
    else:
        types = _node_types(regions, per_region, world.heterogeneous)
        speed = INSTANCE_SPEEDS[types].astype(np.float64)
        power = INSTANCE_POWER_W[types].astype(np.float64)
    price_mult = speed.copy()  # price scales with speed: same cost per job at equal prices
    node_region = np.repeat(np.arange(world.regions), per_region)

    price_skew = _skew(world.region_price, world.regions)
    carbon_skew = _skew(world.region_carbon, world.regions)
    price_mean = np.array([r.price_usd_per_hour for r in regions]) * price_skew
    carbon_mean = np.array([r.carbon_g_per_kwh for r in regions]) * carbon_skew
    if trace is not None:
        trace, price_mean, carbon_mean = traced(
            trace, price_mean, carbon_mean, np.stack([price_skew, carbon_skew])
        )
    background = np.clip(world.background_load * np.array([r.crowding for r in regions]), 0, 0.9)
    spare = float(np.sum(speed * (1.0 - background[node_region])))
    mean_service_s = world.mean_service_ms / 1000.0
    # Non-IID ingress workloads: rate and burst depth differ per ingress region; the
    # busiest region offers exactly the configured load (so load < 1 is stable everywhere).
    k = np.arange(world.regions)
    if world.region_load:
        rate_mult = np.asarray(world.region_load, dtype=np.float64)
    elif trace is not None and trace.rate_level is not None:
        rate_mult = trace.rate_level.copy()  # the regions' relative levels in the user's file
    else:
        rate_mult = 1.0 + 0.15 * np.cos(1.7 * k + 0.4)
    rate_mult /= rate_mult.max()
    burst_mult = 1.0 + 0.4 * np.sin(2.3 * k + 0.2)
    arrival_rate = world.load * spare / mean_service_s * rate_mult
    if trace is not None and trace.rate_jobs_s is not None:  # a cluster's own jobs/s
        arrival_rate = np.where(np.isnan(trace.rate_jobs_s), arrival_rate, trace.rate_jobs_s)
    burstiness = np.clip(world.burstiness * burst_mult, 0.0, 0.95)

    rtt = _rtt_matrix_s(regions) if world.network else np.zeros((world.regions, world.regions))
    busy_s = mean_service_s / speed
    job_cost = price_mean[node_region] * price_mult * busy_s / 3600.0
    job_energy_kwh = power * busy_s * PUE / 3.6e6
    job_carbon = job_energy_kwh * carbon_mean[node_region]
    swing = 1.0 if world.time_varying else 0.0
    arrival_swing = 0.0 if trace is not None and trace.rate is not None else swing

    return WorldSpec(
        region_names=[r.name for r in regions],
        nodes_per_region=per_region,
        speed=speed,
        power_w=power,
        price_mult=price_mult,
        rtt_s=rtt,
        price_mean=price_mean,
        price_swing=np.full(world.regions, PRICE_SWING * swing),
        carbon_mean=carbon_mean,
        carbon_swing=np.array([r.carbon_swing for r in regions]) * swing,
        background_mean=background,
        background_swing=np.full(world.regions, BACKGROUND_SWING * swing),
        phase=np.radians([r.lon for r in regions]),
        arrival_rate=arrival_rate,
        arrival_swing=DIURNAL_ARRIVAL_SWING * arrival_swing,
        burstiness=burstiness,
        mean_service_s=mean_service_s,
        slo_s=world.slo_ms / 1000.0,
        queue_threshold=world.queue_threshold,
        queue_capacity=world.queue_capacity,
        hard_capacity=hard_capacity(world.queue_capacity),
        warmup_jobs=world.warmup_jobs,
        pareto_alpha=world.pareto_alpha if world.job_size == "pareto" else 0.0,
        lognormal_sigma=world.lognormal_sigma if world.job_size == "lognormal" else 0.0,
        declared_size=world.declared_size,
        declared_size_error=world.declared_size_error,
        log_delay=world.log_delay,
        diurnal_period_s=world.diurnal_period_s,
        time_varying=world.time_varying,
        outage_rate=world.outage_rate,
        outage_mean_s=world.outage_mean_s,
        region_outage=_skew(world.region_outage, world.regions),
        slowdown_rate=world.slowdown_rate,
        slowdown_mean_s=world.slowdown_mean_s,
        slowdown_share=world.slowdown_share,
        cost_ref_usd=float(job_cost.mean()),
        carbon_ref_g=float(max(job_carbon.mean(), 1e-12)),
        weights=dataclasses.asdict(reward),
        synthetic=_labels(trace),
        trace=trace,
    )
