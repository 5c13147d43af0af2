"""Held-out evaluation: per-seed values, the wire, splits, and the paired statistics."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import SMALL_DEMO, TINY_WORLD
from scipy import stats

from fedmc_flwr import seeds as seed_spaces
from fedmc_flwr.analysis.statistics import (
    Estimate,
    mean_over_regions,
    over_training_seeds,
    paired_difference,
    paired_over_seeds_and_worlds,
    stratified_mean,
)
from fedmc_flwr.config import ExperimentConfig, load_config
from fedmc_flwr.evaluation import PER_SEED_METRICS, evaluate, per_seed_rows
from fedmc_flwr.federation import wire
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.results import PER_SEED_COLUMNS
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim

SHORT_EVAL = [*TINY_WORLD, "eval.seeds=3", "eval.steps=30"]


def tiny(*overrides: str) -> ExperimentConfig:
    return load_config(SMALL_DEMO, [*SHORT_EVAL, *overrides])


# --- statistics -----------------------------------------------------------------------


def test_paired_difference_by_hand() -> None:
    # region 0: d = [1, 1, 3], mean 5/3, s^2 = 4/3; region 1: d = [-1, 1], mean 0, s^2 = 2.
    a = [np.array([1.0, 2.0, 4.0]), np.array([0.0, 0.0])]
    b = [np.array([0.0, 1.0, 1.0]), np.array([1.0, -1.0])]
    got = paired_difference(a, b)
    t_975_df3 = 3.182446305284263
    se = math.sqrt((4 / 3) / 3 + 2 / 2) / 2  # sqrt(sum s_r^2 / n_r) / R
    assert got.mean == pytest.approx(5 / 6, abs=1e-15)
    assert got.half_width == pytest.approx(t_975_df3 * se, rel=1e-12)
    assert got.n == 5
    with pytest.raises(ValueError, match="cannot pair"):
        paired_difference([np.zeros(3)], [np.zeros(2)])


def test_stratified_ci_is_the_formula() -> None:
    rng = np.random.default_rng(7)
    regions = [rng.normal(k, 1 + k, size=n) for k, n in enumerate((4, 7, 10))]
    got = stratified_mean(regions)
    variance = sum(np.var(x, ddof=1) / len(x) for x in regions)
    dof = sum(len(x) - 1 for x in regions)
    expected = stats.t.ppf(0.975, dof) * np.sqrt(variance) / 3
    assert got.mean == pytest.approx(np.mean([x.mean() for x in regions]), rel=1e-14)
    assert got.half_width == pytest.approx(expected, rel=1e-12)
    assert mean_over_regions(regions) == (got.mean, got.half_width)
    assert math.isnan(stratified_mean([np.array([1.0]), np.array([1.0, 2.0])]).half_width)


def test_over_training_seeds_is_a_t_interval() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 6.0]
    got = over_training_seeds(values)
    s = math.sqrt(sum((v - 3.2) ** 2 for v in values) / 4)
    assert got.mean == pytest.approx(3.2, rel=1e-15)
    assert got.half_width == pytest.approx(2.7764451051977987 * s / math.sqrt(5), rel=1e-12)
    assert got.n == 5
    assert math.isnan(over_training_seeds([1.0]).half_width)


def test_verdicts() -> None:
    assert Estimate(0.2, 0.1, 5).verdict() == "better"
    assert Estimate(-0.2, 0.1, 5).verdict() == "worse"
    assert Estimate(0.05, 0.1, 5).verdict() == "no difference at 95%"
    assert Estimate(0.05, float("nan"), 1).verdict() == "no interval"


# --- per-seed results -----------------------------------------------------------------


def test_evaluate_keeps_every_metric_per_seed_and_it_survives_the_wire() -> None:
    cfg = tiny()
    result = evaluate(DISPATCHERS["jsq"], cfg, 1)
    np.testing.assert_array_equal(result.eval_seeds, seed_spaces.heldout_seeds("test", 1, 3))
    np.testing.assert_array_equal(result.start_phases, seed_spaces.heldout_phases(3))
    assert set(result.per_seed) == set(PER_SEED_METRICS)
    for name, mean in result.means.items():
        assert result.per_seed[name].mean() == pytest.approx(mean, rel=1e-12)
    assert len(set(result.per_seed["latency_ms"])) == 3  # three different worlds

    back = wire.eval_result(wire.pack(1, wire.eval_metrics(result)), 1)
    assert back.split == "test"
    np.testing.assert_array_equal(back.eval_seeds, result.eval_seeds)
    assert back.eval_seeds.dtype == np.uint64
    np.testing.assert_array_equal(back.start_phases, result.start_phases)
    for name in PER_SEED_METRICS:
        np.testing.assert_array_equal(back.per_seed[name], result.per_seed[name])
    assert back.seed_rows() == result.seed_rows()

    rows = per_seed_rows([result], ["a", "b"], experiment="x", train_seed=0, round=0, train_steps=0)
    assert len(rows) == 3 and set(rows[0]) == set(PER_SEED_COLUMNS)
    assert [r["eval_seed"] for r in rows] == [int(s) for s in result.eval_seeds]
    assert {r["client"] for r in rows} == {"b"}


def test_per_seed_values_are_each_worlds_own() -> None:
    """Recomputed world by world, each started at its stratified phase of the day."""
    cfg = tiny()
    result = evaluate(DISPATCHERS["sed"], cfg, 0)
    worlds = seed_spaces.heldout_seeds("test", 0, 3)
    sim = MultiCloudSim(cfg.world, cfg.reward, np.zeros(3, dtype=np.int64))
    policy = DISPATCHERS["sed"](sim)
    obs, mask = sim.reset(worlds, phases=seed_spaces.heldout_phases(3))
    reward, metrics = np.zeros(3), np.zeros((cfg.eval.steps, 3, len(METRIC_NAMES)))
    for k in range(cfg.eval.steps):
        step = sim.step(policy.act(obs, mask))
        reward += step.reward
        metrics[k] = step.metrics
        obs, mask = step.obs, step.mask
    np.testing.assert_allclose(result.per_seed_reward, reward / cfg.eval.steps, rtol=1e-12)
    for j, name in enumerate(METRIC_NAMES):
        np.testing.assert_allclose(result.per_seed[name], metrics[:, :, j].mean(0), rtol=1e-12)
    latency = metrics[:, :, METRIC_NAMES.index("latency_ms")]
    np.testing.assert_allclose(result.per_seed["latency_p95_ms"], np.percentile(latency, 95, 0))


def test_validation_split_judges_other_worlds() -> None:
    test = evaluate(DISPATCHERS["jsq"], tiny(), 0)
    validation = evaluate(DISPATCHERS["jsq"], tiny("eval.split=validation"), 0)
    assert validation.split == "validation"
    assert not set(test.eval_seeds.tolist()) & set(validation.eval_seeds.tolist())
    assert {seed_spaces.space_of(s) for s in validation.eval_seeds} == {seed_spaces.VALIDATION}
    assert {seed_spaces.space_of(s) for s in test.eval_seeds} == {seed_spaces.TEST}
    assert not np.array_equal(test.per_seed_reward, validation.per_seed_reward)


def test_the_recorder_writes_per_seed_rows(tmp_path: Path) -> None:
    from fedmc_flwr.federation.recorder import RunRecorder
    from fedmc_flwr.federation.strategy import RegionUpdate
    from fedmc_flwr.policies.ppo import ROUND_METRICS
    from fedmc_flwr.results import read_per_seed

    cfg = tiny("eval.seeds=2", "eval.steps=10", "seed=3")
    recorder = RunRecorder(cfg, tmp_path, ["a", "b"])
    stats_ = {name: 0.0 for name in ROUND_METRICS} | {"steps_per_second": 1.0, "wall_time_s": 1.0}
    updates = [RegionUpdate(r, [np.zeros(2)], 100 + r, stats_) for r in (0, 1)]
    recorder.on_fit(1, updates, [np.zeros(2)], 1.0)
    results = [evaluate(DISPATCHERS["sed"], cfg, r) for r in (0, 1)]
    for result in results:
        result.policy = "ppo-fedavg"
    recorder.on_evaluate(1, results, 1.0)
    frame = read_per_seed(tmp_path / "per_seed.csv")
    assert tuple(frame.columns) == PER_SEED_COLUMNS
    dispatchers = frame[frame["round"] == 0]
    assert set(dispatchers["policy"]) == set(DISPATCHERS)
    assert len(dispatchers) == len(DISPATCHERS) * 2 * 2
    assert (dispatchers["train_steps"] == 0).all() and (frame["train_seed"] == 3).all()
    learner = frame[frame["round"] == 1]
    assert set(learner["policy"]) == {"ppo-fedavg"} and len(learner) == 4
    assert (learner["train_steps"] == 201).all()
    sed = dispatchers[dispatchers["policy"] == "sed"]
    np.testing.assert_array_equal(sed["reward"].to_numpy(), learner["reward"].to_numpy())


def test_a_difference_over_training_seeds_keeps_the_worlds_spread() -> None:
    """Five identical training seeds judged on the same worlds: the seeds agree perfectly,
    yet the worlds were drawn, so the interval must stay the worlds' own."""
    worlds = [np.array([0.1, -0.2, 0.3, 0.0]), np.array([0.2, 0.1, -0.1, 0.05])]
    same = paired_over_seeds_and_worlds([worlds] * 5)
    alone = stratified_mean(worlds)
    assert same.mean == pytest.approx(alone.mean)
    world_se = alone.half_width / stats.t.ppf(0.975, 6)
    assert same.half_width == pytest.approx(stats.t.ppf(0.975, 4) * world_se)
    shifted = [[w + shift for w in worlds] for shift in (-0.05, 0.0, 0.05, 0.1, -0.1)]
    assert paired_over_seeds_and_worlds(shifted).half_width > same.half_width
