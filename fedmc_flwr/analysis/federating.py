"""What federating buys: the federated learner against local-only and centralised PPO, per
setting, read from the sweeps' finished cells.

Every federated variant of a sweep gets its row (FedAvg, and the personalised or proximal
variants where the sweep has them): no variant is picked on the test worlds it is then
reported on. A sweep whose experiment singles out one region (a region that joins late,
`federation.join_rounds`, or one that gathers less experience per round,
`train.step_share`) is judged on that region's test worlds alone: the federated policy it
evaluates against the same region's local learner (same config: from scratch in its join
round, on its own share of steps). For a late region three figures say whether joining
pays: the paired difference at its first evaluation, and for each learner the rounds (and
training seconds of that region) from joining until it beats SED on its worlds. Any other
sweep is judged over every region at the last round, as its summary is. Every difference
is paired per held-out world over the training seeds (`report.compare`).

A sweep whose regions train on other worlds than they are judged on (`train.experience`)
is judged twice: on the test worlds of the regions that never trained on them, and on
those of the regions that did, each against local-only and centralised PPO (both train on
every region's experience as the federation does). A sweep where one region's workload
drifts (`train.drift`) is judged on that region's worlds: at the last round, at the round
of the change, and for each learner the rounds from the change until it beats SED again.

"What federating costs" reads the same cells: the bytes each region receives and sends
per round (the global network and statistics down, its update of the same arrays up: the
round's checkpoint holds them) and the round's wall time beside the regions' own training
time in that round, all from the federated run itself (`timing.csv`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fedmc_flwr.analysis.report import collect, compare
from fedmc_flwr.analysis.statistics import Estimate
from fedmc_flwr.config import ExperimentConfig, join_round, region_world, training_world
from fedmc_flwr.policies.checkpoints import read_checkpoint, round_checkpoint
from fedmc_flwr.sim.signals import region_catalogue
from fedmc_flwr.sweeps import Sweep, complete_seeds, finished_frame

FEDAVG = "ppo-fedavg"
LOCAL = "ppo-local"
CENTRALISED = "ppo-centralised"
REFERENCE = "sed"
"""The dispatcher a late region's learners race to beat."""
NEVER = "not within the run"
"""What a learner that never beats `REFERENCE` gets in the race's cells and words."""


def watched_region(cfg: ExperimentConfig) -> int | None:
    """The region a setting singles out: the first that joins late, trains on a smaller
    share of steps or whose workload drifts; None when every region is alike in all three."""
    for region in range(cfg.world.regions):
        late = join_round(cfg, region) > 1
        poor = bool(cfg.train.step_share) and float(cfg.train.step_share[region]) < 1
        if late or poor or drifts(cfg, region):
            return region
    return None


def drifts(cfg: ExperimentConfig, region: int) -> bool:
    """Whether `region`'s workload changes partway through the run (`train.drift`)."""
    return bool(cfg.train.drift.round) and cfg.train.drift.region == region


def change_round(cfg: ExperimentConfig, region: int) -> int | None:
    """The round from which `region` is raced to `REFERENCE`: the round it joins in, or
    the round its workload drifts; None for a region that does neither."""
    if join_round(cfg, region) > 1:
        return join_round(cfg, region)
    return cfg.train.drift.round if drifts(cfg, region) else None


def experience_groups(cfg: ExperimentConfig) -> list[tuple[str, list[int]]]:
    """The regions whose last round's training worlds are not the worlds they are judged
    on (`train.experience`) and the others, each with the words its row names it by; []
    when every region ends training on its own test worlds."""
    regions = range(cfg.world.regions)
    last = cfg.train.rounds
    other = [r for r in regions if training_world(cfg, r, last) != region_world(cfg.world, r)]
    if not other:
        return []
    own = [r for r in regions if r not in other]
    groups = [("never trained on these worlds", other), ("trained on these worlds", own)]
    return [(words, members) for words, members in groups if members]


@dataclass(frozen=True)
class RaceToReference:
    """How soon a learner of a late or drifting region beats `REFERENCE` on its worlds."""

    rounds: int | None
    """Rounds from joining or the drift (1: the evaluation after that round's training)
    until the paired difference's 95% CI is above 0; None when it never is within the run."""
    seconds: float | None
    """That region's training seconds over those rounds, mean over training seeds."""


@dataclass(frozen=True)
class Gain:
    """One row of "What federating buys"."""

    setting: str
    variant: str
    """The federated variant judged."""
    scope: str
    """Which worlds: a region's name, or 'all regions'."""
    seeds: list[int]
    versus_local: Estimate | None
    versus_centralised: Estimate | None
    first_versus_local: Estimate | None = None
    """A late region: federated minus local at its first evaluation; a drifting one: at
    the round of the change."""
    race: dict[str, RaceToReference] | None = None
    since: str = "joining"
    """What `first_versus_local` and the race count from: 'joining' (a late region) or
    'the change' (a drifting one)."""
    pooled_versus_local: Estimate | None = None
    """Centralised minus local-only PPO on the same worlds: what the regions' experience
    pooled buys at all, the most a federation can hope to share (judged per group of
    regions; None for a late, data-poor or drifting region)."""


def _training_seconds(sweep: Sweep, variant: str, region: str, rounds: range) -> float:
    """Mean over the variant's cells of `region`'s training wall time over `rounds`."""
    totals = []
    for cell in sweep.cells:
        if cell.variant != variant:
            continue
        timing = pd.read_csv(cell.out_dir / "timing.csv")
        mine = timing[
            (timing["phase"] == "train")
            & (timing["client"] == region)
            & timing["round"].isin(list(rounds))
        ]
        totals.append(float(mine["wall_time_s"].sum()))
    return sum(totals) / len(totals)


def _versus(frame: pd.DataFrame, a: str, b: str, round_: int | None = None) -> Estimate | None:
    """A - B in reward, paired per world over training seeds (None if either is absent)."""
    policies = collect(frame, round_) if round_ is not None else collect(frame)
    if a not in policies or b not in policies:
        return None
    compared = compare(policies[a], policies[b])
    return compared[0] if compared else None


def _race(
    sweep: Sweep, frame: pd.DataFrame, variant: str, region: str, join: int, rounds: int
) -> RaceToReference:
    for rnd in range(join, rounds + 1):
        estimate = _versus(frame, variant, REFERENCE, rnd)
        if estimate is not None and estimate.low > 0:
            seconds = _training_seconds(sweep, variant, region, range(join, rnd + 1))
            return RaceToReference(rnd - join + 1, seconds)
    return RaceToReference(None, None)


def federating_gains(sweep: Sweep, federated: Sequence[str] | None = None) -> list[Gain]:
    """The sweep's rows, one per federated variant (`federated`: those variants instead
    of the sweep's federated ones), from the training seeds whose every cell is finished
    (none when no seed is)."""
    seeds = complete_seeds(sweep)
    if federated is None:
        federated = list(dict.fromkeys(c.variant for c in sweep.cells if c.kind == "federated"))
    if not seeds or not federated:
        return []
    variants = {cell.variant for cell in sweep.cells}
    frame = finished_frame(sweep, seeds)
    cfg = sweep.cells[0].cfg
    region = watched_region(cfg)
    if region is None:
        groups = experience_groups(cfg) or [("", list(range(cfg.world.regions)))]
        return [
            gain
            for variant in federated
            for gain in group_gains(sweep.name, cfg, frame, variant, seeds, groups)
        ]
    name = region_catalogue(cfg.world.regions)[region].name
    mine = frame[frame["client"] == name]
    start = change_round(cfg, region)
    gains = []
    for variant in federated:
        race = None
        if start is not None and LOCAL in variants:
            race = {
                v: _race(sweep, mine, v, name, start, cfg.train.rounds) for v in (variant, LOCAL)
            }
        gains.append(
            Gain(
                sweep.name,
                variant,
                name,
                seeds,
                _versus(mine, variant, LOCAL),
                # centralised PPO pools every region from round 1 (`experiments.training`):
                # a drift it lives through too, a late or data-poor region it cannot
                _versus(mine, variant, CENTRALISED) if drifts(cfg, region) else None,
                _versus(mine, variant, LOCAL, start) if start is not None else None,
                race,
                "the change" if drifts(cfg, region) else "joining",
            )
        )
    return gains


def group_gains(
    setting: str,
    cfg: ExperimentConfig,
    frame: pd.DataFrame,
    variant: str,
    seeds: list[int],
    groups: Sequence[tuple[str, list[int]]],
) -> list[Gain]:
    """`variant`'s rows at the last round, one per group of regions (words, members),
    each judged on its members' test worlds alone (`frame`: per_seed.csv rows)."""
    names = [region.name for region in region_catalogue(cfg.world.regions)]
    gains = []
    for words, members in groups:
        clients = [names[r] for r in members]
        mine = frame[frame["client"].isin(clients)]
        everyone = len(members) == cfg.world.regions and not words
        scope = (
            "all regions"
            if everyone
            else f"{', '.join(clients)}" + (f" ({words})" if words else "")
        )
        gains.append(
            Gain(
                setting,
                variant,
                scope,
                seeds,
                _versus(mine, variant, LOCAL),
                _versus(mine, variant, CENTRALISED),
                pooled_versus_local=_versus(mine, CENTRALISED, LOCAL),
            )
        )
    return gains


def _difference(estimate: Estimate | None) -> str:
    if estimate is None:
        return "-"
    return f"{estimate.mean:+.4f} ± {estimate.half_width:.4f} ({_verdict(estimate)})"


def _verdict(estimate: Estimate) -> str:
    return {"better": "pays", "worse": "costs"}.get(estimate.verdict(), "no difference at 95%")


def _race_cell(race: RaceToReference | None) -> str:
    if race is None:
        return "-"
    if race.rounds is None:
        return NEVER
    return f"{race.rounds} ({race.seconds:.0f} s)"


def gains_table(gains: Sequence[Gain | tuple[str, str] | str]) -> str:
    """The markdown table: one row per setting, or (setting, why it has no row) for one
    not measured, or a row as published before (a markdown line, kept as it is)."""
    columns = (
        "setting",
        "federated",
        "judged on",
        "seeds",
        "federated - local",
        "federated - centralised",
        "at first evaluation, federated - local",
        "rounds (s) to beat SED: federated",
        "local",
        "centralised - local",
    )

    def line(gain: Gain) -> str:
        race = gain.race or {}
        return (
            f"| `{gain.setting}` | `{gain.variant}` | {gain.scope} | {len(gain.seeds)} "
            f"| {_difference(gain.versus_local)} | {_difference(gain.versus_centralised)} "
            f"| {_difference(gain.first_versus_local)} "
            f"| {_race_cell(race.get(gain.variant))} | {_race_cell(race.get(LOCAL))} "
            f"| {_difference(gain.pooled_versus_local)} |"
        )

    return _markdown(columns, gains, line)


def _markdown(columns: Sequence[str], rows: Sequence, line: Callable[[Any], str]) -> str:
    """A table of `columns`: `line(row)` per row, but a published line (a str) as it is
    ("-" in the columns it was published without), and (setting, why it has no row) with
    the why in the third column."""
    lines = [f"| {' | '.join(columns)} |", "|---" * len(columns) + "|"]
    for row in rows:
        if isinstance(row, str):
            lines.append(row + " - |" * (len(columns) + 1 - row.count("|")))
        elif isinstance(row, tuple):
            lines.append(f"| `{row[0]}` | | {row[1]} |" + " |" * (len(columns) - 3))
        else:
            lines.append(line(row))
    return "\n".join(lines) + "\n"


def _pays(estimate: Estimate | None) -> bool:
    return estimate is not None and estimate.verdict() == "better"


def _why_not(rows: Sequence[Gain]) -> tuple[str, bool] | None:
    """Why no variant of one setting beats its local learners on one set of judged regions,
    read from its FedAvg row, and whether FedAvg ties them: None when one does, or when the
    setting has no FedAvg row to read."""
    if any(_pays(gain.versus_local) for gain in rows):
        return None
    fedavg = next((gain for gain in rows if gain.variant == FEDAVG), None)
    if fedavg is None or fedavg.versus_local is None:
        return None
    versus_local = _difference(fedavg.versus_local)
    tie = False
    if _pays(fedavg.first_versus_local):
        lead = {
            "joining": "joining pays at its first evaluation",
            "the change": "federating pays at the round of the change",
        }[fedavg.since]
        cause = (
            f"{lead}, {_difference(fedavg.first_versus_local)}; "
            f"by the last round its local learner has caught up, {versus_local}"
            f"{_race_words(fedavg)}"
        )
    elif fedavg.versus_local.verdict() == "worse" and _worse(fedavg.versus_centralised):
        cause = (
            f"its local learners beat FedAvg, {versus_local}, and so does centralised PPO on "
            f"the same experience pooled, {_difference(fedavg.versus_centralised)}: one "
            "policy for every region does better, so the shortfall is the averaging's, not "
            "the regions' differences"
        )
    elif fedavg.versus_local.verdict() == "worse":
        cause = (
            f"its local learners beat FedAvg, {versus_local}: its regions want different "
            "policies, and averaging pulls them toward one"
        )
    elif _worse(fedavg.versus_centralised):
        cause = (
            f"FedAvg ties its local learners, {versus_local}, while centralised PPO, trained "
            "on the same experience pooled, beats FedAvg, "
            f"{_difference(fedavg.versus_centralised)}: the regions' experience helps, "
            "averaging their updates does not deliver it"
        )
    else:
        tie = True
        cause = (
            f"FedAvg ties its local learners, {versus_local}: the sweeps find no cost of "
            "averaging for a personal variant to win back"
        )
    others = [f"`{g.variant}` {_difference(g.versus_local)}" for g in rows if g is not fedavg]
    also = f" Against local-only, {'; '.join(others)}." if others else ""
    return f"- `{fedavg.setting}` ({fedavg.scope}): {cause}.{also}", tie


def _worse(difference: Estimate | None) -> bool:
    """Whether a federated-minus-reference difference is measured and below 0 at 95%."""
    return difference is not None and difference.verdict() == "worse"


def _race_words(gain: Gain) -> str:
    """How soon each learner of a late or drifting region beats SED, as a clause ('' without
    a race)."""
    if not gain.race or LOCAL not in gain.race:
        return ""

    def soon(race: RaceToReference) -> str:
        return NEVER if race.rounds is None else f"in {race.rounds} rounds"

    federated, local = gain.race[gain.variant], gain.race[LOCAL]
    return (
        f"; from {gain.since}, the federated learner beats {REFERENCE.upper()} {soon(federated)}, "
        f"its local learner {soon(local)}"
    )


def why_it_does_not_pay(
    gains: Sequence[Gain],
    kept: Mapping[str, Sequence[str]] | None = None,
    order: Sequence[str] = (),
) -> str:
    """Markdown: a line per setting and set of judged regions where no federated variant
    beats the local learners, giving the setting's own evidence for why (nothing when every
    setting pays); `kept`: such lines as published before, by setting, for settings
    measured elsewhere. The lines follow the settings' `order` where it is given (a
    setting's kept lines stand where its measured ones would), else the measured
    settings' lines come first.
    Regions that trained on their test worlds' events and those that never did are read
    apart: one set that pays says nothing about the other."""
    settings: dict[tuple[str, str], list[Gain]] = {}
    for gain in gains:
        settings.setdefault((gain.setting, gain.scope), []).append(gain)
    reasons = [
        (setting, reason)
        for (setting, _), rows in settings.items()
        if (reason := _why_not(rows)) is not None
    ]
    reasons += [
        (setting, (line, "FedAvg ties" in line))
        for setting, lines in (kept or {}).items()
        for line in lines
    ]
    if not reasons:
        return ""
    rank = {setting: i for i, setting in enumerate(order)}
    reasons.sort(key=lambda item: rank.get(item[0], len(rank)))
    lines = [line for _, (line, _) in reasons]
    shared = ""
    if any(tie for _, (_, tie) in reasons):
        shared = (
            " Where FedAvg ties them, one network serves every region: each node's row of "
            "the observation carries its region's price, carbon intensity and background "
            "load (`fedmc_flwr/sim/layout.py`), so the network can tell the regions apart."
        )
    return (
        "Where no federated variant beats the local learners, each setting's FedAvg row "
        f"says why (federated minus local-only, at the last round unless stated).{shared}"
        "\n\n" + "\n".join(lines) + "\n"
    )


@dataclass(frozen=True)
class Cost:
    """One row of "What federating costs": a federated variant's traffic and time."""

    setting: str
    variant: str
    seeds: list[int]
    bytes_each_way: int
    """Bytes of arrays each region receives per round (the global network and statistics)
    and sends back (its update: the same arrays)."""
    round_s: float
    """A round's training wall time, from sending the global weights to aggregating the
    replies; mean over rounds and training seeds."""
    slowest_region_s: float
    """The slowest region's own training time in the same round (what a local-only learner
    of its steps takes); mean over rounds and training seeds."""
    regions_s: float
    """Every region's own training time in the same round, summed; same means."""


def round_times(timing: pd.DataFrame) -> tuple[float, float, float]:
    """A federated run's (round, slowest region, regions summed) training seconds, each the
    mean over the rounds of `timing` (timing.csv rows, one or more runs)."""
    train = timing[timing["phase"] == "train"]
    key = ["experiment", "round"]
    rounds = train[train["client"] == "all"].set_index(key)["wall_time_s"]
    regions = train[train["client"] != "all"].groupby(key)["wall_time_s"]
    return float(rounds.mean()), float(regions.max().mean()), float(regions.sum().mean())


def federating_costs(sweep: Sweep, federated: Sequence[str] | None = None) -> list[Cost]:
    """A row per federated variant of the sweep (`federated`: those instead), from the
    training seeds whose every cell is finished (none when no seed is)."""
    seeds = complete_seeds(sweep)
    if federated is None:
        federated = list(dict.fromkeys(c.variant for c in sweep.cells if c.kind == "federated"))
    costs = []
    for variant in federated if seeds else []:
        cells = [c for c in sweep.cells if c.variant == variant and c.seed in seeds]
        last = round_checkpoint(cells[0].out_dir, cells[0].cfg.train.rounds)
        sent = sum(array.nbytes for array in read_checkpoint(last))
        timing = pd.concat(pd.read_csv(cell.out_dir / "timing.csv") for cell in cells)
        costs.append(Cost(sweep.name, variant, seeds, sent, *round_times(timing)))
    return costs


def costs_table(costs: Sequence[Cost | tuple[str, str] | str]) -> str:
    """The markdown table of "What federating costs": a row per `Cost`, (setting, why it
    has no row) for one not measured, or a row as published before (kept as it is)."""
    columns = (
        "setting",
        "federated",
        "seeds",
        "bytes per region and round, each way",
        "round s",
        "slowest region's training s",
        "regions' training s, summed",
        "round / slowest region",
    )
    return _markdown(
        columns,
        costs,
        lambda cost: (
            f"| `{cost.setting}` | `{cost.variant}` | {len(cost.seeds)} "
            f"| {cost.bytes_each_way:,} | {cost.round_s:.1f} | {cost.slowest_region_s:.1f} "
            f"| {cost.regions_s:.1f} | {cost.round_s / cost.slowest_region_s:.2f} |"
        ),
    )
