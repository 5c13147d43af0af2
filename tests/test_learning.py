"""What one federated round learns, judged on held-out seeds (paired per seed).

The round runs through the same plain functions the Flower apps call (`initial_weights`,
`train_region`, `aggregate`, `evaluate_region`), at small_demo's full settings, without
starting Flower: the federation's plumbing is tested in test_federation.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import SMALL_DEMO

from fedmc_flwr.analysis.statistics import ci95
from fedmc_flwr.config import load_config
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.federation.client_app import evaluate_region, train_region
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.federation.strategy import RegionUpdate, aggregate
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import STATISTICS


@pytest.mark.slow
def test_round_one_global_policy_beats_random_and_its_initialisation(tmp_path: Path) -> None:
    cfg = load_config(SMALL_DEMO, ["eval.seeds=8", "eval.steps=1000"])
    initial = initial_weights(cfg)
    updates = []
    for region in range(cfg.world.regions):
        trained, stats = train_region(cfg, region, initial, 1, tmp_path)
        updates.append(RegionUpdate(region, trained, int(stats["env_steps"])))
    after_round_one = aggregate(updates, initial, cfg.federation, len(STATISTICS))

    def per_seed(weights: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(
            [evaluate_region(cfg, r, weights)[0].per_seed_reward for r in range(cfg.world.regions)]
        )

    trained = per_seed(after_round_one)
    random = np.concatenate(
        [evaluate(DISPATCHERS["random"], cfg, r).per_seed_reward for r in range(cfg.world.regions)]
    )
    untrained = per_seed(initial)
    for other in (random, untrained):
        gain = trained - other  # the same held-out worlds: paired per seed
        assert gain.mean() - ci95(gain) > 0, (trained.mean(), other.mean())
