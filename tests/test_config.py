"""Bad configs are one clear line and exit code 2; `inherits` changes only what it says."""

from __future__ import annotations

import ast
import inspect
from dataclasses import asdict, fields, is_dataclass, replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from conftest import CONF

from fedmc_flwr import config
from fedmc_flwr.cli import main
from fedmc_flwr.config import (
    OBS_FLOATS_PER_NODE,
    OBS_FLOATS_PER_REGION,
    ConfigError,
    ExperimentConfig,
    load_config,
    working_set_bytes,
)
from fedmc_flwr.sim.world import MultiCloudSim

BAD_FILES = {  # YAML body after `inherits: small_demo.yaml` -> key the error must name
    "unknown key": ("world:\n  colour: blue\n", "world.colour"),
    "wrong type": ("world:\n  regions: three\n", "world.regions"),
    "zero regions": ("world:\n  regions: 0\n", "world.regions"),
    "negative rate": ("world:\n  outage_rate: -0.1\n", "world.outage_rate"),
    "negative load": ("world:\n  load: -0.5\n", "world.load"),
    "all-zero weights": (
        "reward:\n  latency: 0\n  violations: 0\n  cost: 0\n  carbon: 0\n",
        "reward",
    ),
    "unknown strategy": ("federation:\n  strategy: fedsgd\n", "federation.strategy"),
    "threshold over capacity": ("world:\n  queue_threshold: 40\n", "world.queue_threshold"),
    "name leaves the results directory": ("name: ../../escape\n", "name"),
    "name is a path": ("name: a/b\n", "name"),
}


def _fails_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_config_file_is_one_line_naming_key_and_file(
    case: str, tmp_path: Path, small_demo_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body, key = BAD_FILES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(f"inherits: {small_demo_path}\n{body}")
    line = _fails_with_one_line(capsys, ["baselines", "--config", str(path)])
    assert str(path) in line and key in line


@pytest.mark.parametrize(
    ("override", "key"),
    [("world.regions=0", "world.regions"), ("world.bogus=1", "world.bogus")],
)
def test_bad_override_is_one_line(
    override: str, key: str, small_demo_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["baselines", "--config", str(small_demo_path), "--set", override]
    line = _fails_with_one_line(capsys, argv)
    assert str(small_demo_path) in line and key in line


def test_missing_and_malformed_files_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert str(missing) in _fails_with_one_line(capsys, ["run", "--config", str(missing)])
    broken = tmp_path / "broken.yaml"
    broken.write_text("world: [1\n")
    assert str(broken) in _fails_with_one_line(capsys, ["train", "--config", str(broken)])


@pytest.mark.parametrize(
    ("file", "federation"),
    [
        ("ablation_shrink.yaml", {"strategy": "shrink", "mu": 0.1}),
        ("ablation_fedprox.yaml", {"proximal_mu": 0.01}),
        ("ablation_fedprox_shrink.yaml", {"strategy": "shrink", "mu": 0.1, "proximal_mu": 0.01}),
    ],
)
def test_ablations_differ_from_small_demo_only_in_name_and_federation(
    small_demo_path: Path, file: str, federation: dict
) -> None:
    base = asdict(load_config(small_demo_path))
    ablation = asdict(load_config(small_demo_path.parent / file))
    assert {key for key in base if base[key] != ablation[key]} == {"name", "federation"}
    assert ablation["federation"] == {**base["federation"], **federation}


def test_the_old_strategy_name_points_to_its_two_meanings(small_demo_path: Path) -> None:
    with pytest.raises(ConfigError, match="proximal_mu"):
        load_config(small_demo_path, ["federation.strategy=fedprox"])


def test_an_error_never_echoes_a_file_that_is_not_a_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "root:x:0:0:root:/root:/bin/bash hunter2 private line"
    stray = tmp_path / "passwd"
    stray.write_text(f"{secret}\n{secret}\n")
    line = _fails_with_one_line(capsys, ["baselines", "--config", str(stray)])
    assert str(stray) in line
    assert "hunter2" not in line and "root:x" not in line


def test_the_memory_estimate_covers_the_worlds_observation(small_demo: ExperimentConfig) -> None:
    """working_set_bytes assumes at most OBS_FLOATS_PER_NODE / _PER_REGION values per node and
    region, and hard capacity at most 2 * queue_capacity + 8: the world must stay within."""
    for regions, nodes in ((1, 1), (3, 6), (20, 50)):
        world = replace(small_demo.world, regions=regions, nodes_per_region=nodes)
        sim = MultiCloudSim(world, small_demo.reward, np.zeros(1, dtype=np.int64))
        bound = regions * nodes * OBS_FLOATS_PER_NODE + regions * OBS_FLOATS_PER_REGION
        assert sim.obs_dim <= bound
        assert sim.spec.hard_capacity <= 2 * world.queue_capacity + 8


def test_an_estate_too_large_for_its_batch_is_refused(small_demo_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"training would need ~.* GiB"):
        load_config(small_demo_path, ["world.regions=40", "world.nodes_per_region=400"])
    with pytest.raises(ConfigError, match="16384"):
        load_config(small_demo_path, ["world.regions=64", "world.nodes_per_region=1024"])
    fits = ["world.regions=100", "world.nodes_per_region=100", "ppo.num_envs=16"]
    load_config(small_demo_path, [*fits, "ppo.rollout_steps=64"])


@pytest.mark.parametrize("name", ["large", "huge"])
def test_the_large_estates_load_within_the_size_bound(name: str) -> None:
    cfg = load_config(CONF / f"{name}.yaml")
    assert cfg.world.regions * cfg.world.nodes_per_region in (1000, 10_000)
    assert max(working_set_bytes(cfg).values()) < 2**30


def _choice_fields() -> list[tuple[str, type, str]]:
    """(dotted key, section schema, field name) of every field declared with `one_of`."""
    found = []
    for section in fields(ExperimentConfig):
        schema = getattr(config, str(section.type), None)  # the annotations are strings
        if schema is None or not is_dataclass(schema):
            continue  # a scalar, or the list of faults (below)
        found += [
            (f"{section.name}.{f.name}", schema, f.name)
            for f in fields(schema)
            if config.ALLOWED in f.metadata
        ]
    return [*found, ("faults[0].kind", config.FaultConfig, "kind")]


CHOICES = _choice_fields()


def test_the_choice_fields_are_found() -> None:
    keys = {key for key, _, _ in CHOICES}
    assert {"world.job_size", "federation.aggregation", "eval.split"} <= keys


@pytest.mark.parametrize(("key", "schema", "name"), CHOICES, ids=[c[0] for c in CHOICES])
def test_a_value_outside_a_choice_is_refused_naming_every_allowed_value(
    key: str, schema: type, name: str, small_demo_path: Path
) -> None:
    allowed = config.allowed_values(schema, name)
    bad = "no-such-value"
    override = f"faults=[{{kind: {bad}}}]" if key.startswith("faults") else f"{key}={bad}"
    with pytest.raises(ConfigError) as caught:
        load_config(small_demo_path, [override])
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and f"{key} = 'no-such-value'" in message
    assert all(repr(value) in message for value in allowed)


def _field_docstrings(schema: type) -> dict[str, str]:
    """The docstring under each field of `schema`, read from the source."""
    tree = ast.parse(inspect.getsource(schema))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for field_node, doc in pairwise(body):
        if isinstance(field_node, ast.AnnAssign) and isinstance(doc, ast.Expr):
            docs[field_node.target.id] = doc.value.value  # type: ignore[attr-defined]
    return docs


REGISTERED = {
    "ppo.imitation_teacher": "policies/heuristics.py:DISPATCHERS",
    "federation.aggregation": "federation/aggregation.py:AGGREGATIONS",
}
"""The choices whose names the code above the config registers (`fedmc_flwr.choices`),
each with its registry, where each name is explained (a dispatcher's class docstring; the
rules in `AGGREGATIONS`' docstring: tests/test_heuristics.py, test_aggregation_rules.py)."""
NAMED_IN_DOCSTRING = [c for c in CHOICES if c[0] not in REGISTERED]


def test_the_registered_choices_are_the_ones_read_from_a_registry() -> None:
    """`one_of` checks a registered choice's default only once the names are registered:
    here, each default is one of them."""
    specs = {key: schema.__dataclass_fields__[name] for key, schema, name in CHOICES}
    read = {key for key, spec in specs.items() if callable(spec.metadata[config.ALLOWED])}
    assert read == set(REGISTERED)
    assert all(specs[key].default in config.choice_values(specs[key]) for key in REGISTERED)


@pytest.mark.parametrize("key", REGISTERED)
def test_a_registered_choices_docstring_names_its_registry(key: str) -> None:
    ((schema, name),) = [(s, n) for k, s, n in CHOICES if k == key]
    assert f"`{REGISTERED[key]}`" in _field_docstrings(schema)[name]


@pytest.mark.parametrize(
    ("key", "schema", "name"), NAMED_IN_DOCSTRING, ids=[c[0] for c in NAMED_IN_DOCSTRING]
)
def test_each_allowed_value_is_explained_in_its_fields_docstring(
    key: str, schema: type, name: str
) -> None:
    doc = _field_docstrings(schema)[name]
    missing = [v for v in config.allowed_values(schema, name) if f"'{v}'" not in doc]
    assert not missing, f"{key}'s docstring does not name {missing}"
