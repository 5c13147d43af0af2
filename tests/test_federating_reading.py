""" "What federating buys" explains each setting where no federated variant beats the local
learners, from that setting's own rows, and is silent where one does."""

from __future__ import annotations

from dataclasses import replace

from fedmc_flwr.analysis.federating import Gain, RaceToReference, gains_table, why_it_does_not_pay
from fedmc_flwr.analysis.statistics import Estimate


def _gain(
    setting: str,
    variant: str,
    versus_local: float,
    first: float | None = None,
    race: dict[str, RaceToReference] | None = None,
    centralised: float | None = None,
    since: str = "joining",
) -> Gain:
    """A row whose differences have a 95% half-width of 0.003."""
    estimate = Estimate(versus_local, 0.003, 5)
    first_estimate = Estimate(first, 0.003, 5) if first is not None else None
    central = Estimate(centralised, 0.003, 5) if centralised is not None else None
    seeds = [0, 1, 2, 3, 4]
    return Gain(
        setting, variant, "all regions", seeds, estimate, central, first_estimate, race, since
    )


RACE = {"ppo-fedavg": RaceToReference(6, 57.0), "ppo-local": RaceToReference(4, 45.0)}


def test_each_setting_that_does_not_pay_gets_its_own_reason() -> None:
    reading = why_it_does_not_pay(
        [
            _gain("busy", "ppo-fedavg", -0.006),
            _gain("busy", "ppo-fine-tuned", -0.004),
            _gain("balanced", "ppo-fedavg", 0.001),
            _gain("poor", "ppo-fedavg", 0.1),
            _gain("late", "ppo-fedavg", -0.001, first=0.02, race=RACE),
        ]
    )
    lines = reading.splitlines()[2:]
    assert [line.split("`")[1] for line in lines] == ["busy", "balanced", "late"]
    busy, balanced, late = lines
    assert "local learners beat FedAvg, -0.0060 ± 0.0030 (costs)" in busy
    assert "Against local-only, `ppo-fine-tuned` -0.0040 ± 0.0030 (costs)." in busy
    assert "no cost of averaging" in balanced and "Against local-only" not in balanced
    assert "can tell the regions apart" in reading.splitlines()[0]
    assert "joining pays at its first evaluation, +0.0200 ± 0.0030 (pays)" in late
    assert "the federated learner beats SED in 6 rounds, its local learner in 4 rounds" in late


def test_a_late_region_that_never_beats_sed_says_so() -> None:
    race = {"ppo-fedavg": RaceToReference(2, 10.0), "ppo-local": RaceToReference(None, None)}
    reading = why_it_does_not_pay([_gain("late", "ppo-fedavg", 0.0, first=0.02, race=race)])
    late = reading.splitlines()[-1]
    assert late.endswith(
        "the federated learner beats SED in 2 rounds, its local learner not within the run."
    )


def test_a_personal_variant_that_pays_leaves_its_setting_unexplained() -> None:
    gains = [_gain("busy", "ppo-fedavg", -0.006), _gain("busy", "ppo-fine-tuned", 0.01)]
    assert why_it_does_not_pay(gains) == ""


def test_a_drifting_region_is_read_from_the_change_not_from_joining() -> None:
    race = {"ppo-fedavg": RaceToReference(None, None), "ppo-local": RaceToReference(None, None)}
    drift = _gain("drift", "ppo-fedavg", 0.0, first=0.04, race=race, since="the change")
    line = why_it_does_not_pay([drift]).splitlines()[-1]
    assert "federating pays at the round of the change, +0.0400 ± 0.0030 (pays)" in line
    assert "from the change, the federated learner beats SED not within the run" in line
    assert "joining" not in line


def test_a_tie_with_local_that_centralised_beats_blames_the_averaging() -> None:
    line = why_it_does_not_pay([_gain("small", "ppo-fedavg", 0.0, centralised=-0.05)])
    assert "FedAvg ties its local learners, +0.0000 ± 0.0030" in line
    assert "centralised PPO, trained on the same experience pooled, beats FedAvg" in line
    assert "no cost of averaging" not in line


def test_a_loss_to_local_that_centralised_shares_is_not_blamed_on_the_regions() -> None:
    """Local-only and centralised PPO both beat FedAvg: one policy for every region does
    better than the average, so the regions' differences are not the reason."""
    both = why_it_does_not_pay([_gain("small", "ppo-fedavg", -0.04, centralised=-0.05)])
    assert "and so does centralised PPO on the same experience pooled, -0.0500" in both
    assert "the shortfall is the averaging's" in both and "want different" not in both
    alone = why_it_does_not_pay([_gain("busy", "ppo-fedavg", -0.006, centralised=0.0)])
    assert "its regions want different policies" in alone


def test_each_set_of_judged_regions_is_read_on_its_own() -> None:
    """Regions that trained on the events and those that never did are separate rows: one
    that pays does not silence the other, nor is it listed as the other's variant."""
    never = replace(_gain("rare", "ppo-fedavg", 0.06), scope="a, b (never trained)")
    trained = _gain("rare", "ppo-fedavg", -0.08, centralised=-0.1)
    trained = replace(trained, scope="c (trained)")
    lines = why_it_does_not_pay([never, trained]).splitlines()
    bullets = [line for line in lines if line.startswith("- ")]
    assert len(bullets) == 1
    assert bullets[0].startswith("- `rare` (c (trained)): its local learners beat FedAvg")
    assert "Against local-only" not in "\n".join(lines)


def test_a_row_published_before_a_column_existed_gets_a_dash_there() -> None:
    table = gains_table(["| `old` | `ppo-fedavg` | all regions | 5 | +0.1 | - | - | - | - |"])
    header, _, row = table.splitlines()
    assert row.count("|") == header.count("|")
    assert row.endswith("| - | - |")


def test_a_kept_settings_lines_stand_where_the_setting_stands() -> None:
    """A setting measured elsewhere keeps its published line, in its place among the
    settings (the page's order), not after every setting measured here."""
    kept = "- `first` (all regions): FedAvg ties its local learners, as published."
    measured = [_gain("second", "ppo-fedavg", -0.006), _gain("third", "ppo-fedavg", 0.0)]
    lines = why_it_does_not_pay(measured, {"first": [kept]}, order=["first", "second", "third"])
    assert [line.split("`")[1] for line in lines.splitlines()[2:]] == ["first", "second", "third"]
    unordered = why_it_does_not_pay(measured, {"first": [kept]}).splitlines()[2:]
    assert [line.split("`")[1] for line in unordered] == ["second", "third", "first"]
    assert "can tell the regions apart" in lines.splitlines()[0]
