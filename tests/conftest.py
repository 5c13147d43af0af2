"""Shared paths, tiny configs and fixtures: the demo config, a textbook queueing world, a
batch rollout, and the tiny experiment run through Flower.

Test modules import the constants (`from conftest import REPO, TINY`), so every file is
named from the repository root, never from the working directory."""

from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock
from xdist.scheduler import LoadFileScheduling

from fedmc_flwr.config import ExperimentConfig, WorldConfig, load_config
from fedmc_flwr.federation import load_choices
from fedmc_flwr.policies.base import Policy
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim

load_choices()  # as every entry point does: each config a test loads has every name checked

REPO = Path(__file__).resolve().parents[1]
"""The repository root."""
CONF = REPO / "conf"
SMALL_DEMO = CONF / "small_demo.yaml"
TINY = REPO / "tests" / "conf" / "tiny_federation.yaml"
"""The smallest federated experiment (2 regions x 2 nodes, short rounds): what the tests
run through Flower."""
TINY_TRACED = REPO / "tests" / "conf" / "tiny_traced.yaml"
"""TINY replaying real arrival and carbon traces, its second region joining in round 2: the
suite's reference Flower run."""
TINY_HETERO = REPO / "tests" / "conf" / "tiny_hetero.yaml"
"""TINY with three estates of different shapes (one two-tier network federates them)."""
TINY_WORLD = ("world.regions=2", "world.nodes_per_region=2")
"""Overrides that shrink small_demo's estate to 2 regions x 2 nodes."""


def csv_rows(path: Path) -> list[dict[str, str]]:
    """A results table (metrics.csv, per_seed.csv, ...) as one dict per row, as written."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


SIMULATION = "tests/simulation/"
"""Where the files live that start Flower's simulation engine or read its reference run
(`tiny_run`), as test node ids begin."""


def _file_tier(item: pytest.Item) -> int:
    if item.nodeid.startswith(SIMULATION):
        return 0
    if item.get_closest_marker("flower"):
        return 1
    return 2 if item.get_closest_marker("slow") else 3


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files under tests/simulation/ first, those that read the reference run
    (`tiny_run`) leading, since the deployment engine's files compare with it; then the
    other files that start Flower, then the other slow ones, then the rest; otherwise in
    collection order, each file's tests in theirs. pytest-xdist hands out whole files in
    this order (`SimulationTogether`, `--no-loadscope-reorder`), so the long files start
    early, beside each other and the many quick ones, instead of ending the suite alone."""
    order: dict[Path, tuple[int, int]] = {}
    for item in items:
        tier = _file_tier(item), 0 if "tiny_run" in item.fixturenames else 1
        order[item.path] = min(order.get(item.path, (3, 1)), tier)
    items.sort(key=lambda item: order[item.path])


class SimulationTogether(LoadFileScheduling):
    """`--dist loadfile`, except that every file under tests/simulation/ is one unit, which
    one worker runs from start to end. Ray's starts then never meet (`flower_runs.RAY_LOCK`
    would leave the other worker waiting, idle); the other worker runs the deployment
    engine's files and the CPU-bound ones beside them."""

    def _split_scope(self, nodeid: str) -> str:
        return SIMULATION if nodeid.startswith(SIMULATION) else super()._split_scope(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadFileScheduling | None:
    """`SimulationTogether` for `--dist loadfile` (the Makefile's); xdist's own otherwise."""
    return SimulationTogether(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.fixture
def small_demo_path() -> Path:
    return SMALL_DEMO


@pytest.fixture
def small_demo(small_demo_path: Path) -> ExperimentConfig:
    return load_config(small_demo_path)


@pytest.fixture
def identical_world(small_demo: ExperimentConfig) -> WorldConfig:
    """small_demo's estate as identical exponential servers: no network, no daily cycles,
    no bursts, no outages, no other tenants."""
    return replace(
        small_demo.world,
        heterogeneous=False,
        network=False,
        time_varying=False,
        burstiness=0.0,
        outage_rate=0.0,
        background_load=0.0,
    )


Rollout = Callable[..., dict[str, np.ndarray]]


def _rollout(
    sim: MultiCloudSim,
    policy: Policy,
    seeds: np.ndarray,
    steps: int,
    phases: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Reset `sim` with `seeds` (and `phases`, else drawn), act for `steps` jobs; per-env
    mean reward and metrics [B]."""
    obs, mask = sim.reset(seeds, phases)
    total = np.zeros((sim.num_envs, len(METRIC_NAMES) + 1))
    for _ in range(steps):
        actions = policy.act(obs, mask)
        assert mask[np.arange(sim.num_envs), actions].all(), f"{policy.name} chose a masked node"
        result = sim.step(actions)
        total[:, 0] += result.reward
        total[:, 1:] += result.metrics
        obs, mask = result.obs, result.mask
    means = total / steps
    return {"reward": means[:, 0]} | {name: means[:, j + 1] for j, name in enumerate(METRIC_NAMES)}


@pytest.fixture
def rollout() -> Rollout:
    """`rollout(sim, policy, seeds, steps, phases=None)`: asserts no masked action, returns
    per-env means."""
    return _rollout


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TINY_TRACED through Flower's simulation engine, one virtual client per region: the
    reference run whose tables the deployment engine and a resumed run must reproduce
    (tests/simulation/test_reference_run.py reads what it wrote); its experiment directory.

    Under pytest-xdist every worker has a session of its own; the first worker to ask makes
    the run in the temporary directory all workers share, under a file lock, and the
    others wait for it rather than run Flower again."""
    from flower_runs import run_isolated

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the root every worker's base directory lies in
    results = shared / "tiny-run" / "results"
    out = results / "tiny_traced"
    with FileLock(shared / "tiny-run.lock"):
        finished = results.parent / "finished"
        if not finished.exists():
            shutil.rmtree(results, ignore_errors=True)  # what a failed attempt left
            homes = results.parent / "home"
            homes.mkdir(parents=True, exist_ok=True)
            console = results / "console.txt"  # what `fedmc run` printed
            code = run_isolated(homes, [f"results_dir={results}"], 2, TINY_TRACED, console=console)
            assert code == 0, console.read_text()[-4000:]
            finished.touch()
    return out
