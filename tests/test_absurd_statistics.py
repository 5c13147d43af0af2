"""One region's finite but absurd statistics (means of 1e200) cannot stop a run: they are
turned away with the region named, and the others pool as if it had not sent them."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc_flwr.config import FederationConfig
from fedmc_flwr.federation.aggregation import RegionUpdate, aggregate, screen
from fedmc_flwr.policies.moments import Moments, pool


def _update(region: int, moments: Moments) -> RegionUpdate:
    return RegionUpdate(region, [np.full(3, float(region + 1), np.float32), *moments.arrays()], 100)


def _moments(mean: float, std: float, count: float = 100.0) -> Moments:
    return Moments(count, np.array([mean, 2.0 * mean]), np.array([std**2, std**2]))


PREVIOUS = [np.zeros(3, np.float32), *Moments.empty(2).arrays()]


@pytest.mark.parametrize("rule", ["mean", "median", "multi-krum"])
def test_absurd_means_are_turned_away_and_the_rest_pool_finite(rule: str) -> None:
    honest = [_moments(5.0, 2.0), _moments(6.0, 3.0), _moments(4.0, 2.0)]
    updates = [_update(r, m) for r, m in enumerate(honest)] + [_update(3, _moments(1e200, 1.0))]
    federation = FederationConfig(aggregation=rule, byzantine=1)
    kept, rejected = screen(updates, PREVIOUS, federation, statistics=1)
    assert list(rejected) == [3]
    assert "statistics group 0: feature 1 has |mean| + std 2e+200" in rejected[3]
    assert 3 not in [u.region for u in kept]
    pooled = Moments.from_arrays(aggregate(kept, PREVIOUS, federation, statistics=1)[1:])
    assert np.isfinite(pooled.mean).all() and np.isfinite(pooled.var).all()
    if rule == "mean":  # exactly the honest regions' moments
        expected = pool([Moments.empty(2), *honest])
        np.testing.assert_allclose(pooled.var, expected.var)


def test_pooling_the_absurd_region_would_overflow() -> None:
    """What the screening prevents: the between-region term overflows to inf."""
    with np.errstate(over="ignore", invalid="ignore"):
        pooled = pool([_moments(5.0, 2.0), _moments(1e200, 1.0)])
    assert not np.isfinite(pooled.var).all()


def test_honest_regions_far_apart_are_kept() -> None:
    """Non-IID regions whose levels differ a hundredfold are no outliers."""
    updates = [_update(0, _moments(1.0, 0.5)), _update(1, _moments(100.0, 30.0))]
    kept, rejected = screen(updates, PREVIOUS, FederationConfig(), statistics=1)
    assert rejected == {} and len(kept) == 2


def test_a_region_that_shrinks_its_scale_cannot_make_an_honest_one_absurd() -> None:
    """Two regions, one sending zeros: the lower median is 0, but the global moments of
    earlier rounds keep the honest region's scale typical."""
    previous = [np.zeros(3, np.float32), *_moments(3e4, 1e3, count=1e4).arrays()]
    updates = [_update(0, _moments(3e4, 1e3)), _update(1, _moments(0.0, 0.0))]
    kept, rejected = screen(updates, previous, FederationConfig(), statistics=1)
    assert rejected == {} and len(kept) == 2
