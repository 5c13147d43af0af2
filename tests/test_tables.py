"""`fedmc run`'s table: each policy paired against the baselines on the same worlds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedmc_flwr.analysis.tables import format_table, paired_against


def per_seed_frame(rewards: dict[str, list[list[float]]], rounds: dict[str, int]) -> pd.DataFrame:
    """per_seed.csv rows: `rewards[policy][region][world]` at `rounds[policy]`."""
    rows = [
        {"policy": p, "round": rounds[p], "client": f"r{r}", "eval_seed": 100 + k, "reward": v}
        for p, regions in rewards.items()
        for r, worlds in enumerate(regions)
        for k, v in enumerate(worlds)
    ]
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # order must not matter


def test_the_paired_difference_is_per_world_and_stratified_by_region() -> None:
    learner = [[-1.0, -2.0, -1.5], [-0.5, -0.7, -0.6]]
    sed = [[-1.1, -2.2, -1.6], [-0.6, -0.6, -0.9]]
    frame = per_seed_frame({"ppo": learner, "sed": sed}, {"ppo": 5, "sed": 0})
    paired = paired_against(frame, ["sed", "two-tier"])
    assert set(paired["ppo"]) == {"sed"}  # a baseline the run lacks is left out
    per_region = [np.mean(np.subtract(a, b)) for a, b in zip(learner, sed, strict=True)]
    assert paired["ppo"]["sed"].mean == pytest.approx(np.mean(per_region))
    assert paired["ppo"]["sed"].half_width > 0
    assert paired["sed"]["sed"].mean == 0.0


def test_only_each_policys_last_round_is_paired() -> None:
    early = per_seed_frame({"ppo": [[-9.0, -9.0]], "sed": [[-1.0, -1.0]]}, {"ppo": 1, "sed": 0})
    late = per_seed_frame({"ppo": [[-0.5, -0.7]]}, {"ppo": 2})
    paired = paired_against(pd.concat([early, late]), ["sed"])
    assert paired["ppo"]["sed"].mean == pytest.approx(0.4)


def test_worlds_that_differ_cannot_be_paired() -> None:
    frame = per_seed_frame({"ppo": [[-1.0, -2.0]], "sed": [[-1.0, -2.0]]}, {"ppo": 1, "sed": 0})
    frame.loc[frame["policy"] == "sed", "eval_seed"] += 50
    with pytest.raises(ValueError, match="other worlds"):
        paired_against(frame, ["sed"])


def test_the_table_shows_a_difference_column_per_baseline() -> None:
    frame = per_seed_frame({"ppo": [[-1.0, -2.0]], "sed": [[-1.5, -2.1]]}, {"ppo": 1, "sed": 0})
    row = {
        "client": "all",
        "reward": -1.5,
        "reward_ci95": 0.1,
        "latency_ms": 1.0,
        "latency_p95_ms": 2.0,
        "slo_violation_rate": 0.1,
        "cost_usd": 1e-6,
        "carbon_g": 1e-3,
        "energy_kwh": 1e-6,
    }
    table = format_table(
        [{**row, "policy": "ppo"}, {**row, "policy": "sed"}], paired_against(frame, ["sed"])
    )
    header, ppo, sed = table.splitlines()
    assert "vs sed ± ci95" in header
    assert "+0.3000" in ppo and sed.split()[4] == "-"


def test_a_region_that_failed_the_last_evaluation_is_left_out_of_the_pairing() -> None:
    """The learner's last round lacks region r1 (its evaluation failed); the dispatchers
    were judged in every region: the pairing keeps the regions both have."""
    learner = per_seed_frame({"ppo": [[-1.0, -2.0]]}, {"ppo": 3})
    sed = per_seed_frame({"sed": [[-1.5, -2.5], [-9.0, -9.0]]}, {"sed": 0})
    paired = paired_against(pd.concat([learner, sed]), ["sed"])
    assert paired["ppo"]["sed"].mean == pytest.approx(0.5)
    assert paired["sed"]["sed"].mean == 0.0
