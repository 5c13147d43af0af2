"""Flower's deployment engine on one machine: a SuperLink and one SuperNode per node.

`fedmc deploy` runs an experiment the way separate sites would, on 127.0.0.1: one
`flower-superlink` (without `--simulation`) and `nodes` `flower-supernode` processes,
each its own site with `--node-config "partition-id=K num-partitions=N state-dir=..."`.
By default the links use TLS (a CA made for the run) and the SuperLink admits only the
SuperNodes whose keys were registered with `flwr supernode register`
(`--enable-supernode-auth`); `tls=False` and `node_auth=False` give a quick plain run.

Each SuperNode keeps its regions' learner state in its own `state-dir`
(`<experiment>/nodes/node-K/`), which stands for a disk on that site: the ServerApp never
names a path on a node. Each node's log (the messages it served) goes to
`<experiment>/nodes/node-K.log`. The runner stops every process started here by PID.

The same programs across machines are in the README ("Scaling out").
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedmc_flwr.federation.credentials import NodeKey, make_node_key, make_tls
from fedmc_flwr.federation.processes import FlowerProcesses
from fedmc_flwr.federation.superlink import (
    BIN,
    CONNECTION,
    Connection,
    Launch,
    RunError,
    flwr,
    free_port,
    read_connection,
)

NODES_DIR = "nodes"
"""Inside the experiment directory: one state folder and one log per SuperNode."""
ONLINE_TIMEOUT_S = 60.0
POLL_S = 0.5


def node_config(partition: int, partitions: int, state_dir: Path) -> str:
    """A SuperNode's `--node-config`: its partition (which regions it serves) and where it
    keeps their learner state."""
    return f'partition-id={partition} num-partitions={partitions} state-dir="{state_dir}"'


def start_supernode(
    processes: FlowerProcesses,
    env: dict[str, str],
    connection: Connection,
    config: str,
    cwd: Path,
    log_file: Path,
    private_key: Path | None = None,
    max_retries: int | None = None,
) -> subprocess.Popen:
    """One `flower-supernode` connected to `connection`, and its ClientApp launcher
    (`forking_exec`, in place of Flower's per-message processes), their output in
    `log_file`; the SuperNode's process."""
    security = (
        ["--root-certificates", str(connection.ca_certificate)]
        if connection.ca_certificate
        else ["--insecure"]
    )
    runtime_port = free_port()
    command = [
        str(BIN / "fedmc-supernode"),  # Flower's, with shorter waits (prompt_supernode)
        *security,
        "--superlink",
        connection.address,
        "--host",
        "127.0.0.1",  # its Runtime API serves this node's own ClientApps only
        "--port",
        str(runtime_port),
        "--isolation",
        "process",  # its ClientApps come from the launcher below
        "--node-config",
        config,
        *(["--auth-supernode-private-key", str(private_key)] if private_key else []),
        *(["--max-retries", str(max_retries)] if max_retries is not None else []),
    ]
    cwd.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        node = processes.start(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        launcher = [
            sys.executable,
            "-m",
            "fedmc_flwr.federation.forking_exec",
            "--runtime-api-address",
            f"127.0.0.1:{runtime_port}",
            "--parent-pid",
            str(node.pid),
        ]
        processes.start(launcher, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return node


def online_nodes(env: dict[str, str], cwd: Path) -> int:
    """How many SuperNodes the SuperLink of the private home sees online."""
    nodes = flwr(["supernode", "list", CONNECTION], env, cwd).get("nodes") or []
    return sum(1 for node in nodes if node.get("status") == "online")


@dataclass(frozen=True)
class DeploymentEngine:
    """`nodes` SuperNodes on loopback (see the module docstring)."""

    nodes: int
    tls: bool = True
    node_auth: bool = True

    def describe(self) -> str:
        security = ", ".join(
            ["TLS" if self.tls else "plain HTTP", *(["node auth"] if self.node_auth else [])]
        )
        return f"{self.nodes} SuperNodes ({security})"

    def federation_config(self) -> str | None:
        return None

    def client_state_dir(self, out: Path) -> str:
        return ""  # each SuperNode names its own

    def node_count(self) -> int:
        return self.nodes

    def start(self, launch: Launch, joins: Sequence[int]) -> None:
        """SuperLink, then the SuperNodes of round 1 (`joins[k]`: node k's round), their
        keys registered, online. A later node starts in `join`."""
        tls = make_tls(launch.home / "tls", ["127.0.0.1", "localhost"]) if self.tls else None
        launch.start_superlink(simulation=False, tls=tls, node_auth=self.node_auth)
        first = [k for k in range(self.nodes) if joins[k] <= 1]
        started = [self._start_node(launch, k) for k in first]
        deadline = time.monotonic() + ONLINE_TIMEOUT_S
        while online_nodes(launch.env, launch.root) < len(first):
            for node, log_file in started:
                if node.poll() is not None:
                    raise RunError(f"a SuperNode exited with {node.returncode}; see {log_file}")
            if time.monotonic() > deadline:
                raise RunError(f"SuperNodes not online within {ONLINE_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)

    def join(self, launch: Launch, node: int) -> None:
        """SuperNode `node`, its key registered; the round it is due in waits for it."""
        self._start_node(launch, node)

    def node_keys(self, launch: Launch) -> list[Path]:
        """Each node's public key file, in partition order (made now if not yet): the
        ServerApp ties every node to its partition by it (run-config `node-keys`)."""
        return [self._key(launch, k).public for k in range(self.nodes)] if self.node_auth else []

    def _key(self, launch: Launch, k: int) -> NodeKey:
        """SuperNode `k`'s key pair, made on first use."""
        made = NodeKey(
            launch.home / "keys" / f"node-{k}.key", launch.home / "keys" / f"node-{k}.pub"
        )
        return made if made.public.is_file() else make_node_key(launch.home / "keys", f"node-{k}")

    def _start_node(self, launch: Launch, k: int) -> tuple[subprocess.Popen, Path]:
        """SuperNode `k` (its key made and registered first), and its log file."""
        key = None
        if self.node_auth:
            key = self._key(launch, k)
            flwr(["supernode", "register", str(key.public), CONNECTION], launch.env, launch.root)
        sites = launch.out / NODES_DIR
        log_file = sites / f"node-{k}.log"
        connection = read_connection(launch.home)
        node = start_supernode(
            launch.processes,
            launch.env,
            connection,
            node_config(k, self.nodes, sites / f"node-{k}"),
            sites / f"node-{k}",
            log_file,
            key.private if key else None,
        )
        return node, log_file
