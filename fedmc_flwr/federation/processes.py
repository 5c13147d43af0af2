"""The process family of a run: everything a run starts, found and stopped by PID.

psutil reads the process table portably; a member is known by its PID and its start time,
so a recycled PID is never signalled. On Linux every process a run starts directly is
told to stop when the run's own process dies (`PR_SET_PDEATHSIG`), even by SIGKILL. That
reaches only direct children: Ray's helpers (its DashboardAgent and RuntimeEnvAgent,
children of a raylet) were adopted by init and lived on. So a run also starts a guard
(`FlowerProcesses.guard`), a small process of its own that the same signal wakes when
the run dies, and that stops the whole family, grandchildren included.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import psutil

from fedmc_flwr.errors import InputError
from fedmc_flwr.federation.run_files import write_json

STOP_GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM when the parent dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


START_SLACK_S = 1.0
"""How far two readings of one process's start time may differ: psutil gives a start time
as seconds since boot plus the boot time, which the kernel derives from the wall clock, so
a clock adjustment moves it by whole seconds; readings since boot differ only by a reading
of the boot time taken a moment apart. Compared exactly, a clock adjustment makes a live
owner look gone, and its run stops ("the process that started this run is gone")."""


def _started(process: psutil.Process) -> float:
    """`process`'s start time in seconds since boot (see START_SLACK_S)."""
    return process.create_time() - psutil.boot_time()


def _process_table() -> dict[int, tuple[int, int, float]]:
    """pid -> (parent pid, session id, start time since boot) of every live process."""
    table = {}
    psutil.process_iter.cache_clear()  # its cached processes keep the boot time of then
    boot = psutil.boot_time()
    for process in psutil.process_iter(["ppid", "create_time", "status"]):
        info = process.info
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            started = info["create_time"] - boot
            table[process.pid] = (info["ppid"], os.getsid(process.pid), started)
        except OSError:  # gone meanwhile
            continue
    return table


class FlowerProcesses:
    """Every process a run starts, and everything they start in turn, stopped together.

    Flower detaches its helpers (the SuperLink starts SuperExec in a new session, SuperExec
    starts the simulation, which starts Ray), and a helper whose parent died is adopted by
    init. So the family is tracked while the run goes: any child of a member, and any
    process in a session a member leads, joins it. Members are remembered with their start
    time, so a recycled PID is never signalled. The family is also written to `registry`
    as it grows: if this process is killed outright (SIGKILL, no cleanup), the next run of
    the same experiment stops what it left behind (`stop_stale`).
    """

    def __init__(self, registry: Path | None = None) -> None:
        self.started: list[subprocess.Popen] = []
        self.family: dict[int, float] = {}
        """pid -> start time of every process seen in the family."""
        self.registry = registry

    def start(self, command: list[str], **kwargs: object) -> subprocess.Popen:
        if sys.platform == "linux":
            kwargs["preexec_fn"] = _stop_with_parent
        process = subprocess.Popen(command, start_new_session=True, **kwargs)  # type: ignore[call-overload]
        self.started.append(process)
        self.refresh()
        return process

    def refresh(self) -> None:
        """Add the processes that joined the family since the last look."""
        table = _process_table()
        before = len(self.family)
        for process in self.started:
            if process.pid in table:
                self.family.setdefault(process.pid, table[process.pid][2])
        grew = True
        while grew:
            grew = False
            for pid, (ppid, session, started) in table.items():
                if pid not in self.family and (ppid in self.family or session in self.family):
                    self.family[pid] = started
                    grew = True
        if self.registry is not None and len(self.family) != before:
            me = psutil.Process()
            family = {str(pid): t for pid, t in self.family.items()}
            write_json(self.registry, {"owner": [me.pid, _started(me)], "family": family})

    def alive(self) -> list[int]:
        """Family members still running (same PID and same start time)."""
        return _alive(self.family)

    def guard(self) -> subprocess.Popen:
        """Start the guard that stops this family if this process dies without cleaning up
        (SIGKILL, an out-of-memory kill); see `guard_main`. Needs a registry."""
        if self.registry is None:
            raise ValueError("a guard reads the family from the registry; none was given")
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        command = [sys.executable, "-m", __name__, str(self.registry), owner_token()]
        env = {**os.environ, "PYTHONPATH": path}
        return self.start(command, env=env, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        """SIGTERM to the whole family, SIGKILL to what is left after a grace period."""
        self.refresh()
        _terminate(self.alive(), self.refresh, self.alive)
        for process in self.started:
            process.wait()
        if self.registry is not None:
            self.registry.unlink(missing_ok=True)


def owner_token() -> str:
    """This process as `pid:start time`, for a child to check that it is still there."""
    me = psutil.Process()
    return f"{me.pid}:{_started(me)!r}"


def token_alive(token: str) -> bool:
    """Whether the process an `owner_token` names still runs (an empty token: no owner)."""
    if not token:
        return True
    pid, _, started = token.partition(":")
    try:
        return bool(_alive({int(pid): float(started)}))
    except ValueError:
        return True  # not a token this code wrote: no owner to watch


def _alive(members: dict[int, float]) -> list[int]:
    table = _process_table()
    return [
        pid
        for pid, t in members.items()
        if pid in table and abs(table[pid][2] - t) <= START_SLACK_S
    ]


def _terminate(
    pids: list[int], refresh: Callable[[], None], alive: Callable[[], list[int]]
) -> None:
    _signal(pids, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and alive():
        time.sleep(0.2)
        refresh()  # a helper may spawn while shutting down
    _signal(alive(), signal.SIGKILL)


class ExperimentBusy(InputError, RuntimeError):
    """Another live run is writing this experiment."""


def stop_stale(registry: Path) -> int:
    """Stop the processes a killed run of this experiment left behind; how many were alive.

    ExperimentBusy when the run that wrote `registry` is itself still alive."""
    try:
        saved = json.loads(registry.read_text())
        owner_pid, owner_start = int(saved["owner"][0]), float(saved["owner"][1])
        members = {int(pid): float(t) for pid, t in saved["family"].items()}
    except FileNotFoundError:
        return 0
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        registry.unlink()  # unreadable: nothing can be identified safely
        return 0
    if _alive({owner_pid: owner_start}):
        raise ExperimentBusy(f"{registry.parent} is being written by a live run (pid {owner_pid})")
    left = _alive(members)
    if left:
        _terminate(left, lambda: None, lambda: _alive(members))
    registry.unlink(missing_ok=True)
    return len(left)


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, sig)


def reap(registry: Path) -> int:
    """Stop the family a dead run wrote to `registry`, and every process that joined it
    since the run's last look (children and session members of members); how many.

    Unlike `stop_stale`, this runs the moment the run dies, as its guard, so the family's
    newest members (a Ray helper started after the run's last refresh) are found too,
    through the members' PIDs and session ids, which nobody else can hold this soon;
    `stop_stale`, perhaps hours later, signals only the members it knows."""
    try:
        members = _members(registry)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0
    # dead members stay: their session ids still mark their descendants, now init's
    stopped = _stop_family(members)
    registry.unlink(missing_ok=True)
    return stopped


def _members(registry: Path) -> dict[int, float]:
    """pid -> start time of the family a registry (or a PID file) holds."""
    saved = json.loads(registry.read_text())["family"]
    return {int(pid): float(t) for pid, t in saved.items()}


def _stop_family(members: dict[int, float]) -> int:
    """Stop `members` and every process that joins them (children and session members of
    members), this one excepted; how many were alive."""
    family = FlowerProcesses()
    family.family = dict(members)
    me = os.getpid()

    def refresh() -> None:
        family.refresh()
        family.family.pop(me, None)

    refresh()
    left = family.alive()
    _terminate(left, refresh, family.alive)
    return len(left)


def record_pid(pid_file: Path, pid: int) -> None:
    """`pid` and its start time into `pid_file`, for `stop_recorded` to stop it later from
    another process; in the registry's layout."""
    write_json(pid_file, {"family": {str(pid): _started(psutil.Process(pid))}})


def recorded_alive(pid_file: Path) -> list[int]:
    """The recorded process, if it still runs (same PID, same start time); [] when it has
    ended or nothing readable is recorded."""
    try:
        return _alive(_members(pid_file))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def stop_recorded(pid_file: Path) -> int:
    """Stop the process `record_pid` wrote into `pid_file` and what it started that still
    runs, then remove the file; how many processes were stopped (0: it had ended).

    Nothing else is signalled: a process that took its port, or its PID, since is not its,
    and a recorded process that has ended marks no family (its PID may be another's now).
    FileNotFoundError when there is no such file."""
    if not pid_file.is_file():
        raise FileNotFoundError(pid_file)
    alive = recorded_alive(pid_file)
    members = {pid: t for pid, t in _members(pid_file).items() if pid in alive} if alive else {}
    stopped = _stop_family(members) if members else 0
    pid_file.unlink(missing_ok=True)
    return stopped


def guard_main(registry: Path, owner: str) -> None:
    """The guard of one run: wait for SIGTERM, which comes either from the run's own
    cleanup (the owner still runs: nothing to do) or from `PR_SET_PDEATHSIG` when the
    owner died (then stop the family: `reap`). An owner already gone at start is reaped
    at once."""

    def on_term(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # reaping is not interrupted
        if not token_alive(owner):
            reap(registry)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    while True:
        if not token_alive(owner):
            on_term(signal.SIGTERM, None)
        if sys.platform == "linux":
            signal.pause()  # PR_SET_PDEATHSIG's SIGTERM wakes it
        else:
            time.sleep(1.0)


if __name__ == "__main__":
    guard_main(Path(sys.argv[1]), sys.argv[2])
