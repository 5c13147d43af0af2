"""The exact dispatcher (`sim/optimum.py`) against what queueing theory knows in closed form."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc_flwr.sim.optimum import (
    RULES,
    QueueingSystem,
    evaluate,
    mm1_response,
    optimal,
    rule_probabilities,
    sed_slower_ties,
    split_response,
)


@pytest.mark.parametrize("load", [0.3, 0.7])
def test_one_server_is_mm1(load: float) -> None:
    """Every rule and the optimum are the one server's M/M/1 time, 1 / (mu - lambda)."""
    system = QueueingSystem.at_load([2.0], load, 200)  # P(200 jobs) = load**200: none
    exact = mm1_response(2.0, system.arrival_rate)
    best = optimal(system)
    assert best.mean_response == pytest.approx(exact, rel=1e-6)
    assert best.response_bounds[0] <= exact * (1 + 1e-9)
    assert best.response_bounds[1] >= exact * (1 - 1e-9)
    for rule in RULES:
        assert evaluate(system, rule).mean_response == pytest.approx(exact, rel=1e-6)


def test_random_dispatch_is_independent_mm1_queues() -> None:
    """Uniform random dispatch splits the Poisson stream into independent M/M/1 queues,
    each fed lambda / K (stable here: the slow server runs at 0.75)."""
    rates = (2.0, 1.0)
    system = QueueingSystem.at_load(rates, 0.5, 120)
    exact = split_response(rates, [0.5, 0.5], system.arrival_rate)
    assert exact == pytest.approx(0.5 / (2.0 - 0.75) + 0.5 / (1.0 - 0.75))
    assert evaluate(system, "random").mean_response == pytest.approx(exact, rel=1e-6)


def test_equal_speeds_make_jsq_optimal() -> None:
    """Identical servers: the optimum is join-the-shortest-queue (Winston 1977), in value
    and in every state away from the truncation."""
    system = QueueingSystem.at_load([1.0, 1.0, 1.0], 0.7, 24)
    best = optimal(system)
    jsq = evaluate(system, "jsq")
    assert best.mean_response == pytest.approx(jsq.mean_response, rel=1e-6)
    lengths = np.indices(system.shape)
    inside = lengths.max(axis=0) < 12
    chosen = np.take_along_axis(lengths, best.policy[None], axis=0)[0]
    assert (chosen[inside] == lengths.min(axis=0)[inside]).all()
    # and SED is JSQ when the speeds are equal
    assert evaluate(system, "sed").mean_response == pytest.approx(jsq.mean_response, rel=1e-9)


def test_sed_is_optimal_at_very_low_load() -> None:
    """Nearly every arrival finds an empty system, where SED picks the fastest server,
    as the optimum does: their values meet as the load falls."""
    gaps = []
    for load in (0.02, 0.1, 0.3):
        system = QueueingSystem.at_load([10.0, 1.0], load, 40)
        gaps.append(evaluate(system, "sed").mean_response / optimal(system).mean_response - 1)
    assert gaps[0] < 1e-4
    assert 0 <= gaps[0] <= gaps[1] <= gaps[2]


def test_the_optimum_beats_every_rule_and_sed_falls_behind_with_the_speed_ratio() -> None:
    """With unequal speeds the optimum is strictly better than SED, JSQ and random, and
    SED's gap grows with the ratio of the speeds (Hyytia; Gardner and Harchol-Balter)."""
    gaps = []
    for ratio in (2.0, 5.0, 10.0):
        system = QueueingSystem.at_load([ratio, 1.0], 0.7, 40)
        best = optimal(system).mean_response
        values = {rule: evaluate(system, rule).mean_response for rule in RULES}
        assert all(value > best * (1 + 1e-4) for value in values.values())
        gaps.append(values["sed"] / best - 1)
    assert gaps[0] < gaps[1] < gaps[2]
    assert gaps[2] > 0.05


def test_the_optimal_policy_evaluated_as_a_rule_has_the_optimal_value() -> None:
    system = QueueingSystem.at_load([5.0, 2.0, 1.0], 0.6, 16)
    best = optimal(system)
    again = evaluate(system, best.policy)
    assert again.mean_response == pytest.approx(best.mean_response, rel=1e-6)
    low, high = best.response_bounds
    assert low <= best.mean_response <= high
    assert high - low <= 1e-6 * high


def test_doubling_the_truncation_changes_nothing_at_moderate_load() -> None:
    system = QueueingSystem.at_load([5.0, 1.0], 0.5, 30)
    for rule in ("sed", "jsq"):
        small = evaluate(system, rule).mean_response
        assert evaluate(system.doubled(), rule).mean_response == pytest.approx(small, rel=1e-6)
    small = optimal(system).mean_response
    assert optimal(system.doubled()).mean_response == pytest.approx(small, rel=1e-6)


def test_rules_share_ties_and_never_choose_a_full_queue() -> None:
    system = QueueingSystem.at_load([2.0, 1.0], 0.5, 4)
    sed = rule_probabilities(system, "sed")
    # (1, 0): SED's (1 + 1) / 2 against (0 + 1) / 1, a tie shared equally
    assert sed[:, 1, 0] == pytest.approx([0.5, 0.5])
    assert sed[:, 0, 0] == pytest.approx([1.0, 0.0])
    assert sed[:, 4, 0] == pytest.approx([0.0, 1.0])  # the fast queue is full
    assert sed[:, 4, 4] == pytest.approx([0.0, 0.0])  # every queue full: the job is lost
    for rule in RULES:
        total = rule_probabilities(system, rule).sum(axis=0)
        assert total[:4, :4] == pytest.approx(np.ones((4, 4)))


def test_sed_with_ties_to_the_slower_server() -> None:
    """It sends SED's ties to the slower server and is otherwise SED; at 2:1 and load 0.5
    it is the optimum (SED's even split is 2.8% above it), at 10:1 and load 0.9 it stays
    behind the optimum but ahead of SED."""
    system = QueueingSystem.at_load([2.0, 1.0], 0.5, 40)
    table = sed_slower_ties(system)
    assert table[1, 0] == 1 and table[3, 1] == 1  # (1 + 1) / 2 = (0 + 1) / 1; 4 / 2 = 2 / 1
    assert table[0, 0] == 0 and table[2, 0] == 1 and table[1, 1] == 0
    assert table[40, 0] == 1 and table[40, 40] == -1  # a full fast queue; every queue full
    best = optimal(system).mean_response
    assert evaluate(system, table).mean_response == pytest.approx(best, rel=1e-6)
    assert evaluate(system, "sed").mean_response > 1.02 * best
    loaded = QueueingSystem.at_load([10.0, 1.0], 0.9, 80)
    slower = evaluate(loaded, sed_slower_ties(loaded)).mean_response
    assert optimal(loaded).mean_response < slower < evaluate(loaded, "sed").mean_response


def test_bad_systems_are_refused() -> None:
    with pytest.raises(ValueError, match="stable"):
        QueueingSystem.at_load([1.0, 1.0], 1.0, 10)
    with pytest.raises(ValueError, match="one cap per server"):
        QueueingSystem((1.0, 1.0), 1.0, (10,))
    system = QueueingSystem.at_load([1.0, 1.0], 0.5, 3)
    with pytest.raises(ValueError, match="unknown rule"):
        evaluate(system, "fastest")
    with pytest.raises(ValueError, match="full queue"):
        evaluate(system, np.zeros(system.shape, dtype=np.int64))
