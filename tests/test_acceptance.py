"""The 'acceptance' rule's bar: few honest replies turned away on the scores a clean
federation gave, hostile networks still turned away, and never every region at once."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc_flwr.config import FederationConfig
from fedmc_flwr.federation.aggregation import RegionUpdate, Weights, accepted

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
def test_a_clean_federation_loses_at_most_a_tenth_of_its_replies(regions: int) -> None:
    rounds = MEASURED[regions]
    turned_away = sum(len(_judge(reference, scores)) for reference, scores in rounds)
    assert turned_away <= 0.1 * sum(len(scores) for _, scores in rounds)


def test_a_hostile_network_better_than_the_random_start_is_still_turned_away() -> None:
    """Round 1: the previous network is the random start, which a sign-flipped network
    beats; the candidates' median sets the bar."""
    reference, honest = MEASURED[5][0]
    rejected = _judge(reference, [*honest[:4], -2.0])
    assert list(rejected) == [4]
    assert "lower median" in rejected[4] and "federation.acceptance_tolerance 0.1" in rejected[4]


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
