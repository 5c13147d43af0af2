"""The checks a loaded config passes before any work starts: ranges, choices, sizes, the
federation's counts, per-region lists, experience and trace files. Each failure is a
`ConfigError` of one line that names the key, the file and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fedmc_flwr.choices import AGGREGATIONS
from fedmc_flwr.config.schema import (
    EXPERIENCE_LISTS,
    PACKAGED_STEP_S,
    PACKAGED_TRACES,
    SIZE_AGNOSTIC_POLICIES,
    ConfigError,
    Experience,
    ExperimentConfig,
    RewardWeights,
    choice_values,
)


def _either(values: Sequence[str]) -> str:
    """'a', 'b' or 'c'."""
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


_Check = tuple[Callable[[Any], bool], str]
REWARD_TERMS = dataclasses.fields(RewardWeights)
"""The reward's terms, one weight each: every check of them reads this, so a new term is
one field of `RewardWeights`."""
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
    "world.lognormal_sigma": (lambda v: 0 < v <= 3, "a number above 0, at most 3"),
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
    "federation.global_share": (lambda v: 0 <= v <= 1, "a share in [0, 1]"),
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
    """The most hostile regions `aggregation` holds against among `regions` (its rule's
    `breakdown`, read through `choices.AGGREGATIONS`; 0 for a rule that makes no claim)."""
    bound = AGGREGATIONS.facts()[aggregation]
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
    if federation.drift_correction != "none" and (
        federation.aggregation != "mean" or federation.local_critic
    ):
        clash = (
            "federation.local_critic"
            if federation.aggregation == "mean"
            else f"aggregation {federation.aggregation!r}"
        )
        raise ConfigError(
            f"{source}: federation.drift_correction = {federation.drift_correction!r} is not "
            f"allowed with {clash}; expected aggregation 'mean' and the critic averaged (the "
            "correction trusts every region's update and steers every array toward the "
            "federation's direction)"
        )
    if federation.server_optimizer == "fedexp" and federation.server_learning_rate < 1:
        raise ConfigError(
            f"{source}: federation.server_learning_rate = {federation.server_learning_rate} "
            "under server_optimizer 'fedexp'; expected a number >= 1 (the largest step it may "
            "take; 1 is FedAvg)"
        )
    # No claim: a rule without a breakdown point, or one this process has not registered
    # (its name is not checked either: `schema.choice_values`).
    claims = AGGREGATIONS.facts().get(federation.aggregation) is not None
    if claims and federation.byzantine != "auto":
        most = breakdown_point(
            federation.aggregation, regions, federation.trim_fraction, federation.min_regions
        )
        if federation.byzantine > most:
            raise ConfigError(
                f"{source}: federation.byzantine = {federation.byzantine} is not allowed with "
                f"aggregation {federation.aggregation!r} and {regions} regions; expected at "
                f"most {most}, its breakdown point (docs/security.md)"
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
        allowed = choice_values(spec)
        if allowed and value not in allowed:
            raise ConfigError(
                f"{source}: {key} = {value!r} is not allowed; expected "
                f"{_either(allowed)}{spec.metadata['note']}"
            )
        if dataclasses.is_dataclass(kind):
            _check_choices(value, kind, source, f"{key}.")
        elif typing.get_origin(kind) is list and dataclasses.is_dataclass(typing.get_args(kind)[0]):
            for index, item in enumerate(value):
                _check_choices(item, typing.get_args(kind)[0], source, f"{key}[{index}].")


def check_ranges(cfg: DictConfig, source: str) -> None:
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
