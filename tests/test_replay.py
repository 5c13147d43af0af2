"""The world replays signals a cluster reported: per-region levels, NaN keeps the world's."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc_flwr.config import ExperimentConfig, WorldConfig
from fedmc_flwr.sim.world import MultiCloudSim


def sim() -> MultiCloudSim:
    cfg = ExperimentConfig(world=WorldConfig(regions=3, nodes_per_region=2))
    world = MultiCloudSim(cfg.world, cfg.reward, [0, 1, 2])
    world.reset(np.arange(3, dtype=np.uint64))
    return world


def test_replayed_carbon_is_observed_and_nan_keeps_the_worlds_own() -> None:
    world = sim()
    world.replay_signals(carbon=np.array([100.0, np.nan, 0.0]))
    carbon = world.step(np.zeros(3, dtype=np.int64)).obs[:, world.layout.region("carbon")]
    np.testing.assert_allclose(carbon[:, 0], 100.0, rtol=1e-6)
    np.testing.assert_allclose(carbon[:, 2], 0.0)
    # The daily cycle is off for a replayed signal, so the kept mean is observed as is.
    np.testing.assert_allclose(carbon[:, 1], world.spec.carbon_mean[1], rtol=1e-6)


def test_replayed_arrival_rate_sets_the_pace_of_jobs() -> None:
    elapsed = {}
    for rate in (1.0, 1000.0):
        world = sim()
        world.replay_signals(arrival_rate=np.full(3, rate))
        start = world.state.t.copy()
        for _ in range(50):
            world.step(np.zeros(3, dtype=np.int64))
        elapsed[rate] = (world.state.t - start).mean()
    assert elapsed[1.0] > 100 * elapsed[1000.0]


@pytest.mark.parametrize(
    "signals",
    [{"arrival_rate": np.zeros(3)}, {"carbon": np.array([-1.0, 0, 0])}, {"carbon": np.ones(2)}],
)
def test_replay_rejects_values_the_world_cannot_run(signals) -> None:
    with pytest.raises(ValueError, match="need 3"):
        sim().replay_signals(**signals)
