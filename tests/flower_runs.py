"""Real Flower runs for the tests: run_federation with a private Flower home, checked to
leave no process behind, its console optionally redirected to a file; one start of the
simulation engine at a time (`RAY_LOCK`, `ray_start_slot`); and what a run's processes
listen on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import psutil
from conftest import TINY
from filelock import FileLock

from fedmc_flwr.config import load_config
from fedmc_flwr.experiments.sweep import _output_to
from fedmc_flwr.federation.run_files import PROGRESS_FILE
from fedmc_flwr.federation.runner import Engine, SimulationEngine, run_federation
from fedmc_flwr.integrations.prometheus import is_loopback
from fedmc_flwr.results import experiment_path

RAY_LOCK = FileLock(Path(tempfile.gettempdir()) / "fedmc-flwr-tests-ray.lock")
"""Held while a run of Flower's simulation engine starts, so that no two Ray clusters
start side by side, whichever pytest worker runs them: Ray gives a starting node 30 s to
register with its GCS, which two clusters starting together on two cores can overrun.
`ray_start_slot` takes it for a run a test starts; a test whose child process runs
several (the notebook) holds it throughout. The deployment engine starts no Ray and runs
beside them."""
SLOT_POLL_S = 0.5


@contextmanager
def ray_start_slot(progress: Path) -> Iterator[None]:
    """Hold `RAY_LOCK` while the block's run starts: until its `progress` file (the
    experiment's progress.json) is written, when round 1 is done and Ray long up, or until
    the block ends. Another run's Ray then starts beside this one's training, not its start.

    The lock is taken and released by a thread of its own, which watches the file."""
    acquired, finished = threading.Event(), threading.Event()
    before = progress.stat().st_mtime_ns if progress.exists() else None

    def hold() -> None:
        with RAY_LOCK:
            acquired.set()
            while not finished.wait(SLOT_POLL_S):
                if progress.exists() and progress.stat().st_mtime_ns != before:
                    return

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    acquired.wait()
    try:
        yield
    finally:
        finished.set()
        holder.join()


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
        simulation = engine is None or isinstance(engine, SimulationEngine)
        cfg = load_config(config, overrides)
        progress = experiment_path(cfg.results_dir, cfg.name) / PROGRESS_FILE
        with (
            ray_start_slot(progress) if simulation else nullcontext(),
            _output_to(console) if console else nullcontext(),
        ):
            code = run_federation(config, overrides, supernodes, on_existing, engine)
    finally:
        tempfile.tempdir = previous
    assert processes_with_env(f"FLWR_HOME={homes}") == [], "Flower processes left running"
    return code


def listening(pids: list[int]) -> dict[int, tuple[str, set[str]]]:
    """pid -> (process name, `ip:port` of each socket it listens on)."""
    found = {}
    for pid in pids:
        try:
            process = psutil.Process(pid)
            ports = {
                f"{c.laddr.ip}:{c.laddr.port}"
                for c in process.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            }
            found[pid] = (process.name(), ports)
        except psutil.Error:
            continue
    return found


def survivors_of_sigkill(runner: subprocess.Popen, marker: str, wait_s: float) -> list[str]:
    """SIGKILL `runner`; the processes of `marker` still alive `wait_s` later (killed
    then, so as not to leave them to the rest of the suite), as `name (pid)`."""
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    left: list[int] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        left = [p for p in processes_with_env(marker) if p != os.getpid()]
        if not left:
            break
        time.sleep(0.5)
    survivors = []
    for pid in left:
        try:
            survivors.append(f"{psutil.Process(pid).name()} ({pid})")
            os.kill(pid, signal.SIGKILL)
        except (psutil.Error, OSError):
            continue
    return survivors


def watch_to_first_round(
    runner: subprocess.Popen, marker: str, progress: Path
) -> dict[int, tuple[str, set[str]]]:
    """Every socket the processes of `marker` listen on, from the start of `runner` until
    `progress` says a round is complete (or the runner ends, or ten minutes pass)."""
    seen: dict[int, tuple[str, set[str]]] = {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and runner.poll() is None:
        for pid, (name, ports) in listening(processes_with_env(marker)).items():
            seen.setdefault(pid, (name, set()))[1].update(ports)
        if progress.exists() and json.loads(progress.read_text())["completed_round"]:
            break
        time.sleep(0.5)
    return seen


def beyond_loopback(seen: dict[int, tuple[str, set[str]]]) -> set[str]:
    """The sockets in `seen` that listen on more than loopback."""
    return {
        f"{name} ({pid}): {port}"
        for pid, (name, ports) in seen.items()
        for port in ports
        if not is_loopback(port.rsplit(":", 1)[0])
    }
