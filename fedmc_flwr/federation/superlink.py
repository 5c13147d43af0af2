"""Starting a SuperLink and talking to it through the `flwr` CLI, for both engines.

Flower's simulation and deployment engines are driven the same way: a SuperLink, a
private Flower home whose `config.toml` names one connection to it, and `flwr` CLI calls
with JSON output. Everything here runs Flower's own programs from this environment's
`bin` directory, with runtime dependency installation, telemetry and update checks off.

`flwr run .` (the README's Flower CLI) uses Flower's managed local SuperLink; the one
`start_local_superlink` starts in its place keeps Flower's home, Ray's token and the PID
file that `stop_local_superlink` stops it by inside the project.

The SuperLink listens on 127.0.0.1 only. The simulation engine's Ray cluster, started
inside Flower with arguments this package cannot pass, is held to loopback and locked by
the environment it inherits (`RAY_ENV`, `ray_token`; docs/security.md has the evidence).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import httpx

from fedmc_flwr.errors import InputError, RunFailure
from fedmc_flwr.federation.credentials import TlsFiles
from fedmc_flwr.federation.processes import (
    FlowerProcesses,
    record_pid,
    recorded_alive,
    stop_recorded,
)

CONNECTION = "fedmc"
"""Name of the SuperLink connection in the private Flower home."""
STARTUP_TIMEOUT_S = 30.0
BIN = Path(sys.executable).parent
FLOWER_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_DEDUP_LOGS": "0",
}
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "token",
}
"""Ray 2.55.1 binds its GCS, raylets, workers and agents to every interface unless its
node IP is loopback, and Flower's simulation engine offers no way to pass that IP to
`ray.init`. With multi-machine clusters switched off Ray takes 127.0.0.1 as its node IP
and binds every service there (the switch's name says Windows or macOS, but it is read on
every platform). Token authentication on top refuses any local process that does not hold
the run's token (`ray_token`), since loopback is open to every user of the machine."""
RAY_NO_IDLE_WORKERS = {"RAY_prestart_worker_first_driver": "0"}
"""Ray starts an idle worker per CPU when the first driver connects. Flower's actors carry
a runtime environment of their own (the driver's PYTHONPATH), so Ray starts fresh workers
for them, and the idle ones only cost their start: about 1 s of CPU each, every run."""
RAY_TOKEN_FILE = "ray-auth-token"
COLOUR_FORCING = ("FORCE_COLOR", "CLICOLOR_FORCE")
"""Set by Jupyter kernels; they make the `flwr` CLI colour its JSON output, which then does
not parse, so Flower's processes never see them."""


class RunError(RunFailure, RuntimeError):
    """Flower could not be started or driven (not a problem of the experiment itself)."""


@dataclass(frozen=True)
class Connection:
    """How the CLI and the SuperNodes reach the SuperLink: plain HTTP when `ca_certificate`
    is None, else HTTPS verified against that CA."""

    host: str
    port: int
    ca_certificate: Path | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Launch:
    """Where an engine starts one run's processes: the run's process family (stopped by
    PID at the end), their environment, the private Flower home, the directory they start
    from (the run's staged Flower app), and the experiment directory."""

    processes: FlowerProcesses
    env: dict[str, str]
    home: Path
    root: Path
    out: Path

    def start_superlink(
        self, *, simulation: bool, tls: TlsFiles | None = None, node_auth: bool = False
    ) -> None:
        """The run's SuperLink (`start_superlink`), made the private home's connection."""
        connection = start_superlink(
            self.processes,
            self.env,
            self.root,
            self.home / "superlink.log",
            simulation=simulation,
            tls=tls,
            node_auth=node_auth,
        )
        write_connection(self.home, connection)


def ray_token(home: Path) -> Path:
    """A fresh random Ray token in `home`, readable by its owner only; its path.

    Created with mode 0600 from the start (never a moment world-readable) and refused if
    the file already exists, so a token is never reused or read from someone else's file.
    The token itself is never printed or logged."""
    path = home / RAY_TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    return path


def ray_settings(home: Path) -> dict[str, str]:
    """Ray's environment for a run: loopback and a fresh token (`RAY_ENV`), and no idle
    workers (`RAY_NO_IDLE_WORKERS`), unless `RAY_ADDRESS` points the run at a cluster of
    the user's own (README, "Scaling out"), whose settings its owner chose when starting it."""
    if os.environ.get("RAY_ADDRESS"):
        return {}
    return {**RAY_ENV, **RAY_NO_IDLE_WORKERS, "RAY_AUTH_TOKEN_PATH": str(ray_token(home))}


def flower_env(home: Path) -> dict[str, str]:
    """The environment of every Flower process of a run: this one's, with a private home
    and Ray's settings (`ray_settings`); a token inherited from this environment would
    take precedence over the run's own file, so it is not passed on with them."""
    ray = ray_settings(home)
    inherited = {
        k: v
        for k, v in os.environ.items()
        if k not in COLOUR_FORCING and not (ray and k == "RAY_AUTH_TOKEN")
    }
    return {
        **inherited,
        **FLOWER_ENV,
        **ray,
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_connection(home: Path, connection: Connection) -> None:
    """The private Flower home's config.toml: one connection, the default."""
    security = (
        f"root-certificates = {json.dumps(str(connection.ca_certificate))}\n"
        if connection.ca_certificate
        else "insecure = true\n"
    )
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "{connection.address}"\n{security}'
    )


def read_connection(home: Path) -> Connection:
    """The connection `write_connection` put into `home` (a node started mid-run uses it)."""
    entry = tomllib.loads((home / "config.toml").read_text())["superlink"][CONNECTION]
    host, port = str(entry["address"]).rsplit(":", 1)
    certificate = entry.get("root-certificates")
    return Connection(host, int(port), Path(certificate) if certificate else None)


def start_superlink(
    processes: FlowerProcesses,
    env: dict[str, str],
    cwd: Path,
    log_file: Path,
    *,
    simulation: bool,
    tls: TlsFiles | None = None,
    node_auth: bool = False,
) -> Connection:
    """A SuperLink on a free loopback port, healthy; its ServerApps start in `cwd`."""
    port = free_port()
    security = (
        [
            "--ssl-certfile",
            str(tls.certificate),
            "--ssl-keyfile",
            str(tls.key),
            "--ssl-ca-certfile",
            str(tls.ca_certificate),
        ]
        if tls
        else ["--insecure"]
    )
    command = [
        str(BIN / "flower-superlink"),
        *security,
        *(["--simulation"] if simulation else []),
        *(["--enable-supernode-auth"] if node_auth else []),
        "--disable-runtime-dependency-installation",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-file",
        str(log_file),
    ]
    superlink = processes.start(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    connection = Connection("127.0.0.1", port, tls.ca_certificate if tls else None)
    _wait_healthy(connection, superlink, log_file)
    return connection


def _wait_healthy(connection: Connection, superlink: subprocess.Popen, log_file: Path) -> None:
    scheme = "https" if connection.ca_certificate else "http"
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=connection.ca_certificate)
        if connection.ca_certificate
        else True
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if superlink.poll() is not None:
            raise RunError(f"flower-superlink exited with {superlink.returncode}; see {log_file}")
        try:
            url = f"{scheme}://{connection.address}/health"
            if httpx.get(url, timeout=0.5, verify=verify).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RunError(f"flower-superlink not up within {STARTUP_TIMEOUT_S:.0f} s; see {log_file}")


def flwr(args: list[str], env: dict[str, str], cwd: Path) -> dict:
    """One `flwr` CLI call with JSON output, parsed; RunError unless it says success."""
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
        reply = json.loads(text)
    except json.JSONDecodeError:
        detail = (done.stderr.strip() or done.stdout.strip()).splitlines() or ["no output"]
        raise RunError(f"flwr {args[0]} failed (exit {done.returncode}): {detail[-1]}") from None
    if reply.get("success") is False:
        message = str(reply.get("error-message", "")).strip().splitlines() or ["no message"]
        raise RunError(f"flwr {' '.join(args[:2])} failed: {message[-1]}")
    return reply


LOCAL_PID_FILE = "local-superlink.pid"
"""In the Flower home: the local SuperLink `start_local_superlink` started, and when."""


class SuperLinkNotRecorded(InputError, RuntimeError):
    """`fedmc stop-superlink` with no SuperLink recorded in the Flower home."""


def local_home() -> Path:
    """The Flower home `flwr run .` uses: `$FLWR_HOME`, as Flower reads it, else `.flwr` in
    the working directory (the project's, where the README exports it), never the user's
    home directory."""
    return Path(os.environ.get("FLWR_HOME") or ".flwr").expanduser().resolve()


def start_local_superlink(home: Path) -> tuple[int, Connection]:
    """Start the SuperLink `flwr run .` would start itself (Flower's managed local one: its
    port, Control API and arguments), with what Flower's own start leaves out: Flower's
    files, Ray's token (`ray_settings`) and the PID file in `home`, no runtime install of
    the app's dependencies. Its ServerApps start in the working directory, as under
    `flwr run`. The PID and the connection once it is healthy.

    RunError when `home` already records a live one, or when something else answers on
    the port (`flwr run .` would use that one instead)."""
    from flwr.cli.constant import LOCAL_CONTROL_API_ADDRESS, LOCAL_SUPERLINK_HTTP_API_PORT

    pid_file = home / LOCAL_PID_FILE
    if recorded_alive(pid_file):
        raise RunError(f"{home} already has a running SuperLink; fedmc stop-superlink stops it")
    connection = Connection("127.0.0.1", int(LOCAL_SUPERLINK_HTTP_API_PORT))
    if _answers(connection):
        raise RunError(
            f"{connection.address} already answers as a SuperLink not started here, which "
            "flwr run . would use; stop it, or move both to another port with "
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT and FLWR_LOCAL_CONTROL_API_PORT"
        )
    files = home / "local-superlink"
    files.mkdir(parents=True, exist_ok=True)
    (home / RAY_TOKEN_FILE).unlink(missing_ok=True)  # a stopped SuperLink's: a fresh one
    log_file = files / "superlink.log"
    command = [
        str(BIN / "flower-superlink"),
        "--insecure",
        "--simulation",
        "--isolation",
        "subprocess",
        "--control-api-address",
        LOCAL_CONTROL_API_ADDRESS,
        "--disable-runtime-dependency-installation",
        "--host",
        connection.host,
        "--port",
        str(connection.port),
        "--log-file",
        str(log_file),
        "--database",
        str(files / "state.db"),
    ]
    superlink = subprocess.Popen(
        command,
        env=flower_env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # it outlives this command, as Flower's own does
    )
    record_pid(pid_file, superlink.pid)
    try:
        _wait_healthy(connection, superlink, log_file)
    except RunError:
        stop_recorded(pid_file)
        raise
    return superlink.pid, connection


def stop_local_superlink(home: Path) -> int:
    """Stop the SuperLink `start_local_superlink` recorded in `home` and what it started
    (its SuperExec, a simulation still running), by its PID file alone; how many processes
    were stopped (0: it had ended). Its Ray token goes with it."""
    try:
        stopped = stop_recorded(home / LOCAL_PID_FILE)
    except FileNotFoundError:
        raise SuperLinkNotRecorded(
            f"{home}: no SuperLink recorded (fedmc start-superlink records the one it starts)"
        ) from None
    (home / RAY_TOKEN_FILE).unlink(missing_ok=True)
    return stopped


def _answers(connection: Connection) -> bool:
    """Whether a SuperLink answers its health check at `connection` (plain HTTP)."""
    try:
        return httpx.get(f"http://{connection.address}/health", timeout=0.5).is_success
    except httpx.HTTPError:
        return False
