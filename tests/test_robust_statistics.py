"""What regions say about their data: one region of several that shifts its means or
scales its variances, by a little or a lot, once or further every round, moves the pooled
normaliser statistics by no more than its share of the honest regions' own spread, and a
region far from the others is turned away with the feature and the figures; a clean
federation pools exactly as before."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc_flwr.config import FaultConfig, FederationConfig
from fedmc_flwr.federation import faults
from fedmc_flwr.federation.aggregation import RegionUpdate, aggregate, pool_statistics, screen
from fedmc_flwr.policies.moments import (
    POOLED_SPREADS,
    POOLED_STD_RATIO,
    Moments,
    bounded,
    centre,
    outliers,
    pool,
    std_ratio,
)

DIM = 4
LAYER = np.zeros(2, np.float32)
PREVIOUS = [LAYER, *Moments.empty(DIM).arrays()]
ROBUST = FederationConfig(aggregation="median")
"""A rule that claims a breakdown point, under which each region's statistics are pooled
within the others' band ('mean' claims none, and pools every region it keeps exactly)."""


def _honest(regions: int, seed: int = 0) -> list[Moments]:
    """Non-IID regions as the simulator's are: levels and spreads that differ by a few
    tens of percent from region to region (docs/security.md, measured), on features of
    very different sizes (a queue, a latency in seconds, a carbon intensity, a flag)."""
    rng = np.random.default_rng(seed)
    level = np.array([2.0, 0.35, 270.0, 0.95])
    spread = np.array([2.5, 0.25, 300.0, 0.2])
    out = []
    for _ in range(regions):
        mean = level * rng.uniform(0.75, 1.25, DIM)
        std = spread * rng.uniform(0.7, 1.4, DIM)
        out.append(Moments(8000.0, mean, std**2))
    return out


def _updates(parts: list[Moments]) -> list[RegionUpdate]:
    return [RegionUpdate(r, [LAYER, *m.arrays()], 100) for r, m in enumerate(parts)]


def _poisoned(part: Moments, kind: str, scale: float) -> Moments:
    sent, _ = faults.corrupt(
        FaultConfig(kind=kind, scale=scale), [LAYER, *part.arrays()], 100, PREVIOUS, 1
    )
    return Moments.from_arrays(sent[1:])


def _assert_within_honest_spread(
    pooled: Moments, honest: Moments, regions: int, hostile: int = 1
) -> None:
    """A region is pooled at most POOLED_SPREADS spreads of the others away, with at most
    e times their standard deviation: the pooled mean moves by at most the hostile
    regions' share of that, and the pooled standard deviation grows by at most the
    between and within terms of that share (each spread here is at most the honest
    regions' whole standard deviation)."""
    share = hostile / regions
    std = np.sqrt(honest.var)
    moved = np.abs(pooled.mean - honest.mean) / std
    assert np.all(moved <= share * POOLED_SPREADS), moved
    most = np.sqrt(1.0 + share * (POOLED_SPREADS**2 + np.e**2))
    assert np.all(np.sqrt(pooled.var) <= most * std), np.sqrt(pooled.var) / std
    assert np.all(np.sqrt(pooled.var) >= np.sqrt(1.0 - share) * std)


def test_a_clean_federation_pools_exactly_where_its_spread_is_typical() -> None:
    """Honest regions inside the band pool exactly, except on a feature whose pooled
    standard deviation exceeds POOLED_STD_RATIO times the median region's (here one
    feature of three regions, whose standard deviations lie 0.18 to 0.33), held there."""
    for regions in (3, 5, 10):
        honest = _honest(regions)
        assert outliers(honest) == {}
        assert all(b is h for b, h in zip(bounded(honest), honest, strict=True))
        pooled = Moments.from_arrays(
            pool_statistics(PREVIOUS[1:], [m.arrays() for m in honest], [100] * regions)
        )
        exact = pool([Moments.empty(DIM), *honest])
        np.testing.assert_allclose(pooled.mean, exact.mean, rtol=1e-15)
        typical = std_ratio(honest) <= POOLED_STD_RATIO
        assert typical.sum() >= DIM - (regions == 3)
        np.testing.assert_allclose(pooled.var[typical], exact.var[typical], rtol=1e-15)
        limit = POOLED_STD_RATIO * np.sqrt(centre(honest).var[~typical])
        np.testing.assert_allclose(np.sqrt(pooled.var[~typical]), limit, rtol=1e-12)


@pytest.mark.parametrize(("regions", "hostile"), [(5, 1), (5, 2), (10, 4), (3, 1)])
def test_scaled_variances_cannot_widen_the_pool_past_the_honest_spread(
    regions: int, hostile: int
) -> None:
    """Hostile regions (fewer than half) that send their variances x100 are each pooled
    at the band's edge, e times the others' standard deviation or more, and those shares
    add up (about twice the honest standard deviation at 2 of 5) unless the pooled
    standard deviation is held at POOLED_STD_RATIO times the median region's, which
    lies among the honest regions' own standard deviations about their means."""
    honest = _honest(regions - hostile)
    sent = [_poisoned(m, "scale-variance", 100.0) for m in _honest(hostile, seed=50)]
    kept, rejected = screen(_updates([*honest, *sent]), PREVIOUS, ROBUST, statistics=1)
    assert rejected == {}
    pooled = Moments.from_arrays(aggregate(kept, PREVIOUS, ROBUST, 1)[1:])
    means = np.stack([m.mean for m in honest])
    reach = (means.max(axis=0) - means.min(axis=0)) ** 2
    widest = np.sqrt(np.max([m.var for m in honest], axis=0) + reach)
    assert np.all(np.sqrt(pooled.var) <= POOLED_STD_RATIO * widest)


@pytest.mark.parametrize("regions", [3, 5, 10])
@pytest.mark.parametrize(
    ("kind", "scale"),
    [
        ("shift-means", 0.5),
        ("shift-means", 3.0),
        ("shift-means", 30.0),
        ("shift-means", -300.0),
        ("scale-variance", 5.0),
        ("scale-variance", 100.0),
    ],
)
def test_one_hostile_region_moves_the_pool_by_its_share_of_the_honest_spread_at_most(
    regions: int, kind: str, scale: float
) -> None:
    honest = _honest(regions - 1)
    sent = _poisoned(_honest(1, seed=99)[0], kind, scale)
    updates = _updates([*honest, sent])
    kept, rejected = screen(updates, PREVIOUS, ROBUST, statistics=1)
    assert set(rejected) <= {regions - 1}  # never an honest region
    pooled = Moments.from_arrays(aggregate(kept, PREVIOUS, ROBUST, 1)[1:])
    _assert_within_honest_spread(pooled, pool(honest), regions)


def test_a_region_far_from_the_others_is_turned_away_naming_the_feature_and_figures() -> None:
    honest = _honest(4)
    updates = _updates([*honest, _poisoned(_honest(1, seed=99)[0], "shift-means", 30.0)])
    kept, rejected = screen(updates, PREVIOUS, FederationConfig(), statistics=1)
    assert [u.region for u in kept] == [0, 1, 2, 3]
    assert list(rejected) == [4]
    why = rejected[4]
    assert why.startswith("rejected update: statistics group 0: feature 3 has mean 31.17, ")
    assert "spreads from the other regions' median" in why and "at most 8 allowed" in why
    assert "\n" not in why and "<" not in why
    updates[4] = _updates([_poisoned(honest[0], "scale-variance", 1e4)])[0]
    updates[4] = RegionUpdate(4, updates[4].weights, 100)
    _, rejected = screen(updates, PREVIOUS, FederationConfig(), statistics=1)
    assert "has standard deviation" in rejected[4] and "times allowed" in rejected[4]


def test_an_escalating_shift_cannot_ratchet_the_global_moments() -> None:
    """Every round one region of five shifts its means ten times further than the round
    before; each round is judged against the other regions of that round, never against
    the global moments it poisoned, so the global moments stay where the honest regions
    put them."""
    weights, honest_weights = list(PREVIOUS), list(PREVIOUS)
    federation = ROBUST
    for rnd in range(1, 8):
        honest = _honest(4, seed=rnd)
        sent = _poisoned(_honest(1, seed=100 + rnd)[0], "shift-means", 0.1 * 10**rnd)
        kept, _ = screen(_updates([*honest, sent]), weights, federation, statistics=1)
        weights = aggregate(kept, weights, federation, 1)
        honest_weights = aggregate(_updates(honest), honest_weights, federation, 1)
        _assert_within_honest_spread(
            Moments.from_arrays(weights[1:]), Moments.from_arrays(honest_weights[1:]), 5
        )


def test_colluders_below_half_are_held_as_one_is() -> None:
    honest = _honest(7)
    hostile = [_poisoned(m, "shift-means", 3.0) for m in _honest(3, seed=50)]
    kept, rejected = screen(_updates([*honest, *hostile]), PREVIOUS, ROBUST, 1)
    assert set(rejected) <= {7, 8, 9}
    pooled = Moments.from_arrays(aggregate(kept, PREVIOUS, ROBUST, 1)[1:])
    _assert_within_honest_spread(pooled, pool(honest), regions=10, hostile=3)


def test_the_scoring_statistics_stay_among_what_the_honest_regions_report() -> None:
    honest = _honest(4)
    for shift in (3.0, 3e3):
        middle = centre([*honest, _poisoned(honest[0], "shift-means", shift)])
        means = np.stack([m.mean for m in honest])
        assert np.all(middle.mean >= means.min(axis=0)) and np.all(middle.mean <= means.max(axis=0))
        honest_var = np.stack([m.var + (m.mean - middle.mean) ** 2 for m in honest])
        assert np.all(middle.var <= honest_var.max(axis=0))


def test_two_regions_are_pooled_as_sent() -> None:
    """With two regions nothing tells which one is odd: both count (the absurd bound and
    the count cap still hold)."""
    parts = [
        Moments(100.0, np.full(DIM, 1.0), np.full(DIM, 0.25)),
        Moments(100.0, np.full(DIM, 100.0), np.full(DIM, 900.0)),
    ]
    assert outliers(parts) == {} and bounded(parts) == parts


def test_under_mean_a_kept_region_outside_the_band_pools_exactly() -> None:
    """'mean' claims no breakdown point: a region whose spread is five times the others'
    (inside what the screen turns away) pools as sent, as an honest busy region must;
    a robust rule holds it at the band's edge."""
    honest = _honest(3)
    wide = _poisoned(_honest(1, seed=99)[0], "scale-variance", 25.0)
    updates = _updates([*honest, wide])
    kept, rejected = screen(updates, PREVIOUS, FederationConfig(), statistics=1)
    assert rejected == {} and len(kept) == 4
    exact = pool([Moments.empty(DIM), *honest, wide])
    under_mean = Moments.from_arrays(aggregate(kept, PREVIOUS, FederationConfig(), 1)[1:])
    np.testing.assert_array_equal(under_mean.var, exact.var)
    held = Moments.from_arrays(aggregate(kept, PREVIOUS, ROBUST, 1)[1:])
    assert np.all(held.var < exact.var)
