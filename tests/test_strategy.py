"""Aggregation math and the reply format, without starting Flower."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc_flwr.config import FederationConfig, regions_of
from fedmc_flwr.evaluation import EvalResult
from fedmc_flwr.federation import wire
from fedmc_flwr.federation.accounting import split_update
from fedmc_flwr.federation.aggregation import (
    RegionUpdate,
    aggregate,
    by_region,
    check_update,
    shrink,
    weighted_mean,
)
from fedmc_flwr.federation.bundle import bundle
from fedmc_flwr.federation.wire import policy_name
from fedmc_flwr.policies.moments import Moments
from fedmc_flwr.sim.world import METRIC_NAMES


def _weights(value: float) -> list[np.ndarray]:
    """A network layer (float32) and a normaliser statistic (float64), like PPOLearner's."""
    return [np.full((2, 3), value, dtype=np.float32), np.full(4, value, dtype=np.float64)]


def test_weighted_mean_weights_by_examples_and_keeps_dtypes() -> None:
    mean = weighted_mean([_weights(1.0), _weights(4.0)], [3, 1])
    assert mean[0].dtype == np.float32 and mean[1].dtype == np.float64
    np.testing.assert_allclose(mean[0], 1.75)
    np.testing.assert_allclose(mean[1], 1.75)


def test_weighted_mean_rejects_bad_weights() -> None:
    with pytest.raises(ValueError, match="nothing"):
        weighted_mean([], [])
    with pytest.raises(ValueError, match="not all zero"):
        weighted_mean([_weights(1.0)], [0])
    with pytest.raises(ValueError, match="2 updates but 1"):
        weighted_mean([_weights(1.0), _weights(2.0)], [1])


def test_shrink_moves_toward_previous_global() -> None:
    out = shrink(_weights(2.0), _weights(0.0), mu=0.25)
    np.testing.assert_allclose(out[0], 1.5)
    assert out[0].dtype == np.float32
    np.testing.assert_array_equal(shrink(_weights(2.0), _weights(0.0), 0.0)[1], _weights(2.0)[1])
    with pytest.raises(ValueError, match="mu"):
        shrink(_weights(2.0), _weights(0.0), mu=1.0)


def test_aggregate_fedavg_and_shrink() -> None:
    updates = [RegionUpdate(0, _weights(1.0), 1), RegionUpdate(1, _weights(3.0), 1)]
    previous = _weights(10.0)
    avg = aggregate(updates, previous, FederationConfig(strategy="fedavg"), statistics=0)
    prox = aggregate(updates, previous, FederationConfig(strategy="shrink", mu=0.1), statistics=0)
    np.testing.assert_allclose(avg[1], 2.0)
    np.testing.assert_allclose(prox[1], 0.9 * 2.0 + 0.1 * 10.0)


def test_check_update_names_the_problem() -> None:
    reference = _weights(0.0)
    assert check_update(_weights(1.0), reference) is None
    assert "1 arrays" in check_update(_weights(1.0)[:1], reference)
    assert "shape" in check_update([np.zeros((3, 2), np.float32), reference[1]], reference)
    assert "dtype" in check_update([reference[0].astype(np.float64), reference[1]], reference)
    bad = _weights(1.0)
    bad[1][2] = np.nan
    assert "NaN" in check_update(bad, reference)
    bad[1][2] = np.inf
    assert "inf" in check_update(bad, reference)


def test_order_by_region_makes_the_sum_independent_of_arrival() -> None:
    rng = np.random.default_rng(0)
    updates = [
        RegionUpdate(r, [rng.normal(size=1000).astype(np.float32)], int(rng.integers(1, 9)))
        for r in range(5)
    ]
    config = FederationConfig()
    reference = aggregate(updates, updates[0].weights, config, statistics=0)
    for perm in (rng.permutation(5) for _ in range(5)):
        shuffled = [updates[i] for i in perm]
        assert [u.region for u in by_region(shuffled)] == list(range(5))
        np.testing.assert_array_equal(
            aggregate(shuffled, updates[0].weights, config, statistics=0)[0], reference[0]
        )


def test_two_updates_for_one_region_are_an_error() -> None:
    with pytest.raises(ValueError, match="two updates for region 1"):
        by_region([RegionUpdate(1, _weights(0.0), 1), RegionUpdate(1, _weights(1.0), 1)])


def test_split_update_cuts_a_multi_region_reply() -> None:
    metrics = (
        wire.covering([0, 2]) | wire.pack(0, {"env_steps": 8.0}) | wire.pack(2, {"env_steps": 4.0})
    )
    updates = split_update(bundle([*_weights(1.0), *_weights(2.0)]), metrics, per_region=2)
    assert [(u.region, u.num_examples) for u in updates] == [(0, 8), (2, 4)]
    np.testing.assert_array_equal(updates[1].weights[0], _weights(2.0)[0])
    with pytest.raises(ValueError, match="expected 2 per region"):
        split_update(bundle(_weights(1.0)), metrics, per_region=2)
    with pytest.raises(ValueError, match="env_steps"):
        split_update(bundle(_weights(1.0)), wire.covering([0]), per_region=2)
    with pytest.raises(ValueError, match="one bundle"):
        split_update(_weights(1.0), metrics, per_region=2)  # arrays not bundled


def test_regions_of_covers_every_region_once() -> None:
    for clients in (1, 2, 3, 5):
        served = [r for p in range(clients) for r in regions_of(p, clients, 3)]
        assert sorted(served) == [0, 1, 2]
    with pytest.raises(ValueError, match="partition-id"):
        regions_of(2, 2, 3)


def test_eval_result_survives_the_wire_bit_for_bit() -> None:
    result = EvalResult(
        policy="ppo-fedavg",
        region=1,
        seeds=3,
        steps=50,
        per_seed_reward=np.array([-0.1, -0.2000000000000001, -0.3]),
        means={name: 0.1 * k for k, name in enumerate(METRIC_NAMES)},
        latency_p95_ms=123.456,
    )
    back = wire.eval_result(wire.pack(1, wire.eval_metrics(result)), 1)
    assert back.row() == result.row()
    np.testing.assert_array_equal(back.per_seed_reward, result.per_seed_reward)
    with pytest.raises(ValueError, match="lacks"):
        wire.eval_result(wire.pack(1, {"policy": "x"}), 1)


def test_policy_name_says_which_arms_are_on() -> None:
    assert policy_name(FederationConfig()) == "ppo-fedavg"
    assert policy_name(FederationConfig(strategy="shrink", mu=0.1)) == "ppo-shrink"
    assert policy_name(FederationConfig(proximal_mu=0.01)) == "ppo-fedprox"
    both = FederationConfig(strategy="shrink", mu=0.1, proximal_mu=0.01)
    assert policy_name(both) == "ppo-fedprox-shrink"
    assert policy_name(FederationConfig(server_optimizer="fedadam")) == "ppo-fedadam"
    momentum = FederationConfig(server_optimizer="fedavgm", proximal_mu=0.01)
    assert policy_name(momentum) == "ppo-fedprox-fedavgm"


def test_aggregate_pools_statistics_across_regions_and_rounds() -> None:
    """The global moments after two rounds equal those of all the regions' data at once,
    each sample counted once; a plain average of the regions' arrays would lose the
    between-region spread of a feature whose level differs by region (here by one of its
    standard deviations, well inside what the statistics screen pools as sent)."""
    rng = np.random.default_rng(5)
    layer = np.zeros(3, dtype=np.float32)
    seen: list[np.ndarray] = []
    previous = [layer, *Moments.empty(2).arrays()]
    for _ in range(2):
        updates = []
        for region, size in ((0, 400), (1, 900), (2, 150)):
            data = np.column_stack(
                [rng.normal(region, 1.0, size), rng.exponential(region + 1, size)]
            )
            seen.append(data)
            updates.append(RegionUpdate(region, [layer, *Moments.of(data).arrays()], size))
        previous = aggregate(updates, previous, FederationConfig(), statistics=1)
    pooled = Moments.from_arrays(previous[1:])
    whole = np.concatenate(seen)
    assert pooled.count == len(whole)
    np.testing.assert_allclose(pooled.mean, whole.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(pooled.var, whole.var(axis=0), rtol=1e-10)
