"""Bad configs are one clear line and exit code 2; `inherits` changes only what it says."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
from conftest import CONF

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
