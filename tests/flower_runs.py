"""Real Flower runs for the tests: run_federation with a private Flower home, checked to
leave no process behind, its console optionally redirected to a file."""

from __future__ import annotations

import tempfile
from contextlib import nullcontext
from pathlib import Path

import psutil
from conftest import TINY

from fedmc_flwr.experiments.sweep import _output_to
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
    console: Path | None = None,
) -> int:
    """run_federation with its private Flower home under `homes`; no process may outlive it.
    With `console`, everything it and its children print (file descriptors 1 and 2 too)
    goes to that file, as when `fedmc run` is redirected."""
    previous, tempfile.tempdir = tempfile.tempdir, str(homes)
    try:
        with _output_to(console) if console else nullcontext():
            code = run_federation(config, overrides, supernodes, on_existing, engine)
    finally:
        tempfile.tempdir = previous
    assert processes_with_env(f"FLWR_HOME={homes}") == [], "Flower processes left running"
    return code
