"""Running moments pool exactly: the moments of the parts are those of the whole."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc_flwr.policies.moments import Moments, column_moments, pool
from fedmc_flwr.policies.normalisers import ObservationNorm
from fedmc_flwr.sim.layout import NODE_WIDTH


def _regions(rng: np.random.Generator) -> list[np.ndarray]:
    """Three regions of different sizes whose first feature is constant inside each one
    (an ingress flag) and whose second differs in level and spread (a queue length)."""
    parts = []
    for flag, size, level in ((1.0, 500, 2.0), (0.0, 1300, 7.0), (0.0, 80, 0.5)):
        queue = rng.gamma(2.0, level, size)
        parts.append(np.column_stack([np.full(size, flag), queue]))
    return parts


def test_pooled_moments_equal_those_of_the_concatenated_data() -> None:
    parts = _regions(np.random.default_rng(0))
    pooled = pool([Moments.of(p) for p in parts])
    whole = np.concatenate(parts)
    assert pooled.count == len(whole)
    np.testing.assert_allclose(pooled.mean, whole.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(pooled.var, whole.var(axis=0), rtol=1e-10)
    # The flag is constant in every region, yet varies across them: the between-region
    # term is what gives it its variance (averaging the regions' variances gives 0).
    assert pooled.var[0] == pytest.approx(whole[:, 0].var())
    assert pooled.var[0] > 0.15


def test_streamed_updates_equal_one_batch_and_empty_changes_nothing() -> None:
    data = np.random.default_rng(1).normal(3.0, 2.0, size=(1000, 4))
    streamed = Moments.empty(4)
    for chunk in np.array_split(data, 7):
        streamed = streamed.merge(Moments.of(chunk))
    np.testing.assert_allclose(streamed.mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(streamed.var, data.var(axis=0), rtol=1e-10)
    assert streamed.merge(Moments.empty(4)) is streamed


def test_arrays_round_trip() -> None:
    moments = Moments.of(np.random.default_rng(2).normal(size=(9, 3)))
    back = Moments.from_arrays(moments.arrays())
    assert back.count == moments.count
    np.testing.assert_array_equal(back.mean, moments.mean)
    np.testing.assert_array_equal(back.var, moments.var)


def test_observation_moments_are_those_of_the_node_rows_and_the_global_columns() -> None:
    """An observation batch's moments, read in place, are exactly those of its node rows
    stacked into one `[B * nodes, NODE_WIDTH]` batch beside those of its global columns."""
    nodes, batch = 7, 33
    obs = np.random.default_rng(3).gamma(2.0, 3.0, (batch, nodes * NODE_WIDTH + 2))
    obs = obs.astype(np.float32)
    norm = ObservationNorm()
    norm.update(obs)
    rows = obs[:, : nodes * NODE_WIDTH].reshape(-1, NODE_WIDTH).astype(np.float64)
    node_mean, node_var = column_moments(rows)
    shared_mean, shared_var = column_moments(obs[:, nodes * NODE_WIDTH :].astype(np.float64))
    assert norm.total.count == batch * nodes
    np.testing.assert_array_equal(norm.total.mean, np.concatenate([node_mean, shared_mean]))
    np.testing.assert_array_equal(norm.total.var, np.concatenate([node_var, shared_var]))
