"""`fedmc run`: one federated experiment through Flower's simulation engine, start to end.

`flwr run` alone is awkward to automate: the local SuperLink it starts outlives it, it
installs the app's dependencies into a fresh environment on every run unless told not to,
and its exit code is 0 even when the run failed. So this runner owns the whole lifecycle:
a private Flower home (temporary), a SuperLink of its own on a free port started from the
project root, runtime dependency installation, telemetry and update checks off, one
virtual client per region with one CPU each, the run's log streamed to the terminal, the
run's final status read from `flwr list` (only `finished:completed` is a success), and
every process the SuperLink spawned (SuperExec, the simulation, Ray) stopped by PID at
the end, on failure, on Ctrl-C and at the deadline alike.

Before Flower starts, it settles what to do with an experiment that already holds results
(refuse, overwrite, or resume after the last completed round: `federation.resume`) and
stops whatever a killed earlier run of the same experiment left running.
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
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import httpx
import pandas as pd

from fedmc_flwr.baselines import format_table
from fedmc_flwr.config import ConfigError, ExperimentConfig, load_config, to_yaml
from fedmc_flwr.errors import RunFailure
from fedmc_flwr.federation.processes import FlowerProcesses, owner_token, stop_stale
from fedmc_flwr.federation.recorder import STATUS_FILE
from fedmc_flwr.federation.resume import resume_point
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.plots import plot_metrics
from fedmc_flwr.results import experiment_path, holds_results

CONNECTION = "fedmc"
"""Name of the SuperLink connection in the private Flower home."""
STARTUP_TIMEOUT_S = 30.0
POLL_S = 2.0
REGISTRY = ".fedmc-run.json"
"""The run's process family, in its experiment directory while it runs."""
FLOWER_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_DEDUP_LOGS": "0",
}
BIN = Path(sys.executable).parent
COLOUR_FORCING = ("FORCE_COLOR", "CLICOLOR_FORCE")
"""Set by Jupyter kernels; they make the `flwr` CLI colour its JSON output, which then does
not parse, so Flower's processes never see them."""


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
            raise RunError(f"flower-superlink exited with {superlink.returncode}; see {log_file}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RunError(f"flower-superlink not up within {STARTUP_TIMEOUT_S:.0f} s; see {log_file}")


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
        detail = (done.stderr.strip() or done.stdout.strip()).splitlines() or ["no output"]
        raise RunError(f"flwr {args[0]} failed (exit {done.returncode}): {detail[-1]}") from None


def _final_status(
    run_id: str,
    env: dict[str, str],
    cwd: Path,
    processes: FlowerProcesses,
    stream: subprocess.Popen,
    deadline: float,
) -> str:
    """Wait for the run to finish; return its status text from `flwr list`, or `deadline`
    when the run's deadline (a `time.monotonic` value) passes first.

    The log stream ends with the run, so `flwr list` (a whole CLI start each) is asked only
    then, and again every few seconds if the stream ended early (a lost connection).
    """
    while True:
        processes.refresh()
        if time.monotonic() > deadline:
            return "deadline"
        try:
            stream.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            continue
        runs = _flwr(["list", CONNECTION, "--run-id", run_id], env, cwd).get("runs") or []
        status = str(runs[0]["status"]) if runs else "unknown"
        if status.startswith("finished"):
            return status
        time.sleep(POLL_S)


class RunError(RunFailure, RuntimeError):
    """Flower could not be started or driven (not a problem of the experiment itself)."""


def last_round_table(csv_path: Path) -> str:
    """The last round's held-out evaluation (mean over regions), best reward first."""
    frame = pd.read_csv(csv_path)
    evals = frame[frame["phase"] == "eval"]
    last = int(evals["round"].max())
    rows = evals[evals["round"] == last].sort_values("reward", ascending=False)
    return f"round {last}, held-out evaluation, mean over regions:\n" + format_table(
        rows.drop(columns=["reason"], errors="ignore").to_dict("records")
    )


def _failure(out: Path) -> str:
    """Why the run stopped, as the ServerApp recorded it, if it did."""
    try:
        status = json.loads((out / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return ""
    return str(status.get("reason", "")) if status.get("state") == "failed" else ""


def _settle_existing(cfg: ExperimentConfig, out: Path, on_existing: str) -> int | None:
    """What an existing experiment means for this run: None to go on, or an exit code."""
    if on_existing == "refuse" and holds_results(out):
        print(
            f"fedmc: {out} already holds results; pass --resume to continue that run or "
            "--overwrite to replace it",
            file=sys.stderr,
        )
        return 2
    if on_existing != "resume":
        return None
    start = resume_point(out, to_yaml(cfg), initial_weights(cfg), cfg.train.rounds)
    if start.completed_round == cfg.train.rounds:
        print(f"fedmc: {cfg.name} already completed its {cfg.train.rounds} rounds")
        print(last_round_table(out / "metrics.csv"))
        return 0
    if start.completed_round:
        print(f"fedmc: resuming {cfg.name} after round {start.completed_round}", flush=True)
    return None


def run_federation(
    config_path: Path,
    overrides: list[str],
    num_supernodes: int | None = None,
    on_existing: str = "refuse",
) -> int:
    """Run one experiment (YAML + dotted overrides) in Flower's simulation engine.

    `num_supernodes` defaults to one virtual client per region; `on_existing` says what to
    do when the experiment already holds results ('refuse', 'overwrite' or 'resume').
    Returns 0 when the run completed (and its plots are drawn), 1 when it failed or hit its
    deadline (every finished round is kept), 2 when an existing experiment was refused.
    """
    cfg = load_config(config_path, overrides)
    spaced = [item for item in overrides if len(item.split()) != 1]
    if spaced:
        raise ConfigError(f"override {spaced[0]!r}: values with spaces cannot be passed to Flower")
    out = experiment_path(cfg.results_dir, cfg.name)
    out.mkdir(parents=True, exist_ok=True)
    stale = stop_stale(out / REGISTRY)
    if stale:
        print(f"fedmc: stopped {stale} processes a killed earlier run left behind", flush=True)
    settled = _settle_existing(cfg, out, on_existing)
    if settled is not None:
        return settled
    supernodes = num_supernodes or cfg.world.regions
    root = project_root()
    processes = FlowerProcesses(out / REGISTRY)
    deadline = time.monotonic() + (cfg.federation.deadline_s or float("inf"))
    with tempfile.TemporaryDirectory(prefix="fedmc-flwr-") as tmp, _sigterm_as_interrupt():
        home = Path(tmp)
        env = {
            **{k: v for k, v in os.environ.items() if k not in COLOUR_FORCING},
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
                f"on-existing = {_toml_string(on_existing)}\n"
                f"owner = {_toml_string(owner_token())}\n"
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
                raise RunError(f"flwr run failed: {started}")
            run_id = str(started["run-id"])
            print(
                f"fedmc: run {run_id}: {cfg.name}, {cfg.world.regions} regions on "
                f"{supernodes} virtual clients, {cfg.train.rounds} rounds",
                flush=True,
            )
            stream = processes.start(
                [str(BIN / "flwr"), "log", run_id, CONNECTION, "--stream"], env=env, cwd=root
            )
            status = _final_status(run_id, env, root, processes, stream, deadline)
        finally:
            processes.stop()
    if status == "deadline":
        print(
            f"fedmc: federation.deadline_s ({cfg.federation.deadline_s:g} s) reached; every "
            f"finished round is in {out} (continue with --resume)",
            file=sys.stderr,
        )
        return 1
    if status != "finished:completed":
        why = _failure(out) or f"it ended as {status}"
        print(
            f"fedmc: run {run_id} failed: {why}; results so far in {out} (continue with --resume)",
            file=sys.stderr,
        )
        return 1
    plots = plot_metrics(out / "metrics.csv", None)
    print(last_round_table(out / "metrics.csv"))
    print(f"fedmc: results in {out}")
    print(f"fedmc: plots: {', '.join(str(p) for p in plots)}")
    return 0
