"""`fedmc report` on hand-made result directories: paired numbers and bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import SMALL_DEMO, TINY_WORLD

from fedmc_flwr.analysis.report import (
    ReportError,
    collect,
    collect_common,
    load,
    summarise,
    summary_frame,
    summary_table,
    world_table,
)
from fedmc_flwr.analysis.tables import format_table
from fedmc_flwr.cli import main
from fedmc_flwr.config import load_config
from fedmc_flwr.evaluation import evaluate_dispatchers, per_seed_rows, summary_rows
from fedmc_flwr.metrics import BY_NAME
from fedmc_flwr.results import per_seed_writer
from fedmc_flwr.sim.signals import region_catalogue

REGIONS = ("us-east1", "europe-west9")
SEEDS = (10, 11, 12)
SED = {"us-east1": [-0.50, -0.60, -0.70], "europe-west9": [-0.40, -0.45, -0.50]}
JSQ = {"us-east1": [-0.55, -0.64, -0.76], "europe-west9": [-0.43, -0.48, -0.54]}
# The learner, per training seed and round (round 2 is the last).
PPO = {
    (0, 1): {"us-east1": [-0.60, -0.70, -0.70], "europe-west9": [-0.50, -0.50, -0.50]},
    (0, 2): {"us-east1": [-0.45, -0.58, -0.66], "europe-west9": [-0.38, -0.44, -0.47]},
    (1, 1): {"us-east1": [-0.70, -0.70, -0.70], "europe-west9": [-0.50, -0.60, -0.50]},
    (1, 2): {"us-east1": [-0.48, -0.55, -0.69], "europe-west9": [-0.39, -0.40, -0.49]},
}


def _rows(policy, values, train_seed, rnd, seeds=SEEDS, regions=REGIONS):
    return [
        {
            "experiment": "demo",
            "train_seed": train_seed,
            "round": rnd,
            "split": "test",
            "client": region,
            "policy": policy,
            "eval_seed": (2 << 62) + 1000 * k + seed,
            "start_phase": (j + 0.5) / len(seeds),
            "train_steps": 0 if rnd == 0 else 100 * rnd,
            "jobs": 50,
            "reward": values[region][j],
            "latency_ms": 100.0 + j,
            "latency_p95_ms": 200.0 + j,
            "slo_violation": 0.1,
            "cost_usd": 1e-6,
            "carbon_g": 1e-4,
            "energy_kwh": 2e-6,
        }
        for k, region in enumerate(REGIONS)
        if region in regions
        for j, seed in enumerate(seeds)
    ]


def make_dir(
    root: Path, train_seed: int, sed=SED, seeds=SEEDS, learner_seeds=None, last_regions=REGIONS
) -> Path:
    """A run's per_seed.csv; `last_regions`: the regions its learner's last round was
    judged in (the others failed that round's evaluation)."""
    out = root / f"demo-s{train_seed}"
    out.mkdir(parents=True)
    writer = per_seed_writer(out)
    writer.write(_rows("sed", sed, train_seed, 0, seeds) + _rows("jsq", JSQ, train_seed, 0, seeds))
    for rnd in (1, 2):
        values = PPO[(train_seed, rnd)]
        regions = last_regions if rnd == 2 else REGIONS
        writer.write(_rows("ppo-fedavg", values, train_seed, rnd, learner_seeds or seeds, regions))
    return out


def _stratified_diff(a: dict, b: dict) -> float:
    return float(np.mean([np.mean(np.subtract(a[r], b[r])) for r in REGIONS]))


def test_paired_numbers_over_training_seeds(tmp_path: Path) -> None:
    dirs = [make_dir(tmp_path, 0), make_dir(tmp_path, 1)]
    summaries = {s.policy: s for s in summarise(collect(load(dirs)), ["sed", "jsq"])}
    ppo = summaries["ppo-fedavg"]
    assert len(ppo.runs) == 2 and ppo.over == "training seeds"
    d = [_stratified_diff(PPO[(s, 2)], SED) for s in (0, 1)]
    diff, over = ppo.versus["sed"]
    t_975_df1 = 12.706204736174707
    assert over == "training and eval seeds"
    assert diff.mean == pytest.approx(np.mean(d), abs=1e-15)
    # Training-seed variance plus the variance of the worlds (per-world differences
    # averaged over the two seeds, stratified over regions), at df = min(1, 4) = 1.
    seed_var = np.var(d, ddof=1) / 2
    per_world = [np.mean([np.subtract(PPO[(s, 2)][r], SED[r]) for s in (0, 1)], 0) for r in REGIONS]
    world_var = sum(np.var(w, ddof=1) / len(w) for w in per_world) / len(REGIONS) ** 2
    expected = t_975_df1 * math.sqrt(seed_var + world_var)
    assert diff.half_width == pytest.approx(expected, rel=1e-12)
    level = [np.mean([np.mean(PPO[(s, 2)][r]) for r in REGIONS]) for s in (0, 1)]
    assert ppo.reward.mean == pytest.approx(np.mean(level), abs=1e-15)
    assert ppo.reward.half_width == pytest.approx(
        t_975_df1 * abs(level[0] - level[1]) / 2, rel=1e-12
    )
    assert ppo.train_steps == 200
    # Dispatchers: once, whatever the number of directories; paired over eval seeds.
    sed = summaries["sed"]
    assert not sed.learner and sed.over == "eval seeds"
    jsq_vs_sed, over = summaries["jsq"].versus["sed"]
    assert over == "eval seeds"
    assert jsq_vs_sed.mean == pytest.approx(_stratified_diff(JSQ, SED), abs=1e-15)
    # jsq - sed per seed: [-.05, -.04, -.06] and [-.03, -.03, -.04]
    var = np.var([-0.05, -0.04, -0.06], ddof=1) / 3 + np.var([-0.03, -0.03, -0.04], ddof=1) / 3
    assert jsq_vs_sed.half_width == pytest.approx(2.7764451051977987 * math.sqrt(var) / 2)
    assert jsq_vs_sed.verdict() == "worse"


def test_one_training_seed_and_a_chosen_round(tmp_path: Path) -> None:
    one = make_dir(tmp_path, 0)
    summaries = {s.policy: s for s in summarise(collect(load([one]), 1), ["sed"])}
    ppo = summaries["ppo-fedavg"]
    diff, over = ppo.versus["sed"]
    assert ppo.over == "eval seeds" and over == "eval seeds"
    assert diff.mean == pytest.approx(_stratified_diff(PPO[(0, 1)], SED), abs=1e-15)
    assert diff.n == 6


def test_cli_prints_the_table_with_verdicts(tmp_path: Path, capsys) -> None:
    dirs = [str(make_dir(tmp_path, s)) for s in (0, 1)]
    assert main(["report", *dirs, "--baseline", "sed", "--baseline", "jsq"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[3:]}
    assert set(lines) == {"sed", "jsq", "ppo-fedavg"}
    assert "worse" in lines["jsq"] and "(baseline)" in lines["sed"]
    assert "training seeds" in lines["ppo-fedavg"] and "eval seeds" in lines["sed"]
    assert "(eval seeds)" not in lines["ppo-fedavg"]  # its differences span both
    assert "learners at round 2" in out
    assert main(["report", *dirs, "--baseline", "sed", "--markdown", "--round", "1"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert table[0].startswith("| policy | train seeds |") and len(table) == 2 + 3
    assert "learners at round 1" in out
    assert table[-1].startswith("| ppo-fedavg | 2 | -0.6000 ± ")
    assert table[-1].endswith("| no difference at 95% |")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "no such directory"),
        ("empty", "no per_seed.csv"),
        ("baseline", "unknown baseline 'magic'"),
        ("eval-seeds", "mismatched eval seeds"),
        ("learner-eval-seeds", "mismatched eval seeds"),
        ("dispatcher-differs", "sed differs between"),
        ("round", "has no round 7"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys, case: str, message: str) -> None:
    good = str(make_dir(tmp_path, 0))
    args = [good, "--baseline", "sed"]
    if case == "missing":
        args = [good, str(tmp_path / "nowhere"), "--baseline", "sed"]
    elif case == "empty":
        (tmp_path / "empty").mkdir()
        args = [good, str(tmp_path / "empty"), "--baseline", "sed"]
    elif case == "baseline":
        args = [good, "--baseline", "magic"]
    elif case == "eval-seeds":
        args = [good, str(make_dir(tmp_path, 1, seeds=(10, 11, 13))), "--baseline", "sed"]
    elif case == "learner-eval-seeds":
        args = [str(make_dir(tmp_path, 1, learner_seeds=(10, 11, 13))), "--baseline", "sed"]
    elif case == "dispatcher-differs":
        other = {r: [v + 0.01 for v in values] for r, values in SED.items()}
        args = [good, str(make_dir(tmp_path, 1, sed=other)), "--baseline", "sed"]
    elif case == "round":
        args = [good, "--baseline", "sed", "--round", "7"]
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_summary_of_every_metric_with_the_baseline_row(tmp_path: Path) -> None:
    dirs = [make_dir(tmp_path, 0), make_dir(tmp_path, 1)]
    policies = collect(load(dirs))
    summary = summary_frame(policies, "sed").set_index("policy")
    fed = summary.loc["ppo-fedavg"]
    diffs = [_stratified_diff(PPO[(s, 2)], SED) for s in (0, 1)]
    assert fed["d_reward"] == pytest.approx(np.mean(diffs))
    assert fed["d_latency_ms"] == 0.0 and fed["d_energy_kwh"] == 0.0
    assert fed["energy_kwh"] == pytest.approx(2e-6) and fed["train_seeds"] == 2
    assert summary.loc["jsq", "ci_over"] == "eval seeds"
    levels, paired = summary_table(summary.reset_index())
    assert levels[0][:3] == ["policy", "train seeds", "reward"]
    assert "energy mWh/job" in levels[0]
    by_policy = {row[0]: row for row in paired[1:]}
    assert by_policy["sed"][1:8] == ["(baseline)"] * 7
    assert by_policy["ppo-fedavg"][-1] == "training and eval seeds"
    with pytest.raises(ReportError, match="unknown baseline"):
        summary_frame(policies, "nope")


def test_the_world_table_by_hand(tmp_path: Path) -> None:
    """The learner at the mean of its two seeds, world by world against SED: us-east1
    +0.035, +0.035, +0.025, europe-west9 +0.015, +0.030, +0.020; the median of the six is
    +0.0275, and every world is at least as good. Latency is the same in every world (a
    tie counts as at least as good); the dispatchers get no row."""
    policies = collect(load([make_dir(tmp_path, 0), make_dir(tmp_path, 1)]))
    header, *rows = world_table(policies, "sed")
    assert header[1:3] == ["Δ reward, median world", "worlds with reward ≥ baseline's"]
    assert rows == [["ppo-fedavg", "+0.0275", "6 of 6", "+0.0", "6 of 6"]]


def test_the_run_table_and_the_report_agree_on_p95(tmp_path: Path, capsys) -> None:
    """`fedmc run`'s table (metrics.csv's `client="all"` rows) and `fedmc report` (per_seed.csv)
    give one p95 for the same worlds, under one column title: the mean over worlds of each
    world's p95, not a percentile of every world's jobs pooled."""
    cfg = load_config(SMALL_DEMO, [*TINY_WORLD, "eval.seeds=4", "eval.steps=60"])
    results = evaluate_dispatchers(cfg, ["sed", "jsq"], progress=False)
    names = [region.name for region in region_catalogue(cfg.world.regions)]
    rows = summary_rows(results, names)
    key = {"experiment": cfg.name, "train_seed": cfg.seed, "round": 0, "train_steps": 0}
    per_seed_writer(tmp_path).write(per_seed_rows(results, names, **key))
    reported = summarise(collect(load([tmp_path])), ["sed"])
    p95 = BY_NAME["latency_p95_ms"]
    table = {row["policy"]: row[p95.csv_column] for row in rows if row["client"] == "all"}
    assert table == pytest.approx({s.policy: s.points[p95.name] for s in reported}, rel=1e-12)
    assert all(np.ptp(r.per_seed[p95.name]) > 0 for r in results), "worlds should differ"
    assert p95.title in format_table(rows).splitlines()[0]
    assert main(["report", str(tmp_path), "--baseline", "sed"]) == 0
    assert p95.title in capsys.readouterr().out


def test_a_region_left_out_of_a_runs_last_evaluation_is_named_and_paired_without(
    tmp_path: Path, capsys
) -> None:
    """europe-west9 failed the learner's last evaluation: the report pairs every policy on
    us-east1's worlds, as `fedmc run`'s table does, and names what it left out."""
    one = make_dir(tmp_path, 0, last_regions=("us-east1",))
    policies, left = collect_common(load([one]))
    assert (
        list(left) == ["europe-west9"] and "ppo-fedavg (training seed 0)" in left["europe-west9"][0]
    )
    summaries = {s.policy: s for s in summarise(policies, ["sed"])}
    diff, over = summaries["ppo-fedavg"].versus["sed"]
    east = np.subtract(PPO[(0, 2)]["us-east1"], SED["us-east1"])
    assert over == "eval seeds" and diff.n == 3
    assert diff.mean == pytest.approx(east.mean(), abs=1e-15)
    assert summaries["sed"].reward.mean == pytest.approx(np.mean(SED["us-east1"]), abs=1e-15)
    assert main(["report", str(one), "--baseline", "sed"]) == 0
    out = capsys.readouterr().out
    assert "1 regions x 3 worlds" in out
    assert "left out: europe-west9, which ppo-fedavg (training seed 0) at round 2" in out
    with pytest.raises(ReportError, match=r"mismatched eval seeds: .* not judged in europe-west9"):
        collect(load([one]))  # what needs every world, as a sweep's summary does, refuses


def test_runs_that_share_no_region_cannot_be_paired(tmp_path: Path) -> None:
    frame = load([make_dir(tmp_path, 0)])
    learner = (frame["policy"] == "ppo-fedavg") & (frame["round"] == 2)
    frame = frame[~learner | (frame["client"] == "europe-west9")]
    frame = frame[(frame["policy"] != "sed") | (frame["client"] == "us-east1")]
    with pytest.raises(ReportError, match="no region was judged for every policy"):
        collect_common(frame)
