"""`fedmc run` and `fedmc deploy`: one federated experiment through Flower, start to end.

`flwr run` alone is awkward to automate: the local SuperLink it starts outlives it, it
installs the app's dependencies into a fresh environment on every run unless told not to,
and its exit code is 0 even when the run failed. So this runner owns the whole lifecycle:
a private Flower home (temporary), the Flower app staged there from the package, whether a
checkout or an installed wheel (`stage_app`), the engine's processes started from it (a
SuperLink of its own on a free port; for the deployment engine, its SuperNodes too:
`federation.deployment`), runtime dependency installation, telemetry and update checks
off, the run's log streamed to the terminal (quietly: `console`), the run's end (the
ServerApp's own status.json once it recorded the last round, without waiting for Flower
to shut its simulation or nodes down; else Flower's status from `flwr list`, where only
`finished:completed` is a success), and every process the engine started, and
everything they spawned (SuperExec, the simulation, Ray, ClientApp processes), stopped by
PID at the end, on failure, on Ctrl-C and at the deadline alike; and when the runner
itself is killed outright, by its guard (`processes.FlowerProcesses.guard`). A completed
run ends with its plots and its last round's table (`summary.finish`).

Before Flower starts, it settles what to do with an experiment that already holds results
(refuse, overwrite, or resume after the last completed round: `federation.resume`),
stops whatever a killed earlier run of the same experiment left running, and loads or
compiles the simulator's and the acting path's kernels once (`sim.world.warm_cache`,
`policies.two_tier_kernels.warm_cache`), so that no client compiles them in round 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fedmc_flwr.config import (
    ConfigError,
    ExperimentConfig,
    join_round,
    load_config,
    regions_of,
    to_yaml,
)
from fedmc_flwr.federation.console import plain_env, relay
from fedmc_flwr.federation.identity import fingerprint
from fedmc_flwr.federation.processes import FlowerProcesses, owner_token, stop_stale
from fedmc_flwr.federation.run_files import PROGRESS_FILE, REGISTRY, STATUS_FILE, run_completed
from fedmc_flwr.federation.summary import finish, last_round_table
from fedmc_flwr.federation.superlink import (
    BIN,
    CONNECTION,
    Launch,
    RunError,
    flower_env,
    flwr,
)
from fedmc_flwr.outputs import output_dir
from fedmc_flwr.policies import two_tier_kernels
from fedmc_flwr.results import RUN_LOG, experiment_path, holds_results
from fedmc_flwr.sim.world import warm_cache
from fedmc_flwr.stop_signals import stop_requests

__all__ = ["RunError", "SimulationEngine", "run_federation"]

POLL_S = 2.0
LOG_GRACE_S = 1.0
"""How long a completed run's log stream may take to relay its last lines."""


PACKAGE = Path(__file__).resolve().parents[1]
"""The fedmc_flwr package: an installed wheel's, or a checkout's."""
APP_CONFIG = "flower_app.toml"
"""pyproject.toml's copy inside an installed wheel's package (setup.py puts it there)."""


def app_pyproject() -> Path:
    """The Flower app's pyproject.toml (`[tool.flwr.app]`: components and run config): the
    copy an installed wheel carries in the package, else the checkout's own at its root."""
    packaged = PACKAGE / APP_CONFIG
    if packaged.is_file():
        return packaged
    checkout = PACKAGE.parent / "pyproject.toml"
    if checkout.is_file() and "[tool.flwr.app]" in checkout.read_text():
        return checkout
    raise RunError(
        f"{PACKAGE}: holds no {APP_CONFIG} (the Flower app's config) and is not in a "
        "fedmc-flwr checkout; reinstall fedmc-flwr from its wheel"
    )


def stage_app(dest: Path) -> Path:
    """The Flower app in `dest`: its pyproject.toml (`app_pyproject`) and the package's
    sources, wherever the package is installed.

    Why a copy: `flwr run` builds its app bundle by walking and resolving every file under
    the app directory before filtering, so from a checkout with its `.venv` inside (some
    60,000 files) the build alone took 10 s of every run. The bundle needs only these
    files, and an installed package has no project directory to start from.
    """
    dest.mkdir(parents=True)
    shutil.copy2(app_pyproject(), dest / "pyproject.toml")
    shutil.copytree(PACKAGE, dest / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


class Engine(Protocol):
    """Where the rounds run: the SuperLink and its nodes, started for one run."""

    def describe(self) -> str: ...

    def federation_config(self) -> str | None:
        """`flwr run --federation-config`, for the simulation engine only."""

    def client_state_dir(self, out: Path) -> str:
        """Run-config `client-state-dir`: where nodes without a `state-dir` of their own
        keep their regions' learners ("" for the node's working directory)."""

    def node_count(self) -> int:
        """The nodes the run's regions are shared over (client p serves p, p + n, ...)."""

    def start(self, launch: Launch, joins: Sequence[int]) -> None:
        """Start everything round 1 needs into `launch.processes` (`joins[k]`: the round
        node k joins in) and write the connection into `launch.home`."""

    def join(self, launch: Launch, node: int) -> None:
        """Start node `node` mid-run, for the next round."""

    def node_keys(self, launch: Launch) -> list[Path]:
        """Each node's authenticated public key file in partition order, or [] where the
        server assigns the nodes their partitions itself (`federation.identity`)."""


def node_joins(cfg: ExperimentConfig, nodes: int) -> list[int]:
    """The round each of `nodes` nodes joins in: its earliest region's (1 for a node
    serving no region)."""
    return [
        min((join_round(cfg, r) for r in regions_of(k, nodes, cfg.world.regions)), default=1)
        for k in range(nodes)
    ]


def ray_cpus(nodes: int, cores: int) -> int:
    """How many CPUs Ray is told this machine has, so how many virtual clients train at
    once (each asks one; Flower makes one actor per CPU): the cores, unless the nodes do
    not share out evenly over them; then the fewest actors over which they do, at most
    one per node. Evenly: every wave of clients but a last one of at least `cores` fills
    the actors. Why: 3 regions on 2 cores, two at a time, take two regions' time a round
    with one core idle for half of it; three at once share both cores and take 1.5. A
    region's result does not depend on which actor runs it, or beside how many."""
    if nodes <= cores:
        return cores
    return next(a for a in range(cores, nodes + 1) if nodes % a == 0 or nodes % a >= cores)


def machine_cores() -> int:
    """The cores this process may run on (what Ray counts on a machine of its own)."""
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class SimulationEngine:
    """Flower's simulation engine: virtual clients in Ray, one CPU each, on this machine,
    so every virtual node keeps its regions' learners in the experiment's `clients/`.
    Ray counts `ray_cpus` CPUs, unless `RAY_ADDRESS` names a cluster of someone's own,
    whose nodes say how many CPUs they have."""

    supernodes: int

    def describe(self) -> str:
        return f"{self.supernodes} virtual clients"

    def federation_config(self) -> str | None:
        clients = f"num-supernodes={self.supernodes} client-resources-num-cpus=1"
        if os.environ.get("RAY_ADDRESS"):
            return clients  # Ray refuses a CPU count when it joins a running cluster
        return f"{clients} init-args-num-cpus={ray_cpus(self.supernodes, machine_cores())}"

    def client_state_dir(self, out: Path) -> str:
        return str(out / "clients")

    def node_count(self) -> int:
        return self.supernodes

    def start(self, launch: Launch, joins: Sequence[int]) -> None:
        """The SuperLink; its virtual nodes all start with the run (a late region's node
        serves it from its join round)."""
        launch.start_superlink(simulation=True)

    def join(self, launch: Launch, node: int) -> None:
        """Nothing to start: every virtual node is there from round 1."""

    def node_keys(self, launch: Launch) -> list[Path]:
        return []  # virtual nodes: the server assigns them by rank


def key_print(public_key: Path) -> str:
    """A node's public key file as the run config lists it (`identity.fingerprint`)."""
    return fingerprint(public_key.read_bytes())


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _final_status(
    run_id: str,
    out: Path,
    env: dict[str, str],
    cwd: Path,
    processes: FlowerProcesses,
    stream: subprocess.Popen,
    deadline: float,
    on_poll: Callable[[], None],
) -> str:
    """Wait for the run to finish, calling `on_poll` every few seconds; return its status
    text from `flwr list`, or `deadline` when the run's deadline (a `time.monotonic`
    value) passes first.

    A run whose ServerApp recorded its last round (`run_completed`) is done: every result is
    written, and what Flower still does (shutting its simulation or nodes down, some 5 s,
    before it ends the log stream) is left to the stop that follows; the stream gets
    `LOG_GRACE_S` to relay the last lines first. Otherwise the log stream ends with the
    run, so `flwr list` (a whole CLI start each) is asked only then, and again every few
    seconds if the stream ended early (a lost connection).
    """
    while True:
        processes.refresh()
        on_poll()
        if run_completed(out, run_id):
            with suppress(subprocess.TimeoutExpired):
                stream.wait(timeout=LOG_GRACE_S)
            return "finished:completed"
        if time.monotonic() > deadline:
            return "deadline"
        try:
            stream.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            continue
        runs = flwr(["list", CONNECTION, "--run-id", run_id], env, cwd).get("runs") or []
        status = str(runs[0]["status"]) if runs else "unknown"
        if status.startswith("finished"):
            return status
        time.sleep(POLL_S)


def _relay_and_keep(lines: Iterable[str], tty: bool, log_path: Path, mode: str) -> None:
    """`console.relay` to this process's stdout, every line also in `log_path`, opened
    with `mode`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open(mode, encoding="utf-8") as log:
        relay(lines, sys.stdout, tty, log)


def _stream_log(
    processes: FlowerProcesses,
    run_id: str,
    env: dict[str, str],
    cwd: Path,
    tty: bool,
    log_path: Path,
    resume: bool,
) -> tuple[subprocess.Popen, threading.Thread]:
    """`flwr log --stream` of the run, relayed line by line to this process's stdout
    (`console.relay`) and kept whole in `log_path` (appended to when the run resumes), by
    a thread that ends with the stream."""
    stream = processes.start(
        [str(BIN / "flwr"), "log", run_id, CONNECTION, "--stream"],
        env={**env, "PYTHONUNBUFFERED": "1"},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    mode = "a" if resume else "w"
    relaying = threading.Thread(
        target=_relay_and_keep, args=(stream.stdout, tty, log_path, mode), daemon=True
    )
    relaying.start()
    return stream, relaying


def _failure(out: Path) -> str:
    """Why the run stopped, as the ServerApp recorded it, if it did."""
    try:
        status = json.loads((out / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return ""
    return str(status.get("reason", "")) if status.get("state") == "failed" else ""


def _completed_round(out: Path) -> int:
    """The last round the run recorded as completed (0 before the first)."""
    try:
        return int(json.loads((out / PROGRESS_FILE).read_text())["completed_round"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


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
    # Only a resume reads a checkpoint against the network's shapes, which needs torch: a
    # fresh or overwritten run's process never imports it (about 1.5 s of its start).
    from fedmc_flwr.federation.resume import resume_point
    from fedmc_flwr.federation.server_app import initial_weights

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
    engine: Engine | None = None,
) -> int:
    """Run one experiment (YAML + dotted overrides) through Flower.

    `engine` defaults to the simulation engine with `num_supernodes` virtual clients (one
    per region by default); `on_existing` says what to do when the experiment already
    holds results ('refuse', 'overwrite' or 'resume'). Returns 0 when the run completed
    (and its plots are drawn), 1 when it failed or hit its deadline (every finished round
    is kept), 2 when an existing experiment was refused. A run that stops before it wrote
    anything leaves no empty experiment directory behind.
    """
    cfg = load_config(config_path, overrides)
    spaced = [item for item in overrides if len(item.split()) != 1]
    if spaced:
        raise ConfigError(f"override {spaced[0]!r}: values with spaces cannot be passed to Flower")
    out = experiment_path(cfg.results_dir, cfg.name)
    created = [path for path in (out, *out.parents) if not path.exists()]
    try:
        output_dir(out, "results_dir")
        return _run(cfg, out, config_path, overrides, on_existing, engine, num_supernodes)
    finally:
        for path in created:  # the deepest first; one that holds anything stays
            with suppress(OSError):
                path.rmdir()


def _run(
    cfg: ExperimentConfig,
    out: Path,
    config_path: Path,
    overrides: list[str],
    on_existing: str,
    engine: Engine | None,
    num_supernodes: int | None,
) -> int:
    """`run_federation` once the experiment directory exists."""
    stale = stop_stale(out / REGISTRY)
    if stale:
        print(f"fedmc: stopped {stale} processes a killed earlier run left behind", flush=True)
    settled = _settle_existing(cfg, out, on_existing)
    if settled is not None:
        return settled
    engine = engine or SimulationEngine(num_supernodes or cfg.world.regions)
    warm_cache()  # compile once here, so that no client compiles in round 1
    two_tier_kernels.warm_cache()
    processes = FlowerProcesses(out / REGISTRY)
    deadline = time.monotonic() + (cfg.federation.deadline_s or float("inf"))
    with tempfile.TemporaryDirectory(prefix="fedmc-flwr-") as tmp, stop_requests() as stop:
        home = Path(tmp)
        app = stage_app(home / "app-source")
        tty = sys.stdout.isatty()
        env = {**flower_env(home), **plain_env(tty)}
        relaying: threading.Thread | None = None
        try:
            processes.guard()
            joins = node_joins(cfg, engine.node_count())
            launch = Launch(processes, env, home, app, out)
            engine.start(launch, joins)
            waiting = {k for k, due in enumerate(joins) if due > 1}

            def between_polls() -> None:
                """Honour a stop signal, and start each late node once the round before
                its own is done."""
                stop.check()
                done = _completed_round(out)
                for node in sorted(k for k in waiting if joins[k] <= done + 1):
                    print(f"fedmc: node {node} joins for round {joins[node]}", flush=True)
                    engine.join(launch, node)
                    waiting.discard(node)

            run_config = home / "run-config.toml"
            run_config.write_text(
                f"config = {_toml_string(str(Path(config_path).resolve()))}\n"
                f"overrides = {_toml_string(' '.join(overrides))}\n"
                f"results-dir = {_toml_string(str(out.parent))}\n"
                f"on-existing = {_toml_string(on_existing)}\n"
                f"owner = {_toml_string(owner_token())}\n"
                f"client-state-dir = {_toml_string(engine.client_state_dir(out))}\n"
                f"node-joins = {_toml_string(' '.join(map(str, joins)) if waiting else '')}\n"
                f"node-keys = {_toml_string(' '.join(map(key_print, engine.node_keys(launch))))}\n"
            )
            federation = engine.federation_config()
            started = flwr(
                [
                    "run",
                    str(app),
                    CONNECTION,
                    "--run-config",
                    str(run_config),
                    *(["--federation-config", federation] if federation else []),
                ],
                env,
                app,
            )
            run_id = str(started["run-id"])
            print(
                f"fedmc: run {run_id}: {cfg.name}, {cfg.world.regions} regions on "
                f"{engine.describe()}, {cfg.train.rounds} rounds",
                flush=True,
            )
            stream, relaying = _stream_log(
                processes, run_id, env, app, tty, out / RUN_LOG, on_existing == "resume"
            )
            status = _final_status(
                run_id, out, env, app, processes, stream, deadline, between_polls
            )
        finally:
            processes.stop()
            if relaying is not None:
                relaying.join(timeout=POLL_S)
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
    print(finish(out))
    return 0
