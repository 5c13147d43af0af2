"""`fedmc speedup`: the steps until k identical regions beat SED, read from speedup.csv."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import CONF

from fedmc_flwr.analysis.results_doc import SPEEDUPS, speedup_overview, speedup_section
from fedmc_flwr.analysis.speedup import (
    COLUMNS,
    markdown,
    overview,
    per_cell,
    read_speedup,
    server_label,
    summary,
)
from fedmc_flwr.cli import main as fedmc
from fedmc_flwr.config import ConfigError, ExperimentConfig
from fedmc_flwr.experiments.speedup import cell_training, federate, load_plan, run_speedup

BASELINE = np.array([-1.0, -1.2, -0.9, -1.1, -1.05])
"""The baseline's reward on five held-out worlds."""
WOBBLE = np.array([0.01, -0.01, 0.02, -0.02, 0.0])
"""A spread of the differences over the worlds, so that each round's interval is finite."""
STEPS = 64


def cell(regions: int, seed: int, rounds: int, beats_from: int | None) -> list[dict]:
    """Rows of one cell whose policy trails the baseline by 0.1 per job until round
    `beats_from` (None: never) and leads it by 0.1 from then on; its reward at the last
    round is the baseline's plus 0.1 plus the seed / 100."""
    rows = []
    for rnd in range(1, rounds + 1):
        ahead = beats_from is not None and rnd >= beats_from
        lead = (0.1 + seed / 100 * (rnd == rounds)) if ahead else -0.1
        for world, base in enumerate(BASELINE):
            rows.append(
                dict(
                    zip(
                        COLUMNS,
                        [regions, seed, rnd, rnd * STEPS, world, base + lead + WOBBLE[world], base],
                        strict=True,
                    )
                )
            )
    return rows


def hand_made(path: Path) -> Path:
    """One region beats the baseline at rounds 8 and 6 (steps 512, 384), two at 4 and 4,
    four at 2 and 3, eight at round 1 for seed 0 and never for seed 1, in 10 rounds."""
    rows = []
    for regions, firsts in ((1, (8, 6)), (2, (4, 4)), (4, (2, 3)), (8, (1, None))):
        for seed, first in enumerate(firsts):
            rows += cell(regions, seed, 10, first)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_the_steps_to_beat_the_baseline_are_the_first_round_whose_interval_is_above_0(
    tmp_path: Path,
) -> None:
    frame = read_speedup(hand_made(tmp_path / "speedup.csv"))
    cells = per_cell(frame).set_index(["regions", "train_seed"])
    assert cells.loc[(1, 0), "steps_to_beat"] == 8 * STEPS
    assert cells.loc[(4, 1), "steps_to_beat"] == 3 * STEPS
    assert math.isnan(cells.loc[(8, 1), "steps_to_beat"])
    assert cells.loc[(2, 1), "reward_at_budget"] == pytest.approx(BASELINE.mean() + 0.11)
    assert cells.loc[(2, 1), "d_at_budget"] == pytest.approx(0.11)
    assert cells.loc[(8, 1), "d_at_budget"] == pytest.approx(-0.1)


def test_the_speedup_is_one_regions_mean_steps_over_each_sizes(tmp_path: Path) -> None:
    table = summary(read_speedup(hand_made(tmp_path / "speedup.csv"))).set_index("regions")
    assert table.loc[1, "steps_mean"] == 7 * STEPS
    assert table.loc[2, "speedup"] == pytest.approx(7 / 4)
    assert table.loc[4, "speedup"] == pytest.approx(7 / 2.5)
    assert math.isnan(table.loc[8, "steps_mean"])  # a seed never beat it: no mean
    assert math.isnan(table.loc[8, "speedup"])
    assert table.loc[2, "reward"] == pytest.approx(BASELINE.mean() + 0.105)
    assert table.loc[2, "d"] == pytest.approx(0.105)
    assert 0 < table.loc[2, "d_ci95"] < 0.2  # two seeds: a t quantile of 12.7
    text = markdown(read_speedup(tmp_path / "speedup.csv"))
    assert "| 1 | 512, 384 | 448 | 1.00x |" in text
    assert "| 8 | 64, > 640 | > 640 |  |" in text
    assert "8 regions beat" not in text  # no mean, so no share of one region's steps
    frame = read_speedup(tmp_path / "speedup.csv")
    one_seed = frame[(frame["regions"] < 8) | (frame["train_seed"] == 0)]
    assert "8 regions beat `sed` in 0.14 of one region's steps" in markdown(one_seed)


def tiny_plan(folder: Path, rounds: int = 2) -> Path:
    path = folder / "speedup.yaml"
    path.write_text(
        "# Tiny.\n"
        f"name: speedup_tiny\nexperiment: {CONF / 'many_small_regions.yaml'}\nregion: 0\n"
        "federations: [1, 2]\nseeds: [0]\nbaseline: sed\noverrides:\n"
        f"  - train.steps_per_round=8\n  - train.rounds={rounds}\n  - ppo.rollout_steps=8\n"
        "  - ppo.num_envs=2\n  - eval.seeds=3\n  - eval.steps=40\n  - eval.split=validation\n"
        f"  - results_dir={folder / 'results'}\n"
    )
    return path


def test_the_experiment_writes_every_round_of_every_cell_and_resumes_the_unfinished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tiny_plan(tmp_path)
    assert fedmc(["speedup", "--config", str(path)]) == 0
    out = tmp_path / "results" / "speedup_tiny"
    assert (out / "speedup.png").is_file()
    frame = read_speedup(out / "speedup.csv")
    assert len(frame) == 2 * 2 * 3  # sizes x rounds x held-out worlds
    assert sorted(frame["steps"].unique()) == [8, 16]
    assert "| 2 |" in capsys.readouterr().out
    # The two-region cell lost its last round (a run killed mid-cell): only it runs again,
    # and comes out as it was.
    frame[(frame["regions"] == 1) | (frame["round"] == 1)].to_csv(out / "speedup.csv", index=False)
    run_speedup(load_plan(path))
    pd.testing.assert_frame_equal(read_speedup(out / "speedup.csv"), frame)
    assert "2 cells, 1 to run" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="another config"):
        run_speedup(load_plan(tiny_plan(tmp_path, rounds=3)))


def test_the_results_section_is_the_table_and_plot_or_the_command(tmp_path: Path) -> None:
    config = Path("conf/speedup.yaml")
    empty = speedup_section(config, tmp_path / "none", tmp_path / "docs")
    assert "Not measured yet: `fedmc speedup --config conf/speedup.yaml`" in empty
    folder = tmp_path / "speedup"
    folder.mkdir()
    hand_made(folder / "speedup.csv")
    text = speedup_section(config, tmp_path, tmp_path / "docs")
    assert text.startswith("## The speed-up of federation")
    assert "| 2 | 256, 256 | 256 | 1.75x |" in text
    assert "![" in text and (tmp_path / "docs" / "speedup.png").is_file()


@pytest.mark.parametrize("config", SPEEDUPS)
def test_each_shipped_speedup_file_names_its_plan_as_the_file(config: Path) -> None:
    """docs/results.md finds a plan's results under the file's name."""
    assert load_plan(config).name == config.stem


def test_one_region_learns_alone_whatever_the_plans_server_step(tmp_path: Path) -> None:
    """The speed-up's reference is a region by itself: a plan's server step moves the
    federations of two, not the lone region."""
    plain = load_plan(tiny_plan(tmp_path)).config()
    stepped = load_plan(
        tiny_plan(tmp_path),
        [
            "federation.server_optimizer=fedavgm",
            "federation.server_momentum=0",
            "federation.server_learning_rate=3",
        ],
    ).config()

    def last(cfg: ExperimentConfig, size: int) -> list[np.ndarray]:
        trained, regions = cell_training(cfg, size)
        return federate(trained, 0, regions)[-1][1]

    for ours, theirs in zip(last(stepped, 1), last(plain, 1), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    two = zip(last(stepped, 2), last(plain, 2), strict=True)
    assert any(not np.array_equal(ours, theirs) for ours, theirs in two)
    # `federate` itself still steps a one-region federation (bench_optimum trains with it)
    one = zip(federate(stepped, 0, 1)[-1][1], federate(plain, 0, 1)[-1][1], strict=True)
    assert any(not np.array_equal(ours, theirs) for ours, theirs in one)


def test_together_settings_train_the_larger_sizes_and_leave_the_lone_region_as_it_was(
    tmp_path: Path,
) -> None:
    """`together` overrides reach the sizes above 1 only, after the file's overrides and
    before the command line's; an inheriting file adds its own after its parent's; the
    lone region's rows are a plain plan's, the two regions' those of a plan that sets
    the same keys for every size; and the folder records them."""
    for folder in ("together", "plain", "everywhere"):
        (tmp_path / folder).mkdir()
    path = tiny_plan(tmp_path / "together")
    path.write_text(path.read_text() + "together: [ppo.learning_rate=0.01]\n")
    plan = load_plan(path)
    assert (
        plan.config(1).ppo.learning_rate
        == load_plan(tiny_plan(tmp_path)).config().ppo.learning_rate
    )
    assert plan.config(2).ppo.learning_rate == 0.01
    on_the_command_line = load_plan(path, ["ppo.learning_rate=0.02"])
    assert on_the_command_line.config(2).ppo.learning_rate == 0.02
    assert on_the_command_line.together == ("ppo.learning_rate=0.01",)
    typo = tmp_path / "together" / "typo.yaml"
    typo.write_text("inherits: speedup.yaml\nname: typo\ntogether: [ppo.learning_rat=0.01]\n")
    with pytest.raises(ConfigError, match="learning_rat"):
        run_speedup(load_plan(typo))
    assert not (tmp_path / "together" / "results" / "typo").exists()
    child = tmp_path / "together" / "child.yaml"
    child.write_text("inherits: speedup.yaml\nname: child\ntogether: [ppo.clip_coef=0.3]\n")
    assert load_plan(child).together == ("ppo.learning_rate=0.01", "ppo.clip_coef=0.3")
    rows = read_speedup(run_speedup(plan))
    plain = read_speedup(run_speedup(load_plan(tiny_plan(tmp_path / "plain"))))
    everywhere = read_speedup(
        run_speedup(load_plan(tiny_plan(tmp_path / "everywhere"), ["ppo.learning_rate=0.01"]))
    )

    def size(frame: pd.DataFrame, k: int) -> pd.DataFrame:
        return frame[frame["regions"] == k].reset_index(drop=True)

    pd.testing.assert_frame_equal(size(rows, 1), size(plain, 1))
    pd.testing.assert_frame_equal(size(rows, 2), size(everywhere, 2))
    assert not size(rows, 2).equals(size(plain, 2))
    stamp = yaml.safe_load(
        (tmp_path / "together" / "results" / "speedup_tiny" / "plan.yaml").read_text()
    )
    assert stamp["together"] == ["ppo.learning_rate=0.01"]
    assert server_label(stamp) == "FedAvg; above 1 region: ppo.learning_rate=0.01"


def test_a_pooled_plan_trains_one_learner_on_every_regions_worlds(tmp_path: Path) -> None:
    """Under `pooled: true` a size of 2 is one learner on twice the envs: the rows of a
    plain plan's one region given twice the envs, and a folder of either kind refuses
    the other."""
    for folder in ("pooled", "doubled"):
        (tmp_path / folder).mkdir()
    pooled = tiny_plan(tmp_path / "pooled")
    pooled.write_text(pooled.read_text() + "pooled: true\n")
    rows = read_speedup(run_speedup(load_plan(pooled)))
    doubled = tiny_plan(tmp_path / "doubled")
    reference = read_speedup(run_speedup(load_plan(doubled, ["ppo.num_envs=4"])))
    ours = rows[rows["regions"] == 2].drop(columns="regions").reset_index(drop=True)
    theirs = reference[reference["regions"] == 1].drop(columns="regions")
    pd.testing.assert_frame_equal(ours, theirs.reset_index(drop=True))
    plain = tiny_plan(tmp_path / "pooled")  # the same folder, without `pooled`
    with pytest.raises(ConfigError, match="another config"):
        run_speedup(load_plan(plain))


def test_a_plan_that_inherits_changes_only_what_it_names(tmp_path: Path) -> None:
    """A plan measured again on another region's worlds: the parent's experiment (read
    relative to the parent), schedule and server, with the child's region and name."""
    parent = tiny_plan(tmp_path)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "small.yaml").write_text(
        f"inherits: {CONF / 'many_small_regions.yaml'}\nname: small\n"
    )
    parent.write_text(
        parent.read_text().replace(str(CONF / "many_small_regions.yaml"), "experiments/small.yaml")
    )
    child = tmp_path / "other" / "speedup_region3.yaml"
    child.parent.mkdir()
    child.write_text("inherits: ../speedup.yaml\nname: speedup_region3\nregion: 3\n")
    plan, base = load_plan(child), load_plan(parent)
    assert (plan.name, plan.region) == ("speedup_region3", 3)
    assert (
        plan.experiment.resolve()
        == base.experiment.resolve()
        == tmp_path / "experiments" / "small.yaml"
    )
    assert (plan.federations, plan.seeds, plan.overrides) == (
        base.federations,
        base.seeds,
        base.overrides,
    )
    assert plan.config() == base.config()
    child.write_text("inherits: ../speedup.yaml\nname: fewer_envs\noverrides: [ppo.num_envs=8]\n")
    fewer = load_plan(child)
    assert fewer.overrides == (*base.overrides, "ppo.num_envs=8")
    assert fewer.config().ppo.num_envs == 8
    assert fewer.config().train == base.config().train
    child.write_text("inherits: ../speedup.yaml\nregion: 3\n")
    with pytest.raises(ConfigError, match="names its own plan"):
        load_plan(child)
    child.write_text("inherits: speedup_region3.yaml\nname: loop\n")
    with pytest.raises(ConfigError, match="inherits from itself"):
        load_plan(child)
    child.write_text("inherits: ../speedup.yaml\nname: x\nregoin: 3\n")
    with pytest.raises(ConfigError, match="unknown keys \\['regoin'\\]"):
        load_plan(child)


def stamped(folder: Path, region: int, pooled: bool = False, **federation: object) -> Path:
    """A results folder of hand_made's rows, stamped as measured on `region`'s worlds
    of many_small_regions with the given federation settings."""
    folder.mkdir(parents=True)
    hand_made(folder / "speedup.csv")
    settings = {"server_optimizer": "none", "server_learning_rate": 1.0}
    settings |= {"server_momentum": 0.9, "drift_correction": "none"} | federation
    grid = {"region": region, "baseline": "sed"} | ({"pooled": True} if pooled else {})
    world = {"regions": 10}
    train = {"rounds": 10, "steps_per_round": STEPS}
    text = yaml.safe_dump(grid | {"world": world, "train": train, "federation": settings})
    (folder / "plan.yaml").write_text(text)
    return folder


def test_the_overview_sets_each_measured_file_beside_the_others(tmp_path: Path) -> None:
    """One row per measured folder, read with its own plan: the region's name, the server
    step, each size's mean steps and the largest size's share of one region's."""
    stepped = stamped(
        tmp_path / "stepped",
        1,
        server_optimizer="fedavgm",
        server_momentum=0.0,
        server_learning_rate=4.0,
    )
    pooled = stamped(tmp_path / "pooled", 6, pooled=True)
    one_seed = read_speedup(pooled / "speedup.csv")
    one_seed[(one_seed["regions"] < 8) | (one_seed["train_seed"] == 0)].to_csv(
        pooled / "speedup.csv", index=False
    )
    text = overview([("a.yaml", stepped), ("b.yaml", pooled), ("c.yaml", tmp_path / "none")])
    lines = text.splitlines()
    assert lines[0].endswith("| 1 region | 2 regions | 4 regions | 8 regions | 8 over 1 |")
    assert lines[2] == (
        "| `a.yaml` | europe-west9 (region 1) | 10 × 64 steps | step 4 | 448 | 256 | 160 "
        "| > 640 | - |"
    )
    assert lines[3] == (
        "| `b.yaml` | synthetic-03 (region 6) | 10 × 64 steps | none: one learner on k times "
        "the envs | 448 | 256 | 160 | 64 | 0.14 |"
    )
    assert len(lines) == 4  # c.yaml: not measured, no row
    assert overview([("c.yaml", tmp_path / "none")]) == ""


@pytest.mark.parametrize(
    ("federation", "label"),
    [
        ({}, "FedAvg"),
        ({"server_optimizer": "fedexp", "server_learning_rate": 10.0}, "FedExP, at most 10"),
        (
            {"server_optimizer": "fedavgm", "server_learning_rate": 2.0},
            "FedAvgM, step 2, momentum 0.9",
        ),
        ({"server_optimizer": "fedadam", "server_learning_rate": 0.1}, "FedAdam, step 0.1"),
        ({"drift_correction": "scaffold"}, "FedAvg, scaffold"),
    ],
)
def test_the_server_is_named_from_the_plan(federation: dict, label: str) -> None:
    settings = {"server_optimizer": "none", "server_learning_rate": 1.0, "server_momentum": 0.9}
    plan = {"federation": settings | {"drift_correction": "none"} | federation}
    assert server_label(plan) == label


def test_make_speedup_runs_the_files_the_page_shows() -> None:
    text = Path("Makefile").read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith("SPEEDUPS = "))
    assert line.split()[2:] == [config.stem for config in SPEEDUPS]


def test_a_federated_file_meets_the_pooled_file_of_its_region_seed_by_seed(
    tmp_path: Path,
) -> None:
    """Under the table, the federation against the pooled learner of the same region and
    schedule at the largest size both measured: seed by seed, a seed that never beat
    the baseline counting as the most steps; a pooled file of another region is no
    reference."""
    stepped = stamped(tmp_path / "stepped", 1, server_optimizer="fedavgm", server_momentum=0.0)
    pooled = stamped(tmp_path / "pooled", 1, pooled=True)
    frame = read_speedup(pooled / "speedup.csv")
    eight = frame["regions"] == 8
    # the pooled learner: seed 0 beats it from round 2 (later than the federation's 1),
    # seed 1 from round 5 (sooner than the federation's never)
    frame.loc[eight & (frame["train_seed"] == 0) & (frame["round"] == 1), "reward"] -= 0.2
    late = eight & (frame["train_seed"] == 1) & (frame["round"] >= 5)
    frame.loc[late, "reward"] += 0.2
    frame.to_csv(pooled / "speedup.csv", index=False)
    other = stamped(tmp_path / "other", 6, pooled=True)
    text = overview([("a.yaml", stepped), ("b.yaml", pooled), ("c.yaml", other)])
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert lines == [
        "- europe-west9 (region 1), 8 regions: `a.yaml` (step 1) beat `sed` in fewer steps "
        "than `b.yaml` in 1 of 2 training seeds, as few in 0, more in 1 (means > 640 "
        "against 224)."
    ]
    alone = overview([("a.yaml", stepped), ("b.yaml", stepped)])  # no pooled file
    assert not [line for line in alone.splitlines() if line.startswith("- ")]


def test_the_overview_keeps_the_published_rows_of_files_this_checkout_did_not_measure(
    tmp_path: Path,
) -> None:
    """A checkout that holds one file's results rewrites that file's row and keeps every
    other file's row as the page last published it, under a note that names them, and the
    seed-by-seed lines of kept files alone (a line that pairs a kept file with the
    measured one would hold stale means); a file neither measured nor published has no
    row."""
    results = tmp_path / "results"
    stamped(results / "a", 1, server_optimizer="fedavgm", server_momentum=0.0)
    configs = [Path("conf/a.yaml"), Path("conf/b.yaml"), Path("conf/c.yaml")]
    page = (
        "## The speed-up of federation, file by file\n\nIntro.\n\n"
        "| file | worlds of | rounds | server | 1 region | 2 regions | 4 regions | "
        "8 regions | 8 over 1 |\n"
        "|---|---|---|---|---:|---:|---:|---:|---:|\n"
        "| `conf/a.yaml` | old | old | old | 1 | 1 | 1 | 1 | 1.00 |\n"
        "| `conf/b.yaml` | us-east1 (region 0) | 5 × 16 steps | FedAvg | 300 | 200 | 150 "
        "| 90 | 0.30 |\n\n"
        "- us-east1 (region 0), 8 regions: `conf/b.yaml` (FedAvg) beat `sed` in fewer ...\n"
        "- europe-west9 (region 1), 8 regions: `conf/a.yaml` (step 1) old line.\n"
        "- us-east1 (region 0), 8 regions: `conf/b.yaml` (FedAvg) against `conf/a.yaml`.\n\n"
        "## The next section\n"
    )
    text = speedup_overview(configs, results, published=page)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `conf/a.yaml` | europe-west9 (region 1) | 10 × 64 steps | step 1 | 448 | 256 | 160 "
        "| > 640 | - |",
        "| `conf/b.yaml` | us-east1 (region 0) | 5 × 16 steps | FedAvg | 300 | 200 | 150 "
        "| 90 | 0.30 |",
    ]
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert lines == [
        "- us-east1 (region 0), 8 regions: `conf/b.yaml` (FedAvg) beat `sed` in fewer ..."
    ]
    assert "Rows of `conf/b.yaml` are kept as last published" in text
    nothing = speedup_overview(configs, tmp_path / "empty", published=page)
    assert nothing.startswith("## The speed-up of federation, file by file\n\nNot measured yet")
