"""`fedmc run`: one federated experiment through Flower's simulation engine, start to end.

`flwr run` alone is awkward to automate: the local SuperLink it starts outlives it, it
installs the app's dependencies into a fresh environment on every run unless told not to,
and its exit code is 0 even when the run failed. So this runner owns the whole lifecycle:
a private Flower home (temporary), a SuperLink of its own on a free port started from the
project root, runtime dependency installation, telemetry and update checks off, one
virtual client per region with one CPU each, the run's log streamed to the terminal, the
run's final status read from `flwr list` (only `finished:completed` is a success), and
every process the SuperLink spawned (SuperExec, the simulation, Ray) stopped by PID at
the end, on failure and on Ctrl-C alike.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType

import httpx
import pandas as pd

from fedmc_flwr.baselines import format_table
from fedmc_flwr.config import ConfigError, load_config
from fedmc_flwr.plots import plot_metrics
from fedmc_flwr.results import experiment_dir

CONNECTION = "fedmc"
"""Name of the SuperLink connection in the private Flower home."""
STARTUP_TIMEOUT_S = 30.0
POLL_S = 2.0
STOP_GRACE_S = 10.0
FLOWER_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_DEDUP_LOGS": "0",
}
BIN = Path(sys.executable).parent


def project_root() -> Path:
    """The Flower app directory: the project holding pyproject.toml's [tool.flwr.app]."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or "[tool.flwr.app]" not in pyproject.read_text():
        raise FileNotFoundError(f"{root} is not the fedmc-flwr project (no [tool.flwr.app])")
    return root


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _process_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, session id, start time) of every live process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if fields[0] != "Z":  # state ppid pgrp session ... starttime is field 19
            table[int(entry.name)] = (int(fields[1]), int(fields[3]), int(fields[19]))
    return table


class FlowerProcesses:
    """Every process a run starts, and everything they start in turn, stopped together.

    Flower detaches its helpers (the SuperLink starts SuperExec in a new session, SuperExec
    starts the simulation, which starts Ray), and a helper whose parent died is adopted by
    init. So the family is tracked while the run goes: any child of a member, and any
    process in a session a member leads, joins it. Members are remembered with their start
    time, so a recycled PID is never signalled.
    """

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []
        self.family: dict[int, int] = {}
        """pid -> start time of every process seen in the family."""

    def start(self, command: list[str], **kwargs: object) -> subprocess.Popen:
        process = subprocess.Popen(command, start_new_session=True, **kwargs)  # type: ignore[call-overload]
        self.started.append(process)
        self.refresh()
        return process

    def refresh(self) -> None:
        """Add the processes that joined the family since the last look."""
        table = _process_table()
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

    def alive(self) -> list[int]:
        """Family members still running (same PID and same start time)."""
        table = _process_table()
        return [pid for pid, t in self.family.items() if pid in table and table[pid][2] == t]

    def stop(self) -> None:
        """SIGTERM to the whole family, SIGKILL to what is left after a grace period."""
        self.refresh()
        _signal(self.alive(), signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.2)
            self.refresh()  # a helper may spawn while shutting down
        _signal(self.alive(), signal.SIGKILL)
        for process in self.started:
            process.wait()


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the cleanup below runs for both."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _write_flower_home(home: Path, port: int) -> None:
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )


def _wait_healthy(port: int, superlink: subprocess.Popen, log_file: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if superlink.poll() is not None:
            raise RuntimeError(
                f"flower-superlink exited with {superlink.returncode}; see {log_file}"
            )
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"flower-superlink not up within {STARTUP_TIMEOUT_S:.0f} s; see {log_file}")


def _flwr(args: list[str], env: dict[str, str], cwd: Path) -> dict:
    """One `flwr` CLI call with JSON output, parsed."""
    done = subprocess.run(
        [str(BIN / "flwr"), *args, "--format", "json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = done.stdout[done.stdout.find("{") :]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise RuntimeError(
            f"flwr {args[0]} failed (exit {done.returncode}): {done.stderr.strip() or done.stdout}"
        ) from None


def _final_status(
    run_id: str,
    env: dict[str, str],
    cwd: Path,
    processes: FlowerProcesses,
    stream: subprocess.Popen,
) -> str:
    """Wait for the run to finish; return its status text from `flwr list`.

    The log stream ends with the run, so `flwr list` (a whole CLI start each) is asked only
    then, and again every few seconds if the stream ended early (a lost connection).
    """
    while True:
        processes.refresh()
        try:
            stream.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            continue
        runs = _flwr(["list", CONNECTION, "--run-id", run_id], env, cwd).get("runs") or []
        status = str(runs[0]["status"]) if runs else "unknown"
        if status.startswith("finished"):
            return status
        time.sleep(POLL_S)


def last_round_table(csv_path: Path) -> str:
    """The last round's held-out evaluation (mean over regions), best reward first."""
    frame = pd.read_csv(csv_path)
    evals = frame[frame["phase"] == "eval"]
    last = int(evals["round"].max())
    rows = evals[evals["round"] == last].sort_values("reward", ascending=False)
    return f"round {last}, held-out evaluation, mean over regions:\n" + format_table(
        rows.to_dict("records")
    )


def run_federation(
    config_path: Path, overrides: list[str], num_supernodes: int | None = None
) -> int:
    """Run one experiment (YAML + dotted overrides) in Flower's simulation engine.

    `num_supernodes` defaults to one virtual client per region. Returns 0 when the run
    finished as completed (and its plots are drawn), 1 otherwise.
    """
    cfg = load_config(config_path, overrides)
    spaced = [item for item in overrides if len(item.split()) != 1]
    if spaced:
        raise ConfigError(f"override {spaced[0]!r}: values with spaces cannot be passed to Flower")
    out = experiment_dir(cfg.results_dir, cfg.name)
    supernodes = num_supernodes or cfg.world.regions
    root = project_root()
    processes = FlowerProcesses()
    with tempfile.TemporaryDirectory(prefix="fedmc-flwr-") as tmp, _sigterm_as_interrupt():
        home = Path(tmp)
        env = {
            **os.environ,
            **FLOWER_ENV,
            "FLWR_HOME": str(home),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        try:
            port = free_port()
            log_file = home / "superlink.log"
            superlink = processes.start(
                [
                    str(BIN / "flower-superlink"),
                    "--insecure",
                    "--simulation",
                    "--disable-runtime-dependency-installation",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--log-file",
                    str(log_file),
                ],
                cwd=root,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            _wait_healthy(port, superlink, log_file)
            _write_flower_home(home, port)
            run_config = home / "run-config.toml"
            run_config.write_text(
                f"config = {_toml_string(str(Path(config_path).resolve()))}\n"
                f"overrides = {_toml_string(' '.join(overrides))}\n"
                f"results-dir = {_toml_string(str(out.parent))}\n"
            )
            started = _flwr(
                [
                    "run",
                    str(root),
                    CONNECTION,
                    "--run-config",
                    str(run_config),
                    "--federation-config",
                    f"num-supernodes={supernodes} client-resources-num-cpus=1",
                ],
                env,
                root,
            )
            if not started.get("success"):
                print(f"fedmc: flwr run failed: {started}", file=sys.stderr)
                return 1
            run_id = str(started["run-id"])
            print(
                f"fedmc: run {run_id}: {cfg.name}, {cfg.world.regions} regions on "
                f"{supernodes} virtual clients, {cfg.train.rounds} rounds",
                flush=True,
            )
            stream = processes.start(
                [str(BIN / "flwr"), "log", run_id, CONNECTION, "--stream"], env=env, cwd=root
            )
            status = _final_status(run_id, env, root, processes, stream)
        finally:
            processes.stop()
    if status != "finished:completed":
        print(f"fedmc: run {run_id} ended as {status}; results so far in {out}", file=sys.stderr)
        return 1
    plots = plot_metrics(out / "metrics.csv", None)
    print(last_round_table(out / "metrics.csv"))
    print(f"fedmc: results in {out}")
    print(f"fedmc: plots: {', '.join(str(p) for p in plots)}")
    return 0
