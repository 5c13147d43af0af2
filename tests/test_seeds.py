"""Seed spaces: training, validation and test worlds never meet."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SMALL_DEMO, TINY_WORLD

from fedmc_flwr import seeds
from fedmc_flwr.config import learner_plan, load_config
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sim.world import MultiCloudSim


def test_validation_and_test_seeds_are_disjoint_and_labelled() -> None:
    test = {int(s) for r in range(4) for s in seeds.heldout_seeds("test", r, 50)}
    validation = {int(s) for r in range(4) for s in seeds.heldout_seeds("validation", r, 50)}
    assert len(test) == len(validation) == 200
    assert not test & validation
    assert {seeds.space_of(s) for s in test} == {seeds.TEST}
    assert {seeds.space_of(s) for s in validation} == {seeds.VALIDATION}
    with pytest.raises(ValueError, match="unknown split"):
        seeds.heldout_seeds("train", 0, 1)


def test_heldout_phases_are_one_per_stratum_of_the_day() -> None:
    phases = seeds.heldout_phases(8)
    assert ((phases >= 0) & (phases < 1)).all()
    np.testing.assert_array_equal(np.floor(phases * 8), np.arange(8))


def test_every_world_a_learner_trains_on_is_a_training_seed(monkeypatch) -> None:
    used: list[int] = []
    original = MultiCloudSim.reset_envs

    def spy(self, envs, worlds, *args, **kwargs):
        used.extend(int(s) for s in np.asarray(worlds, dtype=np.uint64))
        return original(self, envs, worlds, *args, **kwargs)

    monkeypatch.setattr(MultiCloudSim, "reset_envs", spy)
    cfg = load_config(
        SMALL_DEMO,
        [
            *TINY_WORLD,
            "ppo.num_envs=4",
            "ppo.rollout_steps=16",
            "ppo.num_minibatches=2",
            "ppo.update_epochs=1",
            "ppo.episode_steps=8",
        ],
    )
    for seed in (seeds.learner_seed(0), seeds.learner_seed(0, 1), 0, 1, 2):
        learner = PPOLearner(learner_plan(cfg, [0, 1]), seed)
        learner.train_round(32)
    assert len(used) > 5 * 4 * 4  # the initial worlds and many restarts
    assert {seeds.space_of(s) for s in used} == {seeds.TRAIN}
    heldout = {
        int(s)
        for split in seeds.SPLITS
        for region in range(cfg.world.regions)
        for s in seeds.heldout_seeds(split, region, 1000)
    }
    assert not heldout & set(used)
