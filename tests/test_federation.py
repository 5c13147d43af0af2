"""A region's learner is carried between rounds through its state file: two rounds that way
equal two rounds of one learner kept in memory, and a region without state starts fresh.
The real Flower runs are under tests/simulation/ and in test_deployment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import TINY

from fedmc_flwr.config import learner_plan, load_config
from fedmc_flwr.federation.client_app import train_region
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.seeds import learner_seed


def test_a_region_resumes_its_learner_between_rounds(tmp_path: Path) -> None:
    """Two rounds through the state file equal two rounds of one learner kept in memory."""
    cfg = load_config(TINY)
    kept = PPOLearner(learner_plan(cfg, [1]), seed=learner_seed(cfg.seed, 1))
    weights = kept.get_weights()
    for rnd in (1, 2):
        kept.set_weights(weights)
        kept.train_round(cfg.train.steps_per_round)
        weights, _ = train_region(cfg, 1, weights, rnd, tmp_path)
        for a, b in zip(weights, kept.get_update(), strict=True):
            np.testing.assert_array_equal(a, b)
    fresh = PPOLearner(learner_plan(cfg, [0]), seed=learner_seed(cfg.seed, 0))
    fresh.set_weights(weights)
    fresh.train_round(cfg.train.steps_per_round)
    late, _ = train_region(cfg, 0, weights, 2, tmp_path)  # region 0 has no state yet
    for a, b in zip(late, fresh.get_update(), strict=True):
        np.testing.assert_array_equal(a, b)
