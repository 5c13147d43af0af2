"""Real Flower runs for the tests: run_federation with a private Flower home, checked to
leave no process behind, its console optionally redirected to a file; one start of the
simulation engine at a time (`RAY_LOCK`, `ray_start_slot`); and a run watched from
outside: what its processes listen on (`ListenerWatch`, `check_listeners`), whether Ray
refuses a client without the run's token, and what outlives a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path

import grpc
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
beside them. `make test` runs every simulation file on one worker (conftest's
`SimulationTogether`), so the lock is seldom waited for there; it still keeps Ray's
starts apart under any other way of running the suite."""
SLOT_POLL_S = 0.5
SCAN_EVERY_S = 0.5
"""Pause between two of `ListenerWatch`'s scans."""


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


class ListenerWatch:
    """Every socket the processes of `marker` listen on, gathered over and over by a thread
    of its own while the `with` block runs. A scan of a whole process family can take
    seconds on a loaded machine; in a thread it never holds up the block, which can then
    stop a run the moment it reaches a round."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self._seen: dict[int, tuple[str, set[str]]] = {}
        self._commands: dict[int, str] = {}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._scan, daemon=True)

    def __enter__(self) -> ListenerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _scan(self) -> None:
        while not self._done.wait(SCAN_EVERY_S):
            for pid, (name, ports) in listening(processes_with_env(self.marker)).items():
                command = name
                with suppress(psutil.Error):
                    command = " ".join(psutil.Process(pid).cmdline())
                with self._lock:
                    self._seen.setdefault(pid, (name, set()))[1].update(ports)
                    self._commands.setdefault(pid, command)

    def commands(self) -> list[str]:
        """The command line of every process seen, as it was when first seen."""
        with self._lock:
            return list(self._commands.values())

    def seen(self) -> dict[int, tuple[str, set[str]]]:
        """What was seen so far: pid -> (process name, every `ip:port` it listened on)."""
        with self._lock:
            return {pid: (name, set(ports)) for pid, (name, ports) in self._seen.items()}

    def wait_for(self, name: str, runner: subprocess.Popen, wait_s: float = 600) -> None:
        """Until a process called `name` was seen listening (the runner alive meanwhile)."""
        deadline = time.monotonic() + wait_s
        while not any(n == name and ports for n, ports in self.seen().values()):
            assert runner.poll() is None, f"the run ended before {name} was seen listening"
            assert time.monotonic() < deadline, f"no {name} listening within {wait_s:g} s"
            time.sleep(0.2)


def wait_for_round(runner: subprocess.Popen, progress: Path, wait_s: float = 600) -> None:
    """Until `progress` (an experiment's progress.json) records a completed round, polled
    often enough that the run can be stopped before its next round ends."""
    deadline = time.monotonic() + wait_s
    while not (progress.exists() and json.loads(progress.read_text())["completed_round"]):
        assert runner.poll() is None, "the run ended before it completed a round"
        assert time.monotonic() < deadline, f"no round completed within {wait_s:g} s"
        time.sleep(0.1)


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


def beyond_loopback(seen: dict[int, tuple[str, set[str]]]) -> set[str]:
    """The sockets in `seen` that listen on more than loopback."""
    return {
        f"{name} ({pid}): {port}"
        for pid, (name, ports) in seen.items()
        for port in ports
        if not is_loopback(port.rsplit(":", 1)[0])
    }


GCS_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""A GCS call any Ray client makes first; an empty request is valid."""
REAP_WAIT_S = 20.0
"""How long a killed runner's family may take to go."""


def _gcs_answer(port: int, token: str | None) -> grpc.StatusCode:
    """The status of one GCS call to 127.0.0.1:`port`, with `token` or without one."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            channel.unary_unary(GCS_PROBE)(b"", metadata=metadata, timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def check_ray_refuses_strangers(seen: dict[int, tuple[str, set[str]]]) -> None:
    """Ray's GCS (seen listening, and still up) answers only the run's token."""
    gcs = next(pid for pid, (name, _) in seen.items() if name == "gcs_server")
    environ = psutil.Process(gcs).environ()
    token = Path(environ["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
    for port in {int(p.rsplit(":", 1)[1]) for p in seen[gcs][1]}:
        assert _gcs_answer(port, None) == grpc.StatusCode.UNAUTHENTICATED
        assert _gcs_answer(port, "0" * len(token)) == grpc.StatusCode.UNAUTHENTICATED
        assert _gcs_answer(port, token) == grpc.StatusCode.OK


def check_listeners(seen: dict[int, tuple[str, set[str]]], expected: set[str]) -> None:
    """`expected` processes (by name as the kernel shortens it) and the SuperLink were
    seen listening, every one of them on loopback only."""
    names = {name for name, ports in seen.values() if ports}
    assert expected <= names, names
    assert any(name.startswith("flower-superl") for name in names), names
    wide = beyond_loopback(seen)
    assert not wide, f"listening beyond loopback: {sorted(wide)}"
