"""The kernels' compiled code is found by the content of their source, wherever it lies.

Each check runs in a fresh interpreter on a copy of the package, as a Ray actor imports a
fresh copy of the app, with `FEDMC_CACHE_DIR` in the test's temporary directory, and reads
numba's own hit and miss counters. The cache is filled once for the module, by two
processes compiling into it at the same time, as two runs starting together on a fresh
machine do (a sweep's cells at `--jobs 2`): one compiles every kernel, the other the
smallest, which it writes to the same index meanwhile.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow  # every test compiles the kernels in fresh processes

PACKAGE = REPO / "fedmc_flwr"

# "all": compile or load every kernel the simulator runs, then roll out a few steps;
# "seed": only the smallest kernel, for checks that must compile and should stay quick.
PROBE = """
import json, sys
import numpy as np
from numba.core.registry import CPUDispatcher
from fedmc_flwr.config import RewardWeights, WorldConfig
from fedmc_flwr.sim import dispatch, dynamics, kernel, observation, serving, streams
from fedmc_flwr.sim.world import MultiCloudSim, warm_cache

if sys.argv[1] == "all":
    warm_cache()
    sim = MultiCloudSim(WorldConfig(), RewardWeights(), [0, 1, 2])
    obs, mask = sim.reset([1, 2, 3])
    total = 0.0
    for _ in range(50):
        step = sim.step(mask.argmax(axis=1))
        total += float(step.reward.sum()) + float(sim.dispatch_costs()[mask].sum())
        mask = step.mask
else:
    streams.seed_streams(np.arange(4, dtype=np.uint64), np.zeros(4, dtype=np.uint64))
    total = None
modules = (streams, serving, observation, dynamics, dispatch, kernel)
dispatchers = {
    id(d): d for m in modules for d in vars(m).values() if isinstance(d, CPUDispatcher)
}.values()
print(json.dumps({
    "kernel": kernel.__file__,
    "cache_path": streams.seed_streams._cache.cache_path,
    "hits": sum(sum(d.stats.cache_hits.values()) for d in dispatchers),
    "misses": sum(sum(d.stats.cache_misses.values()) for d in dispatchers),
    "total": total,
}))
"""


MODES = ("all", "seed")
"""What the two writers of the module's cache run."""


def _copy_package(dest: Path, mtime: float) -> Path:
    """The package copied under `dest` with every file's mtime set, as Flower installs it."""
    root = dest / "fedmc_flwr"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    for path in root.rglob("*"):
        os.utime(path, (mtime, mtime))
    return dest


def _probe(app: Path, cache_dir: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(app), "FEDMC_CACHE_DIR": str(cache_dir)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    report = json.loads(out.splitlines()[-1])
    assert Path(report["kernel"]).is_relative_to(app), "the probe imported another copy"
    return report


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A cache filled by two concurrent cold processes; the cache dir and the report of the
    one that ran every kernel."""
    base = tmp_path_factory.mktemp("compile_cache")
    cache = base / "cache"
    apps = [_copy_package(base / f"writer{i}", mtime=1_000_000_000 + i) for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(_probe, apps, [cache] * 2, MODES))
    # Which writer compiles the smallest kernel is a race (the later one may load what the
    # earlier just saved); the other writer compiles every kernel it does not load.
    assert reports[0]["misses"] > 0
    assert reports[1]["hits"] + reports[1]["misses"] == 1
    for report in reports:
        assert Path(report["cache_path"]).parent == cache
    return cache, reports[0]


def test_copy_elsewhere_loads_without_compiling(filled: tuple[Path, dict], tmp_path: Path):
    cache, cold = filled
    warm = _probe(_copy_package(tmp_path, mtime=1_500_000_000), cache, "all")
    # kernels called only from other kernels are linked into their callers' cached code,
    # so fewer load than compiled; none compiles
    assert warm["misses"] == 0 and warm["hits"] > 0
    assert warm["cache_path"] == cold["cache_path"]
    assert warm["total"] == cold["total"]


def _edited_copy(tmp_path: Path, edited: str) -> Path:
    app = _copy_package(tmp_path, mtime=1_000_000_000)
    with (app / "fedmc_flwr" / "sim" / edited).open("a") as f:
        f.write("\n# edited\n")
    return app


def test_changed_source_misses(filled: tuple[Path, dict], tmp_path: Path):
    """An edit of a kernel's own file compiles it afresh."""
    cache, cold = filled
    changed = _probe(_edited_copy(tmp_path, "streams.py"), cache, "seed")
    assert (changed["hits"], changed["misses"]) == (0, 1)
    assert changed["cache_path"] != cold["cache_path"]
    assert Path(changed["cache_path"]).parent == cache


def test_a_changed_constant_misses_where_it_is_compiled_in(
    filled: tuple[Path, dict], tmp_path: Path
):
    """An edit of a module whose constants kernels compile in (the observation's columns,
    the background cap) compiles those kernels afresh, and only those: the random
    streams, which read no constant of it, still load."""
    cache, _ = filled
    changed = _probe(_edited_copy(tmp_path, "layout.py"), cache, "all")
    assert changed["misses"] > 0 and changed["hits"] > 0


def test_unwritable_cache_dir_falls_back_to_numba(tmp_path: Path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    app = _copy_package(tmp_path / "app", mtime=1_000_000_000)
    report = _probe(app, blocker / "cache", "seed")
    assert report["misses"] == 1
    assert Path(report["cache_path"]).is_relative_to(app)
