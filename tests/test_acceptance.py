"""The 'acceptance' rule's bar: few honest replies turned away on the scores a clean
federation gave, hostile networks still turned away, and never every region at once."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc_flwr.config import FederationConfig
from fedmc_flwr.federation.aggregation import GAIN_KEPT, RegionUpdate, Weights, accepted

MEASURED = {
    5: [
        (-4.1498, [-0.9608, -1.0315, -1.059, -1.0993, -1.0023]),
        (-0.9419, [-0.7956, -0.8908, -0.894, -0.9268, -0.8472]),
        (-0.8226, [-0.8164, -0.8265, -0.8216, -0.8397, -0.7976]),
        (-0.8193, [-0.8249, -0.8149, -0.8055, -0.8276, -0.809]),
    ],
    10: [
        (
            -4.1094,
            [
                -0.9258,
                -0.9568,
                -0.9151,
                -1.0054,
                -1.0025,
                -1.0625,
                -1.3152,
                -0.9345,
                -1.0036,
                -1.0106,
            ],
        ),
        (
            -0.9556,
            [-0.9124, -0.9254, -0.89, -0.909, -0.9134, -0.9337, -0.9242, -0.9643, -0.9176, -0.9709],
        ),
        (
            -0.9052,
            [
                -0.8614,
                -0.8947,
                -0.9037,
                -0.8994,
                -0.9099,
                -0.9272,
                -0.8878,
                -0.882,
                -0.8983,
                -0.914,
            ],
        ),
        (
            -0.8868,
            [
                -0.8791,
                -0.8865,
                -0.8779,
                -0.8705,
                -0.887,
                -0.8915,
                -0.8929,
                -0.8777,
                -0.8779,
                -0.8942,
            ],
        ),
    ],
}
"""The server's scores (mean reward per job on its validation worlds) of the previous
global network and of each region's network, round by round, in clean FedAvg
federations of 5 and 10 regions (the attack table's world, `bench/bench_attacks.py`
SMALL with 4 rounds)."""
ROUND_ONE = (-4.2195, [-0.9834, -1.054, -0.9985, -1.0768, -1.0159])
"""Round 1 of a clean 5-region federation of the attack table (`bench/bench_attacks.py`
SMALL, 3 rounds): the random start's score and each region's network's."""
ROUND_ONE_HOSTILE = {"sign-flip": -4.2288, "colluding": -4.4949, "noise": -4.6538}
"""The same round's last region sending each network attack of the table instead
(`bench_attacks.attacked`), scored under the same statistics."""


def _judge(reference: float, scores: list[float]) -> dict[int, str]:
    """`accepted` on networks that are markers: the score looks each one up."""
    table = {-1: reference} | dict(enumerate(scores))
    previous = [np.array([-1.0], np.float32)]
    updates = [RegionUpdate(k, [np.array([k], np.float32)], 100) for k in range(len(scores))]

    def score(weights: Weights) -> float:
        return table[int(weights[0][0])]

    kept, rejected = accepted(updates, previous, 1, FederationConfig().acceptance_tolerance, score)
    assert len(kept) + len(rejected) == len(scores) and kept
    return rejected


@pytest.mark.parametrize("regions", [5, 10])
def test_a_clean_federation_keeps_every_measured_reply(regions: int) -> None:
    """Round 1 of the 10-region federation has an honest network 0.31 below the median
    (a tenth of the round's gain): a bar of 10% of the median's size alone turned it away."""
    rounds = MEASURED[regions]
    assert all(_judge(reference, scores) == {} for reference, scores in rounds)


@pytest.mark.parametrize("attack", sorted(ROUND_ONE_HOSTILE))
def test_round_one_hostile_networks_measured_are_turned_away(attack: str) -> None:
    reference, honest = ROUND_ONE
    rejected = _judge(reference, [*honest[:4], ROUND_ONE_HOSTILE[attack]])
    assert list(rejected) == [4]


def test_a_hostile_network_better_than_the_random_start_is_still_turned_away() -> None:
    """Round 1: the previous network is the random start, which a sign-flipped network
    may beat; one that keeps less than GAIN_KEPT of the median's gain over it is turned
    away."""
    reference, honest = MEASURED[5][0]
    rejected = _judge(reference, [*honest[:4], -2.0])
    assert list(rejected) == [4]
    assert "lower median" in rejected[4] and "federation.acceptance_tolerance 0.1" in rejected[4]
    assert "0.25 of its gain" in rejected[4]
    middle = sorted([*honest[:4], -2.0])[2]
    kept_share = (-2.0 - reference) / (middle - reference)
    assert kept_share < GAIN_KEPT


def test_copies_of_a_bad_network_cannot_lower_the_bar_below_the_previous_one() -> None:
    """Four of five regions send one bad network: the median is theirs, but the bar is
    never below the previous network's score."""
    rejected = _judge(-0.82, [-0.81, -1.5, -1.5, -1.5, -1.5])
    assert sorted(rejected) == [1, 2, 3, 4]


def test_every_region_is_never_turned_away_at_once() -> None:
    """The previous network beats every candidate: those within the tolerance of the best
    candidate are kept."""
    rejected = _judge(-0.5, [-0.9, -0.8, -0.85, -1.2])
    assert sorted(rejected) == [0, 3]
    assert "every candidate fell below the previous global network's -0.5" in rejected[3]
