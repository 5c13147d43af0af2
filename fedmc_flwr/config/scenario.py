"""The experiment's scenario: which world each region trains and is judged in, at which
round, with how many steps, and which regions have joined by then. Federation, the
experiments and the analysis read these answers; the schema only declares the keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from fedmc_flwr.config.schema import Drift, Experience, ExperimentConfig, WorldConfig


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


@dataclass(frozen=True)
class LearnerPlan:
    """What a learner of `regions` needs of the experiment in one round, resolved once here
    so that the learner reads no scenario: the round's config (its drift settled,
    `at_round`), each region's training world, and the steps its learning rate anneals
    over. Build it with `learner_plan`."""

    cfg: ExperimentConfig
    regions: tuple[int, ...]
    worlds: dict[int, WorldConfig]
    """Each region's training world this round (`training_world`)."""
    planned_steps: int
    """Time steps per environment over the run: a region's own (it may join late, or
    gather less per round, `planned_steps`) or, pooled over regions, the configured run."""


def learner_plan(cfg: ExperimentConfig, regions: Sequence[int], round_: int = 1) -> LearnerPlan:
    """The plan of a learner of `regions` built in round `round_` (1: the run's start)."""
    regions = tuple(regions)
    if not regions:
        raise ValueError("a learner needs at least one region")
    settled = at_round(cfg, round_)
    planned = (
        planned_steps(settled, regions[0])
        if len(regions) == 1
        else settled.train.rounds * settled.train.steps_per_round
    )
    return LearnerPlan(settled, regions, learner_worlds(settled, regions), planned)
