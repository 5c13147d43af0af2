"""Real Flower runs for the tests: run_federation with a private Flower home, checked to
leave no process behind."""

from __future__ import annotations

import tempfile
from pathlib import Path

import psutil
from conftest import TINY

from fedmc_flwr.federation.runner import Engine, run_federation


def processes_with_env(marker: str) -> list[int]:
    """Live processes whose environment mentions `marker` (the run's private Flower home)."""
    found = []
    for process in psutil.process_iter(["status"]):
        try:
            environ = process.environ()
        except (psutil.Error, OSError):
            continue
        if process.info["status"] != psutil.STATUS_ZOMBIE and any(
            marker in f"{k}={v}" for k, v in environ.items()
        ):
            found.append(process.pid)
    return found


def run_isolated(
    homes: Path,
    overrides: list[str],
    supernodes: int | None,
    config: Path = TINY,
    on_existing: str = "refuse",
    engine: Engine | None = None,
) -> int:
    """run_federation with its private Flower home under `homes`; no process may outlive it."""
    previous, tempfile.tempdir = tempfile.tempdir, str(homes)
    try:
        code = run_federation(config, overrides, supernodes, on_existing, engine)
    finally:
        tempfile.tempdir = previous
    assert processes_with_env(f"FLWR_HOME={homes}") == [], "Flower processes left running"
    return code
