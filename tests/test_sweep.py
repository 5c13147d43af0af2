"""`fedmc sweep` on in-process cells (centralised and local PPO, tiny settings): the cell
order, resuming, reproducing one cell, stale folders and the summary's numbers. The
federated path through Flower runs in the notebook test (conf/sweeps/tiny.yaml)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import yaml
from conftest import CONF, TINY

from fedmc_flwr.analysis.report import collect, compare, level
from fedmc_flwr.cli import main
from fedmc_flwr.config import ConfigError
from fedmc_flwr.experiments.sweep import drift_section, run_sweep, summarise_sweep
from fedmc_flwr.sweeps import finished_frame, is_finished, load_sweep


def write_sweep(folder: Path, **changes: object) -> Path:
    spec = {
        "name": "unit",
        "experiment": str(TINY),
        "seeds": [0, 1],
        "baseline": "sed",
        "results_dir": str(folder / "results"),
        "set": ["train.rounds=1", "eval.seeds=3"],
        "variants": {"ppo-centralised": {"kind": "centralised"}, "ppo-local": {"kind": "local"}},
        **changes,
    }
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sweep")
    path = write_sweep(folder)
    ran = run_sweep(load_sweep(path), progress=False)
    assert len(ran) == 4
    return path


def test_cells_run_seed_by_seed_and_land_in_their_own_folders(tmp_path: Path) -> None:
    sweep = load_sweep(write_sweep(tmp_path))
    assert [(c.variant, c.seed) for c in sweep.cells] == [
        ("ppo-centralised", 0),
        ("ppo-local", 0),
        ("ppo-centralised", 1),
        ("ppo-local", 1),
    ]
    assert [c.out_dir.name for c in sweep.cells[:2]] == [
        "ppo-centralised-s0-centralised",
        "ppo-local-s0-local",
    ]
    assert all(
        c.cfg.train.rounds == 1 and c.cfg.results_dir == str(sweep.out_dir) for c in sweep.cells
    )
    assert not any(is_finished(c) for c in sweep.cells)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"variants": {}}, "at least one"),
        ({"seeds": [0, 0]}, "distinct"),
        ({"variants": {"x": {"kind": "magic"}}}, "variants.x.kind"),
        ({"set": ["world.regions=0"]}, "world.regions"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_sweep_files_are_config_errors(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_sweep(write_sweep(tmp_path, **changes))


@pytest.mark.slow
def test_finished_cells_are_skipped_and_one_rerun_cell_is_identical(swept: Path) -> None:
    sweep = load_sweep(swept)
    assert run_sweep(sweep, progress=False) == []
    summary = sweep.out_dir / "summary.csv"
    summarise_sweep(sweep)
    before_summary = summary.read_bytes()
    cell = sweep.cells[2]
    before = (cell.out_dir / "per_seed.csv").read_bytes()
    shutil.rmtree(cell.out_dir)
    assert run_sweep(sweep, progress=False) == [cell]
    assert (cell.out_dir / "per_seed.csv").read_bytes() == before
    summarise_sweep(sweep)
    assert summary.read_bytes() == before_summary


@pytest.mark.slow
def test_cells_run_two_at_once_give_the_same_results(swept: Path, tmp_path: Path) -> None:
    sweep = load_sweep(write_sweep(tmp_path))
    assert len(run_sweep(sweep, progress=False, jobs=2)) == 4
    for mine, reference in zip(sweep.cells, load_sweep(swept).cells, strict=True):
        assert mine.out_dir != reference.out_dir
        expected = (reference.out_dir / "per_seed.csv").read_bytes()
        assert (mine.out_dir / "per_seed.csv").read_bytes() == expected
        log = sweep.out_dir / "logs" / f"{mine.out_dir.name}.log"
        assert "held-out reward" in log.read_text()


@pytest.mark.slow
def test_a_sigterm_to_a_sweep_of_two_at_once_stops_both_cells(tmp_path: Path) -> None:
    """Both workers are in a cell of many rounds when the sweep is told to stop: it exits
    as interrupted, and none of its processes outlives it for more than a short wait."""
    path = write_sweep(tmp_path, set=["train.rounds=200", "eval.seeds=3"])
    logs = load_sweep(path).out_dir / "logs"
    command = [sys.executable, "-m", "fedmc_flwr.cli", "sweep", "--config", str(path)]
    sweeping = subprocess.Popen([*command, "--jobs", "2"], stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    while len(list(logs.glob("*.log"))) < 2:
        assert sweeping.poll() is None, sweeping.stderr.read() if sweeping.stderr else ""
        assert time.monotonic() - started < 120, "the two cells never started"
        time.sleep(0.2)
    family = psutil.Process(sweeping.pid).children(recursive=True)
    assert len(family) >= 2
    sweeping.send_signal(signal.SIGTERM)
    assert sweeping.wait(timeout=60) == 130
    assert "fedmc: interrupted" in (sweeping.stderr.read() if sweeping.stderr else "")
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, f"left running: {alive}"


@pytest.mark.slow
def test_a_half_written_cell_is_run_again(swept: Path) -> None:
    sweep = load_sweep(swept)
    cell = sweep.cells[1]
    per_seed = cell.out_dir / "per_seed.csv"
    complete = per_seed.read_text()
    per_seed.write_text("".join(complete.splitlines(keepends=True)[:-1]))
    assert not is_finished(cell)
    assert run_sweep(sweep, progress=False) == [cell]
    assert per_seed.read_text() == complete


@pytest.mark.slow
def test_a_folder_of_another_config_is_an_error(swept: Path, tmp_path: Path) -> None:
    other = load_sweep(
        write_sweep(tmp_path, results_dir=str(swept.parent / "results"), set=["train.rounds=2"])
    )
    with pytest.raises(ConfigError, match="another config"):
        run_sweep(other, progress=False)


@pytest.mark.slow
def test_a_sweeps_results_moved_elsewhere_are_still_its_cells(swept: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    shutil.copytree(swept.parent / "results", moved)
    sweep = load_sweep(write_sweep(tmp_path, results_dir=str(moved)))
    assert all(is_finished(cell) for cell in sweep.cells)
    assert run_sweep(sweep, progress=False) == []


@pytest.mark.slow
def test_summary_numbers_are_the_reports(swept: Path) -> None:
    sweep = load_sweep(swept)
    summarise_sweep(sweep)
    summary = pd.read_csv(sweep.out_dir / "summary.csv").set_index("policy")
    policies = collect(finished_frame(sweep, [0, 1]))
    assert {"ppo-centralised", "ppo-local", "sed", "myopic-oracle"} <= set(summary.index)
    row = summary.loc["ppo-local"]
    assert row["train_seeds"] == 2 and row["ci_over"] == "training seeds"
    for metric in ("reward", "latency_p95_ms", "energy_kwh"):
        estimate, _ = level(policies["ppo-local"], metric)
        diff, over = compare(policies["ppo-local"], policies["sed"], metric)
        assert row[metric] == pytest.approx(estimate.mean, rel=1e-12)
        assert row[f"{metric}_ci95"] == pytest.approx(estimate.half_width, rel=1e-12)
        assert row[f"d_{metric}"] == pytest.approx(diff.mean, rel=1e-12)
        assert over == row["diff_over"] == "training and eval seeds"
    assert np.isnan(summary.loc["sed", "d_reward"])
    assert summary.loc["sed", "ci_over"] == "eval seeds"
    assert list(summary["reward"]) == sorted(summary["reward"], reverse=True)
    markdown = (sweep.out_dir / "summary.md").read_text()
    assert "| ppo-local | 2 |" in markdown and "Paired difference against `sed`" in markdown
    curves = pd.read_csv(sweep.out_dir / "curves.csv")
    local = curves[curves["policy"] == "ppo-local"]
    assert sorted(local["train_seed"].unique()) == [0, 1] and set(local["round"]) == {1}


@pytest.mark.slow
def test_cli_summary_only_and_an_unknown_baseline(swept: Path, capsys) -> None:
    assert main(["sweep", "--config", str(swept), "--summary-only"]) == 0
    assert "| ppo-centralised | 2 |" in capsys.readouterr().out
    assert main(["sweep", "--config", str(swept), "--summary-only", "--baseline", "nope"]) == 2
    assert "unknown baseline 'nope'" in capsys.readouterr().err
    assert main(["sweep", "--config", str(swept), "--jobs", "0"]) == 2
    assert capsys.readouterr().err.strip().endswith("expected 1 or more cells at once")


@pytest.mark.slow
def test_shipped_sweeps_load() -> None:
    default = load_sweep(CONF / "sweeps" / "default.yaml")
    assert {c.kind for c in default.cells} == {"federated", "centralised", "local"}
    assert len(default.cells) == 25 and default.baseline == "sed"
    shares = {c.cfg.federation.global_share for c in default.cells if c.kind == "federated"}
    assert shares == {1.0, 0.5, 0.25}
    assert {c.cfg.ppo.policy for c in default.cells} == {"two-tier"}
    variants = load_sweep(CONF / "sweeps" / "federation_variants.yaml")
    assert len(variants.cells) == 25 and variants.baseline in {c.variant for c in variants.cells}
    mus = sorted(c.cfg.federation.mu for c in variants.cells if c.variant.startswith("ppo-shrink"))
    assert sorted(set(mus)) == [0.01, 0.1, 0.5]
    tiny = load_sweep(CONF / "sweeps" / "tiny.yaml")
    assert {(c.kind, c.seed) for c in tiny.cells} == {
        ("federated", 0),
        ("federated", 1),
        ("centralised", 0),
        ("centralised", 1),
    }
    settings = ("balanced", "busy_region", "skewed_prices_carbon", "outages")
    forms = {
        "fedprox": {
            ("fedavg", 0.0, False, False),
            ("shrink", 0.0, False, False),
            ("fedavg", 0.01, False, False),
        },
        "personal": {
            ("fedavg", 0.0, False, False),
            ("fedavg", 0.0, True, False),
            ("fedavg", 0.0, False, True),
        },
    }
    kinds = {"fedprox": {"federated"}, "personal": {"federated", "local", "centralised"}}
    for question in forms:
        sweeps = [load_sweep(p) for p in (CONF / "sweeps").glob(f"{question}_*.yaml")]
        assert {sweep.experiment.name for sweep in sweeps} == {
            f"noniid_{name}.yaml" for name in settings
        }
        for sweep in sweeps:
            assert sweep.baseline == "ppo-fedavg" and len({c.seed for c in sweep.cells}) == 5
            federation = [c.cfg.federation for c in sweep.cells if c.kind == "federated"]
            assert {
                (f.strategy, f.proximal_mu, f.personal_statistics, f.fine_tuned) for f in federation
            } == forms[question]
            assert {c.kind for c in sweep.cells} == kinds[question]
    for name in ("late_region", "data_poor_region"):
        sweep = load_sweep(CONF / "sweeps" / f"{name}.yaml")
        assert {(c.variant, c.kind) for c in sweep.cells} == {
            ("ppo-fedavg", "federated"),
            ("ppo-local", "local"),
        }


@pytest.mark.slow
def test_sweep_plots_as_png_and_svg_with_units(swept: Path, tmp_path: Path, capsys) -> None:
    sweep = load_sweep(swept)
    summarise_sweep(sweep)
    assert main(["plot", str(sweep.out_dir), "--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    stems = ("curves_latency", "curves_reward", "paired", "pareto", "per_round")
    assert written == sorted(f"{s}.{fmt}" for s in stems for fmt in ("png", "svg"))
    assert all((tmp_path / f"{s}.png").read_bytes().startswith(b"\x89PNG") for s in stems)
    pareto = (tmp_path / "pareto.svg").read_text()
    assert "mean latency (ms)" in pareto and "carbon per job (mg CO2eq)" in pareto
    assert "95% CI over training seeds" in (tmp_path / "curves_reward.svg").read_text()
    assert str(tmp_path / "pareto.svg") in capsys.readouterr().out


def test_plotting_a_folder_without_a_sweep_is_one_line(tmp_path: Path, capsys) -> None:
    assert main(["plot", str(tmp_path)]) == 2
    assert "run `fedmc sweep` first" in capsys.readouterr().err


def test_a_federated_cell_goes_to_the_runner_and_its_failure_is_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    calls = []

    def failing_runner(config: Path, overrides: list[str]) -> int:
        calls.append((config, overrides))
        return 1

    monkeypatch.setattr("fedmc_flwr.experiments.sweep.federate", failing_runner)
    path = write_sweep(tmp_path, variants={"ppo-fedavg": {"set": ["federation.mu=0.0"]}})
    assert main(["sweep", "--config", str(path)]) == 1
    assert "ppo-fedavg seed 0: the federated run failed" in capsys.readouterr().err
    config, overrides = calls[0]
    assert config == TINY and len(calls) == 1
    assert overrides[-3:] == [
        "seed=0",
        "name=ppo-fedavg-s0",
        f"results_dir={tmp_path / 'results' / 'unit'}",
    ]


def test_the_drift_table_averages_each_federated_variants_rounds_and_seeds(tmp_path: Path) -> None:
    """Rounds 1 and 2 of two seeds: round 1 keeps 0.6 and 0.8 of the length, round 2 0.2
    and 0.4; a variant missing a seed's file gets no row (no mean over fewer seeds)."""
    variants = {"ppo-fedavg": {"kind": "federated"}, "ppo-other": {"kind": "federated"}}
    sweep = load_sweep(write_sweep(tmp_path, variants=variants))
    for cell in sweep.cells:
        if cell.variant == "ppo-other" and cell.seed == 1:
            continue
        cell.out_dir.mkdir(parents=True)
        first, second = (0.6, 0.2) if cell.seed == 0 else (0.8, 0.4)
        (cell.out_dir / "drift.csv").write_text(
            "round,regions,mean_update_norm,region_update_norm,spread,shrink\n"
            f"1,2,1,1,1.0,{first}\n2,2,1,1,3.0,{second}\n"
        )
    table = drift_section(sweep, [0, 1])
    assert "| ppo-fedavg | 0.500 | 0.700 | 0.300 | 2.00 |" in table
    assert "ppo-other" not in table
    assert drift_section(sweep, [0]).count("| ppo-") == 2
