"""A hostile region against the aggregation rules, judged on held-out seeds.

Two rounds of small_demo through the same plain functions the Flower apps call. In the
attacked runs region 2 sends its update scaled by 1000 (`faults.corrupt`, as a `scale`
fault does). The plain mean follows it to a useless policy; the coordinate-wise median
ends within 5% of the clean FedAvg run's held-out reward.

The learner here is the flat MLP. Its tanh layers saturate under a x1000 update, so the
mean really is ruined. The default two-tier network uses ReLU scorers, whose greedy act
barely changes when all its weights are scaled by a positive factor; under that network
the same attack left the mean's reward at -0.5981 against -0.5989 clean. Sign flips and
free riders, which do move it, are in test_byzantine.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from fedmc_flwr.config import FaultConfig, FederationConfig, load_config
from fedmc_flwr.federation import faults
from fedmc_flwr.federation.aggregation import RegionUpdate, aggregate
from fedmc_flwr.federation.client_app import evaluate_region, train_region
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.policies.moments import MOMENT_ARRAYS
from fedmc_flwr.policies.ppo import STATISTICS

REPO = Path(__file__).resolve().parents[1]
ATTACK = FaultConfig(region=2, round=1, kind="scale", scale=1000.0)


@pytest.mark.slow
def test_the_median_survives_a_scaled_update_that_ruins_the_mean(tmp_path: Path) -> None:
    cfg = load_config(
        REPO / "conf" / "small_demo.yaml",
        ["eval.seeds=8", "eval.steps=1000", "ppo.policy=mlp", "ppo.privileged_critic=false"],
    )
    network = len(initial_weights(cfg)) - len(STATISTICS) * MOMENT_ARRAYS

    def train(weights: list[np.ndarray], rnd: int, state: Path) -> list[RegionUpdate]:
        updates = []
        for region in range(cfg.world.regions):
            trained, stats = train_region(cfg, region, weights, rnd, state)
            updates.append(RegionUpdate(region, trained, int(stats["env_steps"])))
        return updates

    def attack(updates: list[RegionUpdate], start: list[np.ndarray]) -> list[RegionUpdate]:
        """Region 2's reply scaled, as its `scale` fault would send it, in every round."""
        out = list(updates)
        hostile = out[ATTACK.region]
        sent, steps = faults.corrupt(ATTACK, hostile.weights, hostile.num_examples, start, network)
        out[ATTACK.region] = RegionUpdate(ATTACK.region, sent, steps)
        return out

    def reward(weights: list[np.ndarray]) -> float:
        per_region = [
            evaluate_region(cfg, r, weights)[0].per_seed_reward.mean()
            for r in range(cfg.world.regions)
        ]
        return float(np.mean(per_region))

    start = initial_weights(cfg)
    statistics = len(STATISTICS)
    mean, median = FederationConfig(), FederationConfig(aggregation="median")
    first = train(start, 1, tmp_path / "round1")
    finals = {}
    for name, rule, attacked in (("clean", mean, False), ("robust", median, True)):
        state = tmp_path / name
        shutil.copytree(tmp_path / "round1", state)
        replies = attack(first, start) if attacked else first
        weights = aggregate(replies, start, rule, statistics)
        second = train(weights, 2, state)
        replies = attack(second, weights) if attacked else second
        finals[name] = reward(aggregate(replies, weights, rule, statistics))
    damaged = reward(aggregate(attack(first, start), start, mean, statistics))
    clean, robust = finals["clean"], finals["robust"]
    print(
        f"held-out reward: clean {clean:.4f}, median attacked {robust:.4f}, "
        f"mean attacked {damaged:.4f}"
    )
    # Surviving means losing nothing that matters: the median of three regions may even
    # land on a better model than their mean, so only a loss is bounded.
    assert robust >= clean - 0.05 * abs(clean), (clean, robust)
    assert damaged < clean - 0.25 * abs(clean), (clean, damaged)
