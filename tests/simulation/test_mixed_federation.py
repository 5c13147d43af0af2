"""One real Flower run carries two properties a federation must keep together: five
regions whose estates differ in shape federate one two-tier network, and Multi-Krum turns
away the region among them that sends every update sign-flipped x10 (five regions: the
fewest with which Multi-Krum holds against one hostile region, n >= 2f + 3). (The maths of each
lives in test_heterogeneous and test_byzantine, without Flower.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import TINY_HETERO, csv_rows

from fedmc_flwr.config import learner_plan, load_config
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.policies.checkpoints import read_checkpoint, round_checkpoint
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sim.signals import region_catalogue

NAMES = [region.name for region in region_catalogue(5)]
HOSTILE = 2
"""The region whose updates are sign-flipped: estate 3 x 2 of tiny_hetero's shapes."""


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_hetero grown to five regions (two more estate shapes) through Flower's
    simulation engine, one virtual client per region, with Multi-Krum screening the
    updates and region 2 sign-flipping its update in both rounds."""
    from flower_runs import run_isolated

    results = tmp_path_factory.mktemp("results")
    config = results / "mixed_federation.yaml"
    config.write_text(
        json.dumps(
            {
                "inherits": str(TINY_HETERO),
                "name": "mixed_federation",
                "world": {
                    "regions": 5,
                    "region_estates": [[1, 3], [2, 2], [3, 2], [4, 2], [5, 2]],
                },
                "federation": {"aggregation": "multi-krum", "byzantine": 1},
                "faults": [
                    {"region": HOSTILE, "round": r, "kind": "sign-flip", "scale": 10.0}
                    for r in (1, 2)
                ],
            }
        )
    )
    homes = tmp_path_factory.mktemp("home")
    assert run_isolated(homes, [f"results_dir={results}"], 5, config) == 0
    return results / "mixed_federation"


@pytest.mark.flower
def test_multi_krum_turns_the_sign_flipped_region_away_every_round(mixed_run: Path) -> None:
    """Each round records the hostile region as a `failed` row with Multi-Krum's reason,
    trains on the other two, and the run completes."""
    rows = csv_rows(mixed_run / "metrics.csv")
    failed = {(r["round"], r["client"]): r["reason"] for r in rows if r["phase"] == "failed"}
    assert set(failed) == {("1", NAMES[HOSTILE]), ("2", NAMES[HOSTILE])}
    for reason in failed.values():
        assert reason.startswith("training: multi-krum: score"), reason
        assert "federation.byzantine 1" in reason
    for rnd in ("1", "2"):
        trained = {r["client"] for r in rows if r["round"] == rnd and r["phase"] == "train"}
        assert trained == {"all", *NAMES} - {NAMES[HOSTILE]}


@pytest.mark.flower
def test_one_network_federates_over_five_estate_shapes(mixed_run: Path) -> None:
    """Every region's client was judged on its own estate each round, and the global
    network of the last round, on each region's own estate, gives exactly the held-out
    reward that region reported for it."""
    cfg = load_config(mixed_run / "config.yaml")
    metrics = pd.read_csv(mixed_run / "metrics.csv")
    judged = metrics[(metrics.phase == "eval") & (metrics.policy == "ppo-fedavg")]
    assert sorted(judged["round"].unique()) == [1, 2]
    for _, clients in judged.groupby("round").client:
        assert sorted(set(clients) - {"all"}) == sorted(NAMES)
    weights = read_checkpoint(round_checkpoint(mixed_run, 2))
    last = judged[judged["round"] == 2].set_index("client")
    for region, name in enumerate(NAMES):
        learner = PPOLearner(learner_plan(cfg, [region]), seed=0)
        learner.set_weights(weights)
        policy = learner.policy("ppo-fedavg")
        result = evaluate(lambda sim, policy=policy: policy, cfg, region)
        assert result.per_seed_reward.mean() == pytest.approx(last.loc[name, "reward"], abs=1e-9)
    assert np.isfinite(last["reward"]).all()
