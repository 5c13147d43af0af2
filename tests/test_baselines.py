"""`fedmc baselines`: every dispatcher, every region, one CSV and `fedmc run`'s table."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import csv_rows

from fedmc_flwr.analysis.tables import format_table
from fedmc_flwr.config import ExperimentConfig
from fedmc_flwr.evaluation import evaluate_dispatchers, summary_rows
from fedmc_flwr.experiments.baselines import run_baselines
from fedmc_flwr.policies.heuristics import DISPATCHERS, ORACLES
from fedmc_flwr.results import COLUMNS, PER_SEED_COLUMNS, read_per_seed
from fedmc_flwr.seeds import heldout_seeds

TABLE_HEADING = "mean over regions:"
"""How every table's title ends (`tables.policy_table`)."""


def printed_table(out: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the table a command printed (`tables.format_table`'s
    layout: cells apart by two spaces or more), between its heading and the next line
    that is not a row of it."""
    lines = out[out.index(TABLE_HEADING) + len(TABLE_HEADING) :].strip("\n").splitlines()
    header = re.split(r"\s{2,}", lines[0].strip())
    rows = []
    for line in lines[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(header):
            break
        rows.append(cells)
    return header, rows


def assert_ranked_and_paired(out: str, policies: set[str]) -> None:
    """The table `fedmc run` prints: every policy once, best reward first, with a column of
    paired differences against SED and one against the two-tier heuristic, "-" where a
    baseline meets itself, and the note that says what they are."""
    header, rows = printed_table(out)
    assert header[:4] == ["policy", "reward ± ci95", "vs sed ± ci95", "vs two-tier ± ci95"]
    assert {row[0] for row in rows} == policies and len(rows) == len(policies)
    rewards = [float(row[1].split(" ± ")[0]) for row in rows]
    assert rewards == sorted(rewards, reverse=True)
    by_policy = {row[0]: row for row in rows}
    assert by_policy["sed"][2] == "-" and by_policy["two-tier"][3] == "-"
    # on the same worlds the paired mean is the difference of the means, to the last digit
    sed = rewards[[row[0] for row in rows].index("sed")]
    for row, reward in zip(rows, rewards, strict=True):
        if row[0] != "sed":
            assert float(row[2].split(" ± ")[0]) == pytest.approx(reward - sed, abs=1.5e-4)
    assert "vs X: reward minus X's on the same held-out worlds" in out


def _tiny(cfg: ExperimentConfig, tmp_path: Path) -> ExperimentConfig:
    return replace(cfg, results_dir=str(tmp_path), eval=replace(cfg.eval, seeds=2, steps=150))


def test_rows_per_region_and_pooled_all_row(small_demo: ExperimentConfig, tmp_path: Path) -> None:
    cfg = _tiny(small_demo, tmp_path)
    results = evaluate_dispatchers(cfg, ["jsq", "random"], progress=False)
    assert [(r.policy, r.region) for r in results] == [
        (name, region) for name in ("jsq", "random") for region in range(3)
    ]
    rows = summary_rows(results, ["a", "b", "c"])
    assert [(row["policy"], row["client"]) for row in rows] == [
        (name, client) for name in ("jsq", "random") for client in ("a", "b", "c", "all")
    ]
    jsq_all = rows[3]
    pooled = np.concatenate([r.per_seed_reward for r in results[:3]])
    assert jsq_all["reward"] == pytest.approx(pooled.mean())
    assert jsq_all["seeds"] == 6 and jsq_all["steps"] == 6 * 150
    assert jsq_all["latency_ms"] == pytest.approx(np.mean([r["latency_ms"] for r in rows[:3]]))
    table = format_table(rows).splitlines()
    assert len(table) == 3 and table[1].startswith("jsq") and table[2].startswith("random")


def test_unknown_dispatcher_is_an_error(small_demo: ExperimentConfig) -> None:
    with pytest.raises(ValueError, match="unknown dispatchers"):
        evaluate_dispatchers(small_demo, ["jsq", "magic"], progress=False)


def test_run_baselines_writes_the_csv_and_prints_the_table(
    small_demo: ExperimentConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = run_baselines(_tiny(small_demo, tmp_path))
    assert path == tmp_path.resolve() / "small_demo-baselines" / "baselines.csv"
    rows = csv_rows(path)
    assert tuple(rows[0]) == COLUMNS
    assert len(rows) == len(DISPATCHERS) * 4
    assert {(row["phase"], row["round"], row["experiment"]) for row in rows} == {
        ("eval", "0", "small_demo")
    }
    out = capsys.readouterr().out
    assert_ranked_and_paired(out, set(DISPATCHERS))
    title = out.splitlines()[0]  # what was evaluated: dispatchers, nothing trained
    assert title == "the dispatchers on small_demo's held-out worlds, mean over regions:"
    assert "round 0" not in out and "training seed" not in out and "higher is better" in out

    per_seed = read_per_seed(path.parent / "per_seed.csv")
    assert tuple(per_seed.columns) == PER_SEED_COLUMNS
    assert len(per_seed) == len(DISPATCHERS) * 3 * 2  # dispatchers x regions x eval seeds
    assert set(per_seed["round"]) == {0} and set(per_seed["train_steps"]) == {0}
    assert set(per_seed["split"]) == {"test"} and set(per_seed["jobs"]) == {150}
    expected_seeds = [int(s) for r in range(3) for s in heldout_seeds("test", r, 2)]
    for policy, group in per_seed.groupby("policy"):
        assert [int(s) for s in group["eval_seed"]] == expected_seeds
        for row in rows:
            if row["policy"] == policy and row["client"] != "all":
                mine = group[group["client"] == row["client"]]
                assert mine["reward"].mean() == pytest.approx(float(row["reward"]), rel=1e-12)


@pytest.mark.slow
def test_objectives_conflict_in_small_demo(small_demo: ExperimentConfig) -> None:
    """No non-oracle dispatcher is best on latency, cost and carbon at once."""
    names = [name for name in DISPATCHERS if name not in ORACLES]
    rows = summary_rows(evaluate_dispatchers(small_demo, names, progress=False), ["a", "b", "c"])
    overall = [row for row in rows if row["client"] == "all"]
    best = {
        column: min(overall, key=lambda row: row[column])["policy"]
        for column in ("latency_ms", "cost_usd", "carbon_g")
    }
    assert len(set(best.values())) > 1, best
