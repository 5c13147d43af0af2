"""`fedmc run`'s table: each policy paired against the baselines on the same worlds, and a
row judged on fewer regions' worlds than the others marked, with the regions it lacks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedmc_flwr.analysis.tables import format_table, last_round_table, left_out, paired_against
from fedmc_flwr.results import MetricsWriter, per_seed_writer


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
    rows = [_row("ppo", "all", -1.5), _row("sed", "all", -1.5)]
    table = format_table(rows, paired_against(frame, ["sed"]))
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


def _row(policy: str, client: str, reward: float) -> dict:
    return {
        "policy": policy,
        "client": client,
        "reward": reward,
        "reward_ci95": 0.1,
        "latency_ms": 1.0,
        "latency_p95_ms": 2.0,
        "slo_violation_rate": 0.1,
        "cost_usd": 1e-6,
        "carbon_g": 1e-3,
        "energy_kwh": 1e-6,
    }


def test_a_row_judged_on_fewer_regions_is_marked_with_a_footnote_naming_them() -> None:
    """The learner lacks r1's worlds (its evaluation failed), the dispatcher has both:
    the learner's row says so, and the footnote names r1 and why it was left out."""
    rows = [
        *(_row("sed", client, -1.0) for client in ("r0", "r1", "all")),
        *(_row("ppo", client, -0.5) for client in ("r0", "all")),
    ]
    why = {"r1": "evaluation: client failed: RuntimeError: down"}
    lines = format_table(rows, None, why).splitlines()
    assert [line.split()[0] for line in lines[1:3]] == ["sed", "ppo*"]
    assert lines[3].startswith("* ppo: judged on 1 of 2 regions' worlds, without r1;")
    assert lines[4] == "  r1 left out: evaluation: client failed: RuntimeError: down"
    assert len(lines) == 5


def test_a_table_whose_rows_share_their_regions_has_no_mark() -> None:
    rows = [_row(p, client, -1.0) for p in ("sed", "ppo") for client in ("r0", "r1", "all")]
    assert "*" not in format_table(rows)
    assert left_out(rows) == {}


def test_the_last_round_table_marks_a_region_left_out_of_its_evaluation(tmp_path) -> None:
    """A run's metrics.csv and per_seed.csv whose last round lacks r1's learner rows, with
    the `failed` row that says why: the table marks the learner, names r1 and its reason,
    and pairs the learner with SED on r0 alone."""
    writer = MetricsWriter(tmp_path / "metrics.csv")
    writer.write(
        {"experiment": "x", "round": 2, "phase": "eval", **row}
        for row in [
            *(_row("sed", client, -1.0) for client in ("r0", "r1", "all")),
            *(_row("ppo", client, -0.5) for client in ("r0", "all")),
        ]
    )
    reason = "evaluation: client failed: RuntimeError: region 1 cannot finish its evaluation"
    writer.write(
        [
            {
                "experiment": "x",
                "round": 2,
                "phase": "failed",
                "client": "r1",
                "policy": "ppo",
                "reason": reason,
            }
        ]
    )
    learner = per_seed_frame({"ppo": [[-0.5, -0.6]]}, {"ppo": 2})
    sed = per_seed_frame({"sed": [[-1.0, -1.1], [-9.0, -9.0]]}, {"sed": 0})
    per_seed = per_seed_writer(tmp_path)
    per_seed.write(
        {**row, "experiment": "x", "train_seed": 0, "split": "test"}
        for row in pd.concat([learner, sed]).to_dict("records")
    )
    out = last_round_table(tmp_path / "metrics.csv").splitlines()
    ppo = next(line for line in out if line.startswith("ppo"))
    assert ppo.split()[0] == "ppo*" and "+0.5000" in ppo  # paired on r0 only
    assert any(
        line.startswith("* ppo: judged on 1 of 2 regions' worlds, without r1;") for line in out
    )
    assert f"  r1 left out: {reason}" in out
