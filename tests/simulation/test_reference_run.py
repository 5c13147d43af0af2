"""The suite's reference Flower run (conftest's `tiny_run`: the tiny experiment replaying
real traces, its second region joining in round 2, through Flower's simulation engine,
one virtual client per region) and everything it writes: its tables, checkpoints and
plots, what `fedmc run` printed with its output redirected, and the regions' TensorBoard
board; and a rerun refused.

Its tables are the reference other runs must reproduce byte for byte: the deployment
engine's, whose second SuperNode starts mid-run (test_deployment), and a killed run
resumed on one virtual client serving both regions (test_kill_and_resume), so the run is
deterministic whatever the engine, however regions map onto clients, and when a region
joins late.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, TINY_TRACED, csv_rows
from test_console import NOT_APPLICABLE, ROUND_LINE
from test_tracking import CLEANRL_TAGS, DISPATCHER_RUNS, HELD_OUT_TAGS, read_board

from fedmc_flwr.config import load_config
from fedmc_flwr.federation.runner import run_federation
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.results import COLUMNS, TIMING_COLUMNS, read_per_seed

REGIONS = ("us-east1", "europe-west9")
ACTIVE = {1: REGIONS[:1], 2: REGIONS}
"""The regions that train and are judged in each round: europe-west9 joins in round 2."""
DIAGNOSTICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


@pytest.mark.flower
def test_metrics_rows_of_a_real_run(tiny_run: Path) -> None:
    out = tiny_run
    assert tuple(csv_rows(out / "metrics.csv")[0]) == COLUMNS
    rows = csv_rows(out / "metrics.csv")
    assert "failed" not in {r["phase"] for r in rows}
    for rnd, active in ACTIVE.items():
        mine = [r for r in rows if r["round"] == str(rnd)]
        train = {r["client"]: r for r in mine if r["phase"] == "train"}
        assert set(train) == {*active, "all"}
        for row in train.values():
            assert row["policy"] == "ppo-fedavg"
            assert row["steps"] == str(4 * 64 * (len(active) if row["client"] == "all" else 1))
            assert all(np.isfinite(float(row[k])) for k in ("reward", "latency_ms", *DIAGNOSTICS))
        evals = {(r["policy"], r["client"]) for r in mine if r["phase"] == "eval"}
        dispatchers = {(p, c) for p in DISPATCHERS for c in (*REGIONS, "all")}
        assert evals == dispatchers | {("ppo-fedavg", c) for c in (*active, "all")}
    ppo_all = [r for r in rows if r["policy"] == "ppo-fedavg" and r["client"] == "all"]
    assert all(r["reward_ci95"] for r in ppo_all if r["phase"] == "eval")
    assert tuple(csv_rows(out / "timing.csv")[0]) == TIMING_COLUMNS
    saved = load_config(out / "config.yaml")  # what the run ran: the traces it replayed
    assert saved.name == "tiny_traced" and saved.world.arrivals == "trace"
    assert saved.world.rate_trace == ["alibaba2018", "azure_v2"]
    assert Path(saved.world.carbon_file) == REPO / "tests" / "data" / "em_carbon.csv"
    for rnd in (1, 2):
        with np.load(out / "checkpoints" / f"round_{rnd:03d}.npz", allow_pickle=False) as ckpt:
            assert all(np.isfinite(ckpt[k]).all() for k in ckpt.files)
    assert {p.name for p in (out / "plots").iterdir()} >= {
        "reward.png",
        "latency.png",
        "paired.png",
    }
    per_seed = csv_rows(out / "per_seed.csv")
    learner = [r for r in per_seed if r["policy"] == "ppo-fedavg"]
    assert {(r["round"], r["client"]) for r in learner} == {
        (str(rnd), c) for rnd, active in ACTIVE.items() for c in active
    }
    assert {r["round"] for r in per_seed if r["policy"] == "sed"} == {"0"}
    run_id = re.search(r"fedmc: run (\d+):", (out.parent / "console.txt").read_text())[1]
    status = json.loads((out / "status.json").read_text())
    assert status == {"state": "completed", "run_id": run_id}


@pytest.mark.flower
def test_a_rerun_refuses_to_overwrite(tiny_run: Path) -> None:
    """Refused before anything starts: no Flower process, the tables untouched."""
    before = (tiny_run / "metrics.csv").read_bytes()
    assert run_federation(TINY_TRACED, [f"results_dir={tiny_run.parent}"], 2) == 2
    assert (tiny_run / "metrics.csv").read_bytes() == before


@pytest.mark.flower
def test_a_redirected_run_prints_no_colour_no_inapplicable_warning_one_line_per_round(
    tiny_run,
) -> None:
    """What `fedmc run` printed for the reference run (2 rounds, 2 regions on 2 virtual
    clients, the second from round 2), its output redirected to a file: a line for each
    reply of a region that takes part, none for one that has not joined yet."""
    raw = (tiny_run.parent / "console.txt").read_bytes()
    assert b"\x1b" not in raw
    text = raw.decode()
    for phrase in NOT_APPLICABLE:
        assert phrase not in text, phrase
    rounds = [m.groups() for m in ROUND_LINE.finditer(text)]
    assert rounds == [("1", "2"), ("2", "2")]
    assert "about" in text.split("round 1/2 done", 1)[1].splitlines()[0]  # the time left
    for rnd, active in ACTIVE.items():
        for region in REGIONS:
            for phase in ("trained", "evaluated"):
                line = f"round {rnd}/2: {region} {phase} in "
                assert (line in text) == (region in active), line


@pytest.mark.flower
def test_a_federated_run_writes_the_regions_board(tiny_run) -> None:
    """2 regions x 2 rounds, 2 PPO updates per region and round; europe-west9 from round 2."""
    board = read_board(tiny_run / "tb")
    assert set(board) == {"us-east1", "europe-west9", "all"} | DISPATCHER_RUNS
    per_seed = read_per_seed(tiny_run / "per_seed.csv")
    steps = sorted(set(per_seed.loc[per_seed["round"] > 0, "train_steps"]))
    for region in REGIONS:
        rounds = [rnd for rnd, active in ACTIVE.items() if region in active]
        assert set(board[region]) == HELD_OUT_TAGS | CLEANRL_TAGS
        assert [s for s, _ in board[region]["heldout/reward"]] == [steps[r - 1] for r in rounds]
        assert len(board[region]["losses/value_loss"]) == 2 * len(rounds)
        rates = [v for _, v in board[region]["charts/learning_rate"]]
        assert rates == sorted(rates, reverse=True) and rates[0] > 0  # annealed
    rewards = dict(board["all"]["heldout/reward"])
    metrics = [r for r in csv_rows(tiny_run / "metrics.csv") if r["phase"] == "eval"]
    for row in metrics:
        if row["client"] == "all" and row["policy"].startswith("ppo"):
            step = steps[int(row["round"]) - 1]
            assert rewards[step] == pytest.approx(float(row["reward"]), rel=1e-6)
