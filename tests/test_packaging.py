"""The package people install: a wheel built here, its files (the Flower app's config
among them) and its metadata; the `--config` default found from the package; the `hooks`
extra's features failing in one line without it, and `fedmc run` needing it only for
`--metrics-port`; no empty experiment folder left by a run that never started; and what
Flower's runtime install (`uv sync` of the app under `flwr run .`) would put in a run's
environment. The wheel installed alone, running every kind of experiment, is
tests/simulation/test_wheel.py."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest
from conftest import CONF, REPO, SMALL_DEMO

from fedmc_flwr import cli
from fedmc_flwr.config import ConfigError, find_config, shipped_conf
from fedmc_flwr.federation import runner
from fedmc_flwr.integrations.extras import MissingExtra

HOOKS_EXTRA = ("kubernetes", "onnx", "onnxruntime", "prometheus-client")
SOURCES = ("pyproject.toml", "setup.py", "README.md", "fedmc_flwr", "conf")
"""What the wheel is built from: the project's own files, without tests, results or venvs."""


CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LOCAL_TORCH = Path("/opt/wheels")
"""Where this machine keeps PyTorch's CPU wheel, for when PyTorch's index is out of reach."""
CUDA = re.compile(r"^(nvidia-|cuda-|triton$)")


def build_wheel(dist: Path) -> Path:
    """A wheel built into `dist` from a copy of the project's sources, with this venv's
    setuptools (`--no-build-isolation`: nothing is downloaded); its path."""
    src = dist.parent / f"{dist.name}-src"
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (path,) = dist.glob("fedmc_flwr-*.whl")
    return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel") / "dist")


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name).decode()


def test_the_wheel_holds_every_module_and_shipped_config_and_no_tests(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    configs = {f"fedmc_flwr/conf/{p.relative_to(CONF).as_posix()}" for p in CONF.rglob("*.yaml")}
    assert configs and configs <= names, sorted(configs - names)
    modules = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "fedmc_flwr").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert modules <= names, sorted(modules - names)  # a subpackage missing from pyproject
    assert not [n for n in names if n.startswith("tests/") or "/tests/" in n]
    assert not [n for n in names if not n.startswith(("fedmc_flwr/", "fedmc_flwr-"))]
    with zipfile.ZipFile(wheel) as archive:  # the Flower app's config, for `fedmc run`
        app = archive.read(f"fedmc_flwr/{runner.APP_CONFIG}").decode()
    assert app == (REPO / "pyproject.toml").read_text()
    assert tomllib.loads(app)["tool"]["flwr"]["app"]["components"]["serverapp"]


def test_a_checkout_stages_its_own_pyproject_and_an_installed_package_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert runner.app_pyproject() == REPO / "pyproject.toml"
    package = tmp_path / "site-packages" / "fedmc_flwr"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.setattr(runner, "PACKAGE", package)
    with pytest.raises(runner.RunError, match=r"holds no flower_app\.toml"):
        runner.app_pyproject()
    (package / runner.APP_CONFIG).write_text((REPO / "pyproject.toml").read_text())
    app = runner.stage_app(tmp_path / "app")
    assert (app / "pyproject.toml").read_text() == (REPO / "pyproject.toml").read_text()
    assert (app / "fedmc_flwr" / "__init__.py").is_file()


def test_the_metadata_has_urls_classifiers_absolute_links_and_the_hooks_extra(
    wheel: Path,
) -> None:
    metadata = _metadata(wheel)
    headers, _, description = metadata.partition("\n\n")
    assert "Project-URL: Source, https://github.com/fedmc/fedmc-flwr" in headers
    assert "Requires-Python: <3.14,>=3.11" in headers
    for minor in (11, 12, 13):
        assert f"Classifier: Programming Language :: Python :: 3.{minor}" in headers
    assert "](docs/" in (REPO / "README.md").read_text()  # what the rewrite is for
    relative = re.findall(r"\]\((?![a-z][a-z0-9+.-]*:|#)[^)]*\)", description, re.IGNORECASE)
    assert description.startswith("# fedmc-flwr") and relative == []
    assert "](https://github.com/fedmc/fedmc-flwr/blob/main/docs/design.md)" in description
    required = [line for line in headers.splitlines() if line.startswith("Requires-Dist:")]
    for name in HOOKS_EXTRA:
        (line,) = [
            r
            for r in required
            if r.split()[1].startswith(name + "<") or r.split()[1].startswith(name + ">")
        ]
        assert line.endswith('extra == "hooks"'), line


def test_a_conf_path_missing_here_is_taken_from_the_shipped_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert shipped_conf() == CONF  # a checkout: conf/ at the root
    assert find_config(cli.DEFAULT_CONFIG) == CONF / "small_demo.yaml"
    assert find_config("conf/sweeps/tiny.yaml") == CONF / "sweeps" / "tiny.yaml"
    own = tmp_path / "conf" / "small_demo.yaml"
    own.parent.mkdir()
    own.write_text("name: mine\n")
    assert find_config("conf/small_demo.yaml") == Path("conf/small_demo.yaml")  # here wins
    with pytest.raises(ConfigError, match="nor among the shipped configs") as unknown:
        find_config("conf/nope.yaml")
    assert "conf/small_demo.yaml" in str(unknown.value)  # what ships, by the name to give
    assert "conf/sweeps/" not in str(unknown.value)  # that folder's configs only
    assert find_config("elsewhere/nope.yaml") == Path("elsewhere/nope.yaml")  # load_config's


def test_fedmc_sweep_finds_a_shipped_sweep_by_its_documented_name_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fedmc sweep --config conf/sweeps/tiny.yaml` as the README gives it, from a directory
    that holds no conf/: the package's sweep runs; an unknown name lists those that ship."""
    from fedmc_flwr.experiments import sweep

    monkeypatch.chdir(tmp_path)
    given = []
    monkeypatch.setattr(sweep, "main", lambda config, *args, **kwargs: given.append(config) or 0)
    assert cli.main(["sweep", "--config", "conf/sweeps/tiny.yaml", "--summary-only"]) == 0
    assert given == [CONF / "sweeps" / "tiny.yaml"]
    assert cli.main(["sweep", "--config", "conf/sweeps/tiny_typo.yaml"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("fedmc sweep: config error: conf/sweeps/tiny_typo.yaml: no such")
    shipped = sorted(f"conf/sweeps/{p.name}" for p in (CONF / "sweeps").glob("*.yaml"))
    assert shipped and all(name in error for name in shipped), error
    assert given == [CONF / "sweeps" / "tiny.yaml"] and error.count("\n") == 1


def test_the_readme_says_what_every_extra_enables() -> None:
    """Each extra of pyproject.toml is a row of the README's table of extras, so a new
    extra cannot ship unexplained."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    rows = re.findall(
        r"^\| `([a-z0-9-]+)` \| [^|]+ \| [^|]+ \|$", (REPO / "README.md").read_text(), re.M
    )
    assert sorted(extras) == sorted(rows)


def test_version_and_the_config_default_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert re.fullmatch(r"fedmc \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)
    with pytest.raises(SystemExit):
        cli.main(["baselines", "--help"])
    assert "(default: conf/small_demo.yaml)" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "across machines: with RAY_ADDRESS=HEAD:PORT" in shown  # the multi-machine mode
    assert "virtual clients (not machines)" in shown


@pytest.mark.parametrize(
    ("module", "dependency"),
    [
        ("fedmc_flwr.integrations.export", "onnx"),
        ("fedmc_flwr.integrations.serving", "onnxruntime"),
        ("fedmc_flwr.integrations.kubernetes", "kubernetes"),
    ],
)
def test_a_hooks_module_without_its_extra_fails_in_one_line_naming_it(
    module: str, dependency: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, dependency, None)  # `import dependency` now fails
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(MissingExtra) as failed:
        importlib.import_module(module)
    assert "pip install 'fedmc-flwr[hooks]'" in str(failed.value)
    assert dependency in str(failed.value) and "\n" not in str(failed.value)


def test_fedmc_run_needs_the_exporter_and_its_extra_only_for_metrics_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without `--metrics-port`, `fedmc run` never imports the exporter (which would bring
    the ONNX serving along); with it, a missing prometheus_client is one line."""
    for module in ("prometheus_client", "onnxruntime", "onnx"):
        monkeypatch.setitem(sys.modules, module, None)
    for module in ("prometheus", "decisions", "serving"):
        monkeypatch.delitem(sys.modules, f"fedmc_flwr.integrations.{module}", raising=False)
    runs = []
    monkeypatch.setattr(runner, "run_federation", lambda *args, **kwargs: runs.append(args) or 0)
    assert cli.main(["run", "--set", f"results_dir={tmp_path}"]) == 0 and len(runs) == 1
    assert "fedmc_flwr.integrations.prometheus" not in sys.modules
    assert cli.main(["run", "--metrics-port", "9464"]) == 1 and len(runs) == 1
    prometheus = importlib.import_module("fedmc_flwr.integrations.prometheus")
    with prometheus.exporting(tmp_path, None) as exporter:
        assert exporter is None
    with pytest.raises(MissingExtra, match=r"--metrics-port needs prometheus_client.*\[hooks\]"):
        prometheus.RunExporter(tmp_path, 0)
    assert "fedmc_flwr.integrations.serving" not in sys.modules


def test_a_run_that_fails_before_it_starts_leaves_no_empty_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the experiment's folder nor the results folder it made; a folder that was
    there before stays."""

    def no_app(dest: Path) -> Path:
        raise runner.RunError("no Flower app")

    monkeypatch.setattr(runner, "stage_app", no_app)
    monkeypatch.setattr(runner, "warm_cache", lambda: None)
    results = tmp_path / "new" / "results"
    with pytest.raises(runner.RunError):
        runner.run_federation(SMALL_DEMO, [f"results_dir={results}"])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(runner.RunError):
        runner.run_federation(SMALL_DEMO, [f"results_dir={tmp_path}"])
    assert list(tmp_path.iterdir()) == []


def test_fedmc_export_without_onnx_prints_one_line_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)
    monkeypatch.delitem(sys.modules, "fedmc_flwr.integrations.export", raising=False)
    code = cli.main(
        ["export", "--checkpoint", str(tmp_path / "c.npz"), "--out", str(tmp_path / "p.onnx")]
    )
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("fedmc export: exporting a policy needs onnx") and "[hooks]" in err


def test_the_locked_environment_spares_every_ray_process_jsonschemas_iri_parsers() -> None:
    """rfc3987-syntax builds Earley parsers (lark) for two seconds of CPU when jsonschema
    imports it, in each of the ten or so processes a Flower simulation run starts that
    import Ray. The lock leaves it out and `make setup` installs the lock alone."""
    pinned = {
        line.split("==")[0].lower()
        for line in (REPO / "requirements.lock").read_text().splitlines()
        if "==" in line
    }
    assert pinned.isdisjoint({"rfc3987-syntax", "lark"})
    assert "jupyter-events" in pinned  # what asks for it (through jsonschema[format-nongpl])
    probe = "import ray, sys; print(sorted({'rfc3987_syntax', 'lark'} & set(sys.modules)))"
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert imported.stdout.strip() == "[]", "this environment was not built from the lock"


def _reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except OSError:
        return False
    return True


def _cpu_index_stand_in(root: Path) -> str | None:
    """A one-package simple index holding this machine's copy of PyTorch's CPU torch
    wheel, or None when there is none."""
    wheels = sorted(LOCAL_TORCH.glob("torch-*+cpu-*.whl"))
    if not wheels:
        return None
    page = root / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text("".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in wheels))
    return root.as_uri()


def test_flowers_runtime_install_would_put_no_cuda_package_in_the_run_environment(
    tmp_path: Path,
) -> None:
    """Flower's runtime install is `uv sync` in the app's directory, which locks the app's
    pyproject.toml first. uv's own lock of it, for every platform and Python it allows,
    takes torch's CPU build from PyTorch's CPU index and no nvidia, cuda or triton package.
    Where that index is out of reach (only package registries are, here), its URL is
    pointed at this machine's copy of the same CPU wheel; everything else comes from PyPI."""
    if not _reachable("https://pypi.org/simple/uv/"):
        pytest.skip("PyPI is out of reach: uv cannot resolve the app's dependencies")
    app = tmp_path / "app"
    app.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, app / name)
    pyproject = (app / "pyproject.toml").read_text()
    indexes = tomllib.loads(pyproject)["tool"]["uv"]["index"]
    assert [(i["name"], i["url"], i["explicit"]) for i in indexes] == [
        ("pytorch-cpu", CPU_INDEX, True)
    ]
    if not _reachable(f"{CPU_INDEX}/torch/"):
        stand_in = _cpu_index_stand_in(tmp_path / "index")
        if stand_in is None:
            pytest.skip("PyTorch's CPU index is out of reach and no local CPU wheel stands in")
        (app / "pyproject.toml").write_text(pyproject.replace(f'"{CPU_INDEX}"', f'"{stand_in}"'))
    locked = subprocess.run(
        [sys.executable, "-m", "uv", "lock", "--quiet"],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert locked.returncode == 0, locked.stderr
    packages = tomllib.loads((app / "uv.lock").read_text())["package"]
    names = {p["name"] for p in packages}
    assert {"torch", "ray", "numba"} <= names
    assert sorted(n for n in names if CUDA.match(n)) == []
    assert {p["version"] for p in packages if p["name"] == "torch"} == {"2.13.0+cpu"}
