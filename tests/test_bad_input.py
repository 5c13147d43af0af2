"""Bad input never gives a traceback: one line naming what is wrong, exit code 2.

Property-based tests drive the config loader and `--set` overrides with arbitrary text and
with values around every range's edges: the loader either returns a config or raises a
`ConfigError`, and whatever it accepts builds a world and a learner that step. The CLI
cases (missing and malformed files, a metrics table without its columns, a corrupt or
mismatched checkpoint, a changed config on resume, a name that would leave the results
directory) each end in exactly one line on stderr and exit code 2, before Flower starts.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, SMALL_DEMO, TINY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedmc_flwr.cli import main
from fedmc_flwr.config import ConfigError, learner_plan, load_config, to_yaml
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import COLUMNS, MetricsWriter, experiment_path, keep_rows
from fedmc_flwr.sim.world import MultiCloudSim

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EDGES = st.one_of(
    st.sampled_from([0, 1, 2, -1, 3, 7, 64, 10**6, 2**63, 0.0, 0.5, 1.0, -0.5, 1e-9, 1e9]),
    st.sampled_from([float("nan"), float("inf"), "x", "", "null", "[]", "{}", "true"]),
)
NUMERIC_KEYS = [
    "seed",
    "world.regions",
    "world.nodes_per_region",
    "world.queue_threshold",
    "world.queue_capacity",
    "world.load",
    "world.background_load",
    "world.burstiness",
    "world.outage_rate",
    "world.warmup_jobs",
    "reward.latency",
    "reward.cost",
    "ppo.num_envs",
    "ppo.rollout_steps",
    "ppo.gamma",
    "ppo.num_minibatches",
    "ppo.hidden_size",
    "train.rounds",
    "train.steps_per_round",
    "federation.mu",
    "federation.min_regions",
    "federation.trim_fraction",
    "federation.round_timeout_s",
    "eval.seeds",
    "eval.steps",
]


@FAST
@given(st.text(max_size=300))
def test_any_yaml_text_loads_or_is_a_config_error(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.mktemp("yaml") / "any.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_config(path)
    except ConfigError as exc:
        assert "\n" not in str(exc)


@FAST
@given(st.lists(st.text(max_size=40), max_size=3))
def test_any_override_text_loads_or_is_a_config_error(overrides: list[str]) -> None:
    try:
        load_config(SMALL_DEMO, overrides)
    except ConfigError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(NUMERIC_KEYS), EDGES, max_size=4))
def test_whatever_validation_accepts_builds_and_steps(values: dict[str, object]) -> None:
    overrides = [f"{key}={value}" for key, value in values.items()]
    overrides += ["ppo.num_envs=2", "eval.seeds=2"] if "ppo.num_envs" not in values else []
    try:
        cfg = load_config(TINY, overrides)
    except ConfigError:
        return
    sim = MultiCloudSim(cfg.world, cfg.reward, np.zeros(2, dtype=np.int64))
    _, mask = sim.reset(np.arange(2, dtype=np.uint64))
    for _ in range(3):
        result = sim.step(mask.argmax(axis=1))
        assert np.isfinite(result.reward).all()
        mask = result.mask
    learner = PPOLearner(learner_plan(cfg, [0]), seed=0)
    assert all(np.isfinite(w).all() for w in learner.get_weights())


@FAST
@given(st.text(min_size=1, max_size=60))
def test_an_accepted_name_stays_inside_the_results_directory(name: str) -> None:
    try:
        cfg = load_config(SMALL_DEMO, [f"name={name}"])
    except ConfigError:
        return
    results = Path("/srv/results")
    assert experiment_path(results, cfg.name).parent == results


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _experiment(tmp_path: Path) -> Path:
    """A tiny experiment that completed round 1 of 2 (config, tables, progress)."""
    out = tmp_path / "tiny_federation"
    out.mkdir()
    (out / "config.yaml").write_text(to_yaml(load_config(TINY, [f"results_dir={tmp_path}"])))
    (out / "metrics.csv").write_text(",".join(COLUMNS) + "\n")
    (out / "progress.json").write_text(json.dumps({"completed_round": 1, "train_steps": 512}))
    (out / "checkpoints").mkdir()
    return out


RUN_TINY = ["run", "--config", str(TINY)]
HOOK_PLAN = ["hooks", "plan", "--hook", "prometheus", "--policy", "p.onnx"]


def test_cli_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "no such" in _one_line_exit_2(["plot", str(tmp_path / "none.csv")], capsys)
    assert "README.md" in _one_line_exit_2(["plot", str(REPO / "README.md")], capsys)
    columns = tmp_path / "metrics.csv"
    columns.write_text("experiment,round\nx,1\n")
    assert "metrics.csv" in _one_line_exit_2(["plot", str(columns)], capsys)
    broken = tmp_path / "broken.yaml"
    broken.write_text("world: {regions: [\n")
    assert "not valid YAML" in _one_line_exit_2(["baselines", "--config", str(broken)], capsys)
    err = _one_line_exit_2(["run", "--config", "/etc/passwd"], capsys)
    assert "/etc/passwd" in err and "root:" not in err
    err = _one_line_exit_2([*RUN_TINY, "--set", "name=../../escape"], capsys)
    assert "name" in err and not (REPO.parent / "escape").exists()
    assert "seed" in _one_line_exit_2([*RUN_TINY, "--set", "seed=18446744073709551616"], capsys)
    assert "gamma" in _one_line_exit_2([*RUN_TINY, "--set", "ppo.gamma=1"], capsys)
    err = _one_line_exit_2(
        [*RUN_TINY, "--set", "world.regions=64", "--set", "world.nodes_per_region=1024"], capsys
    )
    assert "nodes" in err
    err = _one_line_exit_2([*RUN_TINY, "--set", "eval.seeds=1000000"], capsys)
    assert "GiB" in err
    assert "interpolations" in _one_line_exit_2([*RUN_TINY, "--set", "name=${oc.env:HOME}"], capsys)


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("sweep", {"name": "${oc.env:HOME}"}),
        ("sweep", {"set": ["seed=${oc.env:HOME}"]}),
        ("integration", {"experiment": "${oc.env:HOME}"}),
    ],
)
def test_sweep_and_integration_files_refuse_interpolations_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, body: dict
) -> None:
    """Every kind of YAML file goes through one reader, so `${...}` resolves in none: it
    would read the environment (here $HOME) into a value."""
    path = tmp_path / f"{kind}.yaml"
    if kind == "sweep":
        spec = {"experiment": str(TINY), "variants": {"ppo-local": {"kind": "local"}}, **body}
        argv = ["sweep", "--config", str(path), "--summary-only"]
    else:
        spec = {**body}
        argv = [*HOOK_PLAN, "--config", str(path)]
    path.write_text(json.dumps(spec))
    err = _one_line_exit_2(argv, capsys)
    assert "interpolations" in err and str(Path.home()) not in err.replace(str(path), "")


@pytest.mark.parametrize("command", ["sweep", "hooks"])
def test_sweep_and_integration_readers_never_echo_a_file(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    argv = [*HOOK_PLAN] if command == "hooks" else ["sweep"]
    err = _one_line_exit_2([*argv, "--config", "/etc/passwd"], capsys)
    assert "/etc/passwd" in err and "root:" not in err


def test_resume_problems_are_one_line_and_exit_2_before_flower_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _experiment(tmp_path)
    resume = [*RUN_TINY, "--set", f"results_dir={tmp_path}", "--resume"]
    assert "already holds results" in _one_line_exit_2(resume[:-1], capsys)
    assert "no such checkpoint" in _one_line_exit_2(resume, capsys)
    (out / "checkpoints" / "round_001.npz").write_bytes(b"PK\x03\x04 not a zip")
    assert "not a readable checkpoint" in _one_line_exit_2(resume, capsys)
    np.savez(out / "checkpoints" / "round_001.npz", w000=np.zeros(3, np.float32))
    assert "does not fit" in _one_line_exit_2(resume, capsys)
    err = _one_line_exit_2([*resume, "--set", "seed=5"], capsys)
    assert "'seed'" in err
    (out / "progress.json").write_text("{not json")
    assert "progress" in _one_line_exit_2(resume, capsys)


def _risky(tree: ast.AST) -> list[str]:
    """Pickle imports, eval/exec/torch.load calls and allow_pickle=True in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            found += [f"import {n}" for n in names if n.split(".")[0] in ("pickle", "dill")]
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("eval", "exec", "torch.load", "pickle.load", "pickle.loads"):
                found.append(f"{name}()")
            found += [
                "allow_pickle=True"
                for k in node.keywords
                if k.arg == "allow_pickle" and ast.unparse(k.value) != "False"
            ]
    return found


def test_no_pickle_eval_or_exec_in_the_package() -> None:
    """Nothing loads pickles or evaluates strings: every file format is plain arrays or text."""
    assert _risky(ast.parse("import pickle\nnp.load(f, allow_pickle=True)\neval('1')")) == [
        "import pickle",
        "allow_pickle=True",
        "eval()",
    ]
    for path in (REPO / "fedmc_flwr").rglob("*.py"):
        assert _risky(ast.parse(path.read_text())) == [], path


def test_a_bad_config_through_the_console_script_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fedmc_flwr.cli", "baselines", "--set", "world.load=7"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "world.load" in done.stderr


def test_a_fresh_command_refuses_an_unknown_rule_naming_the_registered_ones() -> None:
    """The names the config reads from the registries (`fedmc_flwr.choices`) are there
    before a command loads its config, in a process that has imported nothing else."""
    done = subprocess.run(
        [sys.executable, "-m", "fedmc_flwr.cli", "baselines", "--set", "federation.aggregation=x"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "federation.aggregation = 'x' is not allowed; expected 'mean'" in done.stderr
    assert "'acceptance'" in done.stderr


def test_a_row_cut_short_by_a_crash_is_dropped_on_resume(tmp_path: Path) -> None:
    table = tmp_path / "metrics.csv"
    writer = MetricsWriter(table)
    writer.write([{"round": 1, "phase": "train", "client": "all"}])
    writer.write([{"round": 2, "phase": "train", "client": "all"}])
    with table.open("a") as handle:
        handle.write(",1,eval,al")  # what a write cut short would leave
    assert keep_rows(table, lambda row: int(row["round"]) <= 1) == 1
    rows = table.read_text().splitlines()
    assert rows[0].startswith("experiment,round") and len(rows) == 2 and ",1,train," in rows[1]
    MetricsWriter(table, append=True).write([{"round": 2, "phase": "eval", "client": "all"}])
    assert len(table.read_text().splitlines()) == 3
