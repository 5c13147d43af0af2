"""Experiment configuration: one structured schema, loaded from YAML with OmegaConf.

Every knob of an experiment lives in one of the dataclasses of `schema`, so that a YAML
file can only say what the schema knows: an unknown key, a value of the wrong type or a
value out of range is a `ConfigError` whose one-line message names the key, the file and
what is allowed (`checks`). A file may start from another with `inherits: other.yaml`
(resolved next to it), and dotted `key=value` overrides (from the CLI or Flower's run
config) apply last (`files`). Which world each region trains and is judged in, at which
round, is the experiment's scenario (`scenario`).

The package's rooms, one job each: `schema` <- `checks` <- `files`, and `schema` <-
`scenario`. Everything public is importable from `fedmc_flwr.config` itself.
"""

from fedmc_flwr.config.checks import (
    MAX_NODES,
    MEMORY_LIMIT_BYTES,
    OBS_FLOATS_PER_NODE,
    OBS_FLOATS_PER_REGION,
    REWARD_TERMS,
    TRACE_FILES,
    breakdown_point,
    check_ranges,
    working_set_bytes,
)
from fedmc_flwr.config.files import (
    find_config,
    load_config,
    read_yaml,
    shipped_conf,
    to_yaml,
)
from fedmc_flwr.config.scenario import (
    LearnerPlan,
    active_regions,
    at_round,
    drifting,
    join_round,
    learner_plan,
    learner_world,
    learner_worlds,
    planned_steps,
    region_steps,
    region_world,
    regions_of,
    shares_one_estate,
    training_world,
    with_experience,
)
from fedmc_flwr.config.schema import (
    ALLOWED,
    DRIFT_CORRECTIONS,
    EXPERIENCE_LISTS,
    PACKAGED_STEP_S,
    PACKAGED_TRACES,
    POLICY_KINDS,
    SERVER_OPTIMIZERS,
    SIZE_AGNOSTIC_POLICIES,
    ConfigError,
    Drift,
    EvalConfig,
    Experience,
    ExperimentConfig,
    FaultConfig,
    FederationConfig,
    PPOConfig,
    RewardWeights,
    TrainConfig,
    WorldConfig,
    allowed_values,
    choice_values,
    imitation_teachers,
    one_of,
)

__all__ = [
    "ALLOWED",
    "DRIFT_CORRECTIONS",
    "EXPERIENCE_LISTS",
    "MAX_NODES",
    "MEMORY_LIMIT_BYTES",
    "OBS_FLOATS_PER_NODE",
    "OBS_FLOATS_PER_REGION",
    "PACKAGED_STEP_S",
    "PACKAGED_TRACES",
    "POLICY_KINDS",
    "REWARD_TERMS",
    "SERVER_OPTIMIZERS",
    "SIZE_AGNOSTIC_POLICIES",
    "TRACE_FILES",
    "ConfigError",
    "Drift",
    "EvalConfig",
    "Experience",
    "ExperimentConfig",
    "FaultConfig",
    "FederationConfig",
    "LearnerPlan",
    "PPOConfig",
    "RewardWeights",
    "TrainConfig",
    "WorldConfig",
    "active_regions",
    "allowed_values",
    "at_round",
    "breakdown_point",
    "check_ranges",
    "choice_values",
    "drifting",
    "find_config",
    "imitation_teachers",
    "join_round",
    "learner_plan",
    "learner_world",
    "learner_worlds",
    "load_config",
    "one_of",
    "planned_steps",
    "read_yaml",
    "region_steps",
    "region_world",
    "regions_of",
    "shares_one_estate",
    "shipped_conf",
    "to_yaml",
    "training_world",
    "with_experience",
    "working_set_bytes",
]
