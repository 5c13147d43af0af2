"""Hostile regions beyond a scaled update, without Flower: Multi-Krum's maths against a
brute-force reading of its definition, the attacks it turns away (a sign-flipped update,
a free rider) as `failed` rows with their reasons, and pooled normaliser statistics that
one region's claimed moments (a huge count, a variance of 0) cannot ruin. A real Flower
run in which Multi-Krum turns a sign-flipped region away round after round is in
test_mixed_federation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

from fedmc_flwr.config import ConfigError, FaultConfig, FederationConfig, load_config
from fedmc_flwr.evaluation import EvalResult
from fedmc_flwr.federation import faults, wire
from fedmc_flwr.federation.aggregation import (
    FREE_RIDER_SHARE,
    RegionUpdate,
    aggregate,
    capped_counts,
    free_riders,
    krum_scores,
    multi_krum,
    pool_statistics,
    screen,
)
from fedmc_flwr.federation.bundle import bundle
from fedmc_flwr.federation.strategy import RegionStrategy
from fedmc_flwr.policies.moments import Moments, pool

KRUM = FederationConfig(aggregation="multi-krum", byzantine=1)
DIM = 50


def _honest(rng: np.random.Generator, regions: int) -> list[np.ndarray]:
    """Updates that share a direction (the task's gradient) plus each region's noise."""
    common = rng.normal(size=DIM)
    return [common + 0.5 * rng.normal(size=DIM) for _ in range(regions)]


def _update(region: int, delta: np.ndarray, steps: int = 100) -> RegionUpdate:
    return RegionUpdate(region, [delta.astype(np.float32)], steps)


def test_krum_scores_follow_the_definition() -> None:
    """Score of i: the sum of squared distances to its n - f - 2 nearest others."""
    rng = np.random.default_rng(0)
    flat = rng.normal(size=(7, 5))
    for f in (0, 1, 2, 3):
        nearest = max(1, 7 - f - 2)
        expected = [
            sum(
                sorted(float(np.sum((flat[i] - flat[j]) ** 2)) for j in range(7) if j != i)[
                    :nearest
                ]
            )
            for i in range(7)
        ]
        np.testing.assert_allclose(krum_scores(flat, f), expected, rtol=1e-9)
        chosen, _ = multi_krum(flat, f)
        assert len(chosen) == 7 - f and chosen == sorted(chosen)


def test_multi_krum_keeps_the_honest_majority_against_sign_flipped_updates() -> None:
    rng = np.random.default_rng(1)
    for regions, hostile in ((3, 1), (5, 1), (10, 2), (10, 3)):
        deltas = _honest(rng, regions)
        attackers = list(range(regions - hostile, regions))
        for k in attackers:
            deltas[k] = -10 * deltas[k]
        chosen, _ = multi_krum(np.stack(deltas), hostile)
        assert set(chosen).isdisjoint(attackers), (regions, hostile, chosen)
        assert len(chosen) == regions - hostile


def test_multi_krum_is_fooled_by_colluders_beyond_its_breakdown_point() -> None:
    """Two colluding copies of one hostile update stand nearest to each other. At 5
    regions Krum's condition n >= 2f + 3 allows f = 1 only: with byzantine = 1 a copy is
    kept, and byzantine = 2 is no help (each copy's one nearest neighbour is the other).
    At 7 regions byzantine = 2 keeps both out (docs/security.md, breakdown points)."""
    rng = np.random.default_rng(2)
    deltas = _honest(rng, 5)
    deltas[3] = deltas[4] = -10 * deltas[0]
    for f in (1, 2):
        chosen, _ = multi_krum(np.stack(deltas), f)
        assert {3, 4} & set(chosen), f
    deltas = _honest(rng, 7)
    deltas[5] = deltas[6] = -10 * deltas[0]
    chosen, _ = multi_krum(np.stack(deltas), 2)
    assert set(chosen).isdisjoint({5, 6})


def test_a_free_rider_is_turned_away_and_counts_as_the_hostile_region() -> None:
    """The global weights sent back are an update of 0, which Multi-Krum alone would keep
    (nearest to every honest update when, as PPO's are, they point in many directions);
    found first, it uses up the one hostile region assumed, so no honest region is dropped
    in its place."""
    rng = np.random.default_rng(3)
    deltas = [rng.normal(size=DIM) for _ in range(2)]
    chosen, _ = multi_krum(np.stack([deltas[0], deltas[1], np.zeros(DIM)]), 1)
    assert 2 in chosen
    updates = [_update(0, deltas[0]), _update(1, deltas[1]), _update(2, np.zeros(DIM))]
    kept, rejected = screen(updates, [np.zeros(DIM, np.float32)], KRUM, statistics=0)
    assert [u.region for u in kept] == [0, 1]
    assert list(rejected) == [2] and rejected[2].startswith("free rider")
    assert free_riders(np.array([1.0, 1.0, FREE_RIDER_SHARE / 2])) == [2]
    assert free_riders(np.array([1.0, 1.0, 10 * FREE_RIDER_SHARE])) == []
    assert free_riders(np.zeros(3)) == []  # nobody moved: nobody can be told apart


def test_screen_names_every_update_it_turns_away() -> None:
    rng = np.random.default_rng(4)
    deltas = _honest(rng, 5)
    deltas[4] = -10 * deltas[4]
    previous = [np.zeros(DIM, np.float32), *Moments.empty(2).arrays()]
    stats = Moments(10.0, np.zeros(2), np.ones(2)).arrays()
    updates = [RegionUpdate(r, [d.astype(np.float32), *stats], 10) for r, d in enumerate(deltas)]
    broken = Moments(10.0, np.zeros(2), np.array([1.0, -1.0])).arrays()
    updates[0] = RegionUpdate(0, [deltas[0].astype(np.float32), *broken], 10)
    kept, rejected = screen(updates, previous, KRUM, statistics=1)
    assert set(rejected) == {0, 4}
    assert rejected[0] == "rejected update: statistics group 0 has a negative variance"
    assert rejected[4].startswith("multi-krum: score") and "federation.byzantine 1" in rejected[4]
    assert [u.region for u in kept] == [1, 2, 3]
    # other rules keep every well-formed update: screening is Multi-Krum's
    kept, rejected = screen(updates, previous, FederationConfig(), statistics=1)
    assert list(rejected) == [0] and len(kept) == 4


def test_the_strategy_records_what_multi_krum_turns_away_as_failed() -> None:
    rng = np.random.default_rng(5)
    deltas = _honest(rng, 3)
    deltas[2] = -10 * deltas[2]
    failures: list[tuple[int, str, dict[int, str]]] = []
    fits: list[list[int]] = []

    class Recorder:
        def on_fit(self, server_round, updates, weights, wall_s, **saved) -> None:
            fits.append([u.region for u in updates])

        def on_failures(self, server_round: int, phase: str, failed: dict[int, str]) -> None:
            failures.append((server_round, phase, failed))

        def on_evaluate(self, server_round: int, results: list[EvalResult], wall_s: float):
            pass

        def on_abort(self, reason: str) -> None:
            pass

    strategy = RegionStrategy(
        [np.zeros(DIM, np.float32)], KRUM, 3, lambda rnd: {}, Recorder(), 0, max_steps=100
    )
    results = []
    for region, delta in enumerate(deltas):
        metrics = wire.covering([region]) | wire.pack(region, {"env_steps": 50.0})
        params = ndarrays_to_parameters(bundle([delta.astype(np.float32)]))
        results.append((None, FitRes(Status(Code.OK, ""), params, 50, metrics)))
    strategy.aggregate_fit(1, results, [])
    assert fits == [[0, 1]]
    assert [(r, phase, list(failed)) for r, phase, failed in failures] == [(1, "training", [2])]
    assert failures[0][2][2].startswith("multi-krum")
    np.testing.assert_allclose(strategy.weights[0], (deltas[0] + deltas[1]) / 2, rtol=1e-6)


def test_capped_counts_leave_honest_regions_exact_and_bound_a_huge_claim() -> None:
    steps = np.array([100.0, 100.0, 50.0, 100.0])
    honest = steps * 6  # one sample per node and step, 6 nodes
    np.testing.assert_array_equal(capped_counts(honest, steps), honest)
    claimed = honest.copy()
    claimed[1] *= 1e6
    np.testing.assert_array_equal(capped_counts(claimed, steps), honest)
    # two regions left (Multi-Krum kept two of three): the claim must not lift the cap
    np.testing.assert_array_equal(capped_counts(claimed[:2], steps[:2]), honest[:2])


def test_one_regions_moments_cannot_ruin_the_pooled_normaliser() -> None:
    """A region that claims a million times its samples with a variance of 0 (the
    `statistics` fault) would, pooled exactly, shrink the pooled variance to ~0, so that
    every observation is blown up to the clip; with counts capped its weight is one
    region's and the pooled variance stays within its share of the honest one."""
    rng = np.random.default_rng(6)
    layer = np.zeros(2, dtype=np.float32)
    honest = [Moments.of(rng.normal(3.0, 2.0, size=(600, 4))) for _ in range(3)]
    previous = [layer, *Moments.empty(4).arrays()]
    sent = [[layer, *m.arrays()] for m in honest]
    network = 1
    poisoned, steps = faults.corrupt(
        FaultConfig(region=2, kind="statistics"), sent[2], 100, previous, network
    )
    assert steps == 100
    updates = [RegionUpdate(r, w, 100) for r, w in enumerate([sent[0], sent[1], poisoned])]
    pooled = Moments.from_arrays(aggregate(updates, previous, FederationConfig(), 1)[1:])
    clean = pool(honest)
    exact = pool([honest[0], honest[1], Moments.from_arrays(poisoned[1:])])
    assert np.all(exact.var < 1e-4 * clean.var)  # what exact pooling would have done
    assert np.all(pooled.var > 0.6 * clean.var) and pooled.count == clean.count
    np.testing.assert_allclose(pooled.mean, clean.mean, rtol=0.05)
    # honest regions alone pool exactly, as before
    exact_honest = pool_statistics(previous[1:], [w[1:] for w in sent], [100, 100, 100])
    np.testing.assert_allclose(exact_honest[2], clean.var, rtol=1e-12)


@pytest.mark.parametrize(
    "kind", ["sign-flip", "free-rider", "statistics", "shift-means", "scale-variance"]
)
def test_hostile_faults_send_what_they_claim(kind: str) -> None:
    start = [np.zeros(2, np.float32), np.array([5.0]), np.zeros(3), np.ones(3)]
    update = [np.full(2, 0.5, np.float32), np.array([7.0]), np.full(3, 2.0), np.full(3, 4.0)]
    sent, steps = faults.corrupt(FaultConfig(kind=kind, scale=10.0), update, 100, start, 1)
    assert steps == 100
    if kind == "sign-flip":
        np.testing.assert_allclose(sent[0], -5.0)
        assert all(np.array_equal(a, b) for a, b in zip(sent[1:], update[1:], strict=True))
    elif kind == "free-rider":
        assert all(np.array_equal(a, b) for a, b in zip(sent, start, strict=True))
    elif kind == "shift-means":
        np.testing.assert_array_equal(sent[0], update[0])
        np.testing.assert_array_equal(sent[2], 12.0)
        assert sent[1][0] == 7.0 and np.array_equal(sent[3], update[3])
    elif kind == "scale-variance":
        np.testing.assert_array_equal(sent[0], update[0])
        np.testing.assert_array_equal(sent[3], 40.0)
        assert sent[1][0] == 7.0 and np.array_equal(sent[2], update[2])
    else:
        np.testing.assert_array_equal(sent[0], update[0])
        assert sent[1][0] == 7.0 * faults.POISON_COUNT_FACTOR
        np.testing.assert_array_equal(sent[2], update[2])
        np.testing.assert_array_equal(sent[3], 0.0)
    assert sent[0].dtype == np.float32


def test_breakdown_points_stated_in_the_docs_hold_for_colluders() -> None:
    """docs/security.md: with n regions and byzantine = f, Multi-Krum keeps out f colluding
    sign-flipped copies as long as n >= 2f + 3 (Krum's condition); at 3 regions it has no
    guarantee and one attacker is kept out only while the two honest updates are nearer
    to each other than to it."""
    rng = np.random.default_rng(7)
    for n in (5, 10):
        f = (n - 3) // 2
        deltas = _honest(rng, n)
        hostile = range(n - f, n)
        for k in hostile:
            deltas[k] = -10 * deltas[0]
        chosen, _ = multi_krum(np.stack(deltas), f)
        assert set(chosen).isdisjoint(hostile), (n, f, chosen)


def test_multi_krum_needs_regions_at_least_twice_the_hostile_plus_three() -> None:
    small_demo = Path(__file__).resolve().parents[1] / "conf" / "small_demo.yaml"
    krum = ["federation.aggregation=multi-krum"]
    cfg = load_config(small_demo, [*krum, "federation.byzantine=0"])
    assert cfg.federation.byzantine == 0
    with pytest.raises(ConfigError, match=r"federation\.byzantine = 1 .* expected at most 0"):
        load_config(small_demo, [*krum, "federation.byzantine=1"])  # 3 regions < 2 x 1 + 3
    for kind in ("sign-flip", "free-rider", "statistics", "shift-means", "scale-variance"):
        load_config(small_demo, [f"faults=[{{kind: {kind}, region: 1, round: 1}}]"])
    with pytest.raises(ConfigError, match=r"faults\[0\]\.scale = -2.0 .* expected a number >= 0"):
        load_config(small_demo, ["faults=[{kind: scale-variance, region: 1, round: 1, scale: -2}]"])
