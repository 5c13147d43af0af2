"""Bad input, property by property: every reader of a user's file and every writer of a
user's path answers with an `InputError` subclass and never another exception, and the
`fedmc` command turns each into one line that starts with the command's name, exit 2.

Hypothesis drives the checkpoint reader (random bytes, truncations and bit flips of a
real checkpoint, object arrays, arrays of any dtype), the output-path helpers (under a
file, at a folder, on /proc and /sys, any name) and the sweep and integration loaders
(any text, any YAML structure over their keys). The CLI table runs each corrupt, missing
or unwritable input of every subcommand through `cli.main`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import CONF, REPO, TINY
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedmc_flwr.cli import main
from fedmc_flwr.config import learner_plan, load_config, to_yaml
from fedmc_flwr.errors import InputError
from fedmc_flwr.integrations.config import IntegrationConfig, load_integration
from fedmc_flwr.outputs import OutputError, output_dir, output_file
from fedmc_flwr.policies.checkpoints import CheckpointError, read_checkpoint, write_weights
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sweeps import KINDS, SweepSpec, load_sweep

FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROMETHEUS = CONF / "integrations" / "prometheus.yaml"


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny experiment's folder as a federated run leaves it: config.yaml and a real
    `checkpoints/round_001.npz`."""
    root = tmp_path_factory.mktemp("experiment")
    cfg = load_config(TINY, [f"results_dir={root}"])
    out = root / cfg.name
    (out / "checkpoints").mkdir(parents=True)
    (out / "config.yaml").write_text(to_yaml(cfg))
    write_weights(
        out / "checkpoints" / "round_001.npz",
        PPOLearner(learner_plan(cfg, [0]), seed=0).get_weights(),
    )
    return out


@pytest.fixture(scope="module")
def good(experiment: Path) -> bytes:
    return (experiment / "checkpoints" / "round_001.npz").read_bytes()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scratch")


def _refused(path: Path) -> CheckpointError:
    """The reader's refusal of `path`: a CheckpointError in one line (any other exception
    fails the test)."""
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path)
    assert "\n" not in str(caught.value)
    return caught.value


def _read_or_refused(path: Path) -> None:
    """Either arrays of numbers come back, or a CheckpointError in one line."""
    try:
        weights = read_checkpoint(path)
    except CheckpointError as exc:
        assert "\n" not in str(exc)
        return
    assert all(w.dtype.kind in "biuf" for w in weights)


# --- checkpoints -----------------------------------------------------------------------


def test_a_real_checkpoint_reads_and_an_empty_file_is_refused(
    experiment: Path, scratch: Path
) -> None:
    assert len(read_checkpoint(experiment / "checkpoints" / "round_001.npz")) > 6
    (scratch / "empty.npz").write_bytes(b"")
    assert "empty" in str(_refused(scratch / "empty.npz"))


@FAST
@given(st.binary(max_size=4096))
def test_random_bytes_are_refused(scratch: Path, data: bytes) -> None:
    (scratch / "random.npz").write_bytes(data)
    _refused(scratch / "random.npz")


@FAST
@given(st.data())
def test_every_truncation_of_a_real_checkpoint_is_refused(
    scratch: Path, good: bytes, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(good) - 1))
    (scratch / "cut.npz").write_bytes(good[:cut])
    _refused(scratch / "cut.npz")


@FAST
@given(st.data())
def test_a_flipped_byte_reads_as_numbers_or_is_refused(
    scratch: Path, good: bytes, data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(good) - 1))
    flipped = bytearray(good)
    flipped[at] ^= data.draw(st.integers(1, 255))
    (scratch / "flipped.npz").write_bytes(bytes(flipped))
    _read_or_refused(scratch / "flipped.npz")


UNPICKLED: list[str] = []


def _tripped() -> None:
    """Called only if something unpickles a checkpoint."""
    UNPICKLED.append("unpickled")


class _Tripwire:
    """Pickles as a call of `_tripped`: loading it with pickle leaves a mark."""

    def __reduce__(self) -> tuple[Callable[[], None], tuple[()]]:
        return _tripped, ()


OBJECTS = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.just({"a": 1}))


@FAST
@given(st.lists(OBJECTS, max_size=4), st.sampled_from(["w000", "param.0", "other"]))
def test_object_arrays_are_refused_and_never_unpickled(
    scratch: Path, items: list[object], key: str
) -> None:
    values = np.empty(len(items) + 1, dtype=object)
    values[:] = [*items, _Tripwire()]
    np.savez(scratch / "object.npz", **{key: values, "w001": np.zeros(2)})
    assert "pickle" in str(_refused(scratch / "object.npz"))
    assert UNPICKLED == []


ANY_DTYPE = hnp.scalar_dtypes() | hnp.unicode_string_dtypes() | hnp.byte_string_dtypes()


@FAST
@given(
    st.dictionaries(
        st.sampled_from(["w000", "w001", "w010", "param.0", "norm.total.count", "x"]),
        hnp.arrays(ANY_DTYPE, hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)),
        max_size=4,
    )
)
def test_arrays_of_any_dtype_read_as_numbers_or_are_refused(
    scratch: Path, arrays: dict[str, np.ndarray]
) -> None:
    np.savez(scratch / "any.npz", **arrays)
    _read_or_refused(scratch / "any.npz")


# --- output paths ----------------------------------------------------------------------

SEGMENT = st.one_of(
    st.text(
        st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
        min_size=1,
        max_size=20,
    ),
    st.binary(min_size=1, max_size=20)
    .filter(lambda raw: b"/" not in raw and b"\x00" not in raw)
    .map(os.fsdecode),
)
"""One path component: anything the kernel takes as a name, as Python sees it (text, or
bytes that are no UTF-8, which arrive with their undecodable bytes as surrogate escapes;
a lone surrogate outside those names no file)."""


@FAST
@given(st.lists(SEGMENT, min_size=1, max_size=3))
def test_a_path_under_a_regular_file_is_refused(scratch: Path, parts: list[str]) -> None:
    blocker = scratch / "blocker"
    blocker.write_text("a file, not a folder")
    target = blocker.joinpath(*parts)
    with pytest.raises(OutputError, match="blocker"):
        output_file(target, "--out")
    with pytest.raises(OutputError, match="blocker"):
        output_dir(target, "--out")


@FAST
@given(SEGMENT.filter(lambda name: name not in (".", "..")))
def test_an_existing_folder_is_no_output_file(scratch: Path, name: str) -> None:
    folder = scratch / "folders" / name
    folder.mkdir(parents=True, exist_ok=True)
    with pytest.raises(OutputError, match="is a folder"):
        output_file(folder, "--out")


@FAST
@given(st.sampled_from(["/proc", "/sys"]), st.lists(SEGMENT, min_size=1, max_size=2))
def test_virtual_file_systems_are_refused(root: str, parts: list[str]) -> None:
    target = Path(root, "fedmc-" + parts[0], *parts[1:])
    with pytest.raises(OutputError, match="cannot"):
        output_file(target, "--out")
    with pytest.raises(OutputError, match="cannot"):
        output_dir(target, "--out")


@FAST
@given(st.text(st.characters(blacklist_characters="/"), max_size=300))
def test_any_name_is_written_or_refused_and_a_new_file_is_not_left(
    scratch: Path, name: str
) -> None:
    folder = scratch / "names"
    folder.mkdir(exist_ok=True)
    before = set(folder.iterdir())
    try:
        output_file(folder / name, "--out")
    except OutputError as exc:
        assert "\n" not in str(exc).replace(name, "")
    assert set(folder.iterdir()) == before


# --- sweep and integration YAML --------------------------------------------------------

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
SCALARS = st.none() | st.booleans() | st.integers(-3, 2**70) | st.floats() | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def _structures(keys: list[str], special: dict[str, st.SearchStrategy]) -> st.SearchStrategy:
    """YAML documents over a schema's keys: each key present or not, its value close to
    valid (the keys in `special`) or anything, sometimes one stray key; or no mapping."""
    fitting = st.fixed_dictionaries({}, optional={k: special.get(k, VALUES) for k in keys})
    anything = st.fixed_dictionaries({}, optional=dict.fromkeys(keys, VALUES))
    stray = st.one_of(st.just({}), st.just({}), st.dictionaries(TEXT, VALUES, max_size=1))
    mapping = st.tuples(fitting | anything, stray).map(lambda parts: parts[0] | parts[1])
    return st.one_of(mapping, mapping, VALUES)


SWEEP_YAML = _structures(
    [f.name for f in fields(SweepSpec)],
    {
        **dict.fromkeys(["name", "baseline", "results_dir"], TEXT),
        "experiment": st.just(str(TINY)) | TEXT,
        "seeds": st.lists(st.integers(-2, 5), max_size=3),
        "set": st.lists(TEXT, max_size=2),
        "variants": st.dictionaries(
            TEXT,
            st.fixed_dictionaries(
                {"kind": st.sampled_from([*KINDS, "other"])},
                optional={"set": st.lists(TEXT, max_size=2)},
            ),
            min_size=1,
            max_size=2,
        ),
    },
)
INTEGRATION_YAML = _structures(
    [f.name for f in fields(IntegrationConfig)],
    {
        "experiment": TEXT,
        "steps": st.integers(-2, 10**6),
        "worlds": st.integers(-2, 10**6),
        "prometheus": st.dictionaries(st.sampled_from(["url", "window_s", "step_s"]), VALUES),
        "openstack": st.dictionaries(st.sampled_from(["resources", "token_env"]), VALUES),
    },
)
LOADERS = {"sweep": load_sweep, "integration": load_integration}


def _loads_or_input_error(load: Callable[[Path], object], path: Path) -> None:
    try:
        load(path)
    except InputError as exc:
        assert "\n" not in str(exc)


@FAST
@given(st.sampled_from(sorted(LOADERS)), st.text(max_size=300))
def test_any_text_as_a_sweep_or_integration_file(scratch: Path, kind: str, text: str) -> None:
    path = scratch / f"{kind}.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _loads_or_input_error(LOADERS[kind], path)


@FAST
@given(SWEEP_YAML)
@example({"seeds": {}})  # a mapping where the schema has a list: OmegaConf's TypeError
def test_any_yaml_structure_as_a_sweep_file(scratch: Path, document: object) -> None:
    path = scratch / "structure_sweep.yaml"
    path.write_text(yaml.safe_dump(document))
    _loads_or_input_error(load_sweep, path)


@FAST
@given(INTEGRATION_YAML)
def test_any_yaml_structure_as_an_integration_file(scratch: Path, document: object) -> None:
    path = scratch / "structure_integration.yaml"
    path.write_text(yaml.safe_dump(document))
    _loads_or_input_error(load_integration, path)


# --- every command: one line, labelled, exit 2 -----------------------------------------


@pytest.fixture(scope="module")
def bad(experiment: Path, good: bytes, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Corrupt, foreign and blocking inputs, next to the real experiment's checkpoint
    (so `export` and `transfer` find its config and fail on the file itself)."""
    checkpoints = experiment / "checkpoints"
    (checkpoints / "random.npz").write_bytes(np.random.default_rng(0).bytes(500))
    (checkpoints / "truncated.npz").write_bytes(good[: len(good) // 2])
    (checkpoints / "empty.npz").write_bytes(b"")
    np.savez(checkpoints / "object.npz", w000=np.array([{"a": 1}, None], dtype=object))
    np.savez(checkpoints / "text.npz", w000=np.array(["a", "b"]))
    root = tmp_path_factory.mktemp("bad")
    (root / "file").write_text("a file, not a folder")
    (root / "folder").mkdir()
    (root / "syntax.yaml").write_text("name: [x\nseeds: {\n")
    (root / "list.yaml").write_text("- a\n- b\n")
    (root / "hook_syntax.yaml").write_text("prometheus: {url: [\n")
    (root / "corrupt.onnx").write_bytes(np.random.default_rng(1).bytes(300))
    (root / "empty.onnx").write_bytes(b"")
    from fedmc_flwr.integrations.export import export_checkpoint

    export_checkpoint(checkpoints / "round_001.npz", root / "tiny.onnx")
    return root


def _ck(name: str) -> Callable[[Path, Path], str]:
    return lambda exp, bad: str(exp / "checkpoints" / f"{name}.npz")


def _at(name: str) -> Callable[[Path, Path], str]:
    return lambda exp, bad: str(bad / name)


def _fixed(value: str) -> Callable[[Path, Path], str]:
    return lambda exp, bad: value


EXPORT_TO = _at("policy.onnx")
PLAN = ["hooks", "plan", "--hook", "prometheus", "--config", str(PROMETHEUS), "--policy"]
TRANSFER = ["transfer", "--config", str(TINY), "--checkpoint"]

CASES: dict[str, tuple[str, list, str]] = {
    # (label, argv with callables for paths, a fragment the line names)
    **{
        f"{command} {kind} checkpoint": (
            f"fedmc {command}",
            ["export", "--out", EXPORT_TO, "--checkpoint", _ck(kind)]
            if command == "export"
            else [*TRANSFER, _ck(kind)],
            fragment,
        )
        for command in ("export", "transfer")
        for kind, fragment in [
            ("random", "numpy would unpickle it, refused"),
            ("truncated", "not a complete .npz archive"),
            ("empty", "(empty)"),
            ("object", "object arrays"),
            ("text", "not numbers"),
            ("missing", "no such checkpoint"),
        ]
    },
    "export --out under a file": (
        "fedmc export",
        ["export", "--checkpoint", _ck("round_001"), "--out", _at("file/policy.onnx")],
        "is a file, not a folder",
    ),
    "export --out at a folder": (
        "fedmc export",
        ["export", "--checkpoint", _ck("round_001"), "--out", _at("folder")],
        "is a folder",
    ),
    "export --out under /sys": (
        "fedmc export",
        ["export", "--checkpoint", _ck("round_001"), "--out", _fixed("/sys/fedmc/x.onnx")],
        "cannot",
    ),
    "export --out /proc/x.onnx": (
        "fedmc export",
        ["export", "--checkpoint", _ck("round_001"), "--out", _fixed("/proc/x.onnx")],
        "cannot write this file",
    ),
    "export --out with a newline, under a file": (
        "fedmc export",
        ["export", "--checkpoint", _ck("round_001"), "--out", _at("file/two\nlines.onnx")],
        "two\\nlines",
    ),
    "sweep YAML syntax error": (
        "fedmc sweep",
        ["sweep", "--summary-only", "--config", _at("syntax.yaml")],
        "not valid YAML",
    ),
    "sweep top-level list": (
        "fedmc sweep",
        ["sweep", "--summary-only", "--config", _at("list.yaml")],
        "mapping",
    ),
    "hooks plan corrupt ONNX": ("fedmc hooks plan", [*PLAN, _at("corrupt.onnx")], "ONNX"),
    "hooks plan empty ONNX": ("fedmc hooks plan", [*PLAN, _at("empty.onnx")], "ONNX"),
    "hooks plan another estate's policy": (
        "fedmc hooks plan",
        [*PLAN, _at("tiny.onnx")],
        "exported for 2 regions",
    ),
    "hooks plan hook config YAML syntax error": (
        "fedmc hooks plan",
        [*PLAN[:4], "--config", _at("hook_syntax.yaml"), "--policy", _at("tiny.onnx")],
        "not valid YAML",
    ),
    "hooks plan --log under a file": (
        "fedmc hooks plan",
        [*PLAN, _at("tiny.onnx"), "--log", _at("file/log.jsonl")],
        "--log",
    ),
    "plot --out under a file": (
        "fedmc plot",
        ["plot", _at("file"), "--out", _at("file/plots")],
        "--out",
    ),
    "plot a file that is no metrics.csv": ("fedmc plot", ["plot", _at("file")], "metrics.csv"),
    "report a missing folder": (
        "fedmc report",
        ["report", _at("nowhere"), "--baseline", "sed"],
        "no such directory",
    ),
    "credentials --out under a file": (
        "fedmc credentials",
        ["credentials", "--out", _at("file/keys"), "--host", "h", "--nodes", "1"],
        "is a file, not a folder",
    ),
    "credentials an empty --host": (
        "fedmc credentials",
        ["credentials", "--out", _at("keys"), "--host", "", "--nodes", "1"],
        "certificate name",
    ),
    **{
        f"{command} results_dir under a file": (
            f"fedmc {command}",
            [command, "--config", str(TINY), "--set", lambda exp, bad: f"results_dir={bad}/file/r"],
            "results_dir",
        )
        for command in ("baselines", "train", "run")
    },
    "transfer results_dir of no user's home": (
        "fedmc transfer",
        [*TRANSFER, _ck("round_001"), "--set", _fixed("results_dir=~no-such-user-here/r")],
        "home folder of no user",
    ),
    "run --set a mapping for a list": (
        "fedmc run",
        ["run", "--config", str(TINY), "--set", "faults={}"],
        "override faults: a mapping where a list belongs",
    ),
    "run --metrics-port out of range": (
        "fedmc run",
        ["run", "--config", str(TINY), "--metrics-port", "99999"],
        "--metrics-port",
    ),
    "deploy a config that is a list": (
        "fedmc deploy",
        ["deploy", "--config", _at("list.yaml")],
        "mapping",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_commands_bad_input_is_one_line_labelled_with_the_command(
    case: str,
    experiment: Path,
    bad: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Warnings count as lines too: the command logs them to stderr (pytest catches them)."""
    monkeypatch.chdir(REPO)  # the integration configs name their experiment from here
    label, argv, fragment = CASES[case]
    args = [arg(experiment, bad) if callable(arg) else arg for arg in argv]
    with caplog.at_level(logging.WARNING):
        assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not caplog.records, (err, caplog.text)
    assert err.startswith(f"{label}: "), err
    assert fragment in err and "Traceback" not in err


def test_the_console_script_refuses_a_corrupt_policy_in_one_line(bad: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fedmc_flwr.cli", *PLAN, str(bad / "corrupt.onnx")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("fedmc hooks plan: ") and "not a readable ONNX" in done.stderr
