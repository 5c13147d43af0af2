"""A Ray cluster of two nodes on this machine's loopback, started by hand with `ray start`
as docs/deployment.md tells a user to start one on two machines: a head node, and a second
node that joins it with a custom resource of its own. Ray's token authentication is on
and every port a node opens is pinned.

Ray rewrites 127.0.0.1 and `localhost` in a `--node-ip-address`, `--address` or
`RAY_ADDRESS` into the machine's outward address unless `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`
is set, and it holds its sockets to loopback only when a node's IP is exactly 127.0.0.1.
The head and the run set the switch; `ray start --address` refuses to join a cluster with
it set, so the second node names the head as `127.0.0.01`, which Ray leaves alone and the
resolver reads as 127.0.0.1, and takes 127.0.0.1 as its own IP, the address it reaches the
head from."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from fedmc_flwr.federation.superlink import BIN, free_port, ray_token

LOOPBACK_SWITCH = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Makes Ray keep 127.0.0.1 as the node IP (see the module docstring)."""
HEAD_FROM_SECOND_NODE = "127.0.0.01"
"""127.0.0.1 spelt so that `ray start --address` does not rewrite it."""
SECOND_NODE = "second_node"
"""The custom resource only the second node has: how its records are told apart."""
WORKER_PORTS = 24
"""Ports pinned per node for its worker processes (and the run's driver on the head)."""
START_WAIT_S = 240.0
STOP_WAIT_S = 60.0


def port_block(size: int) -> int:
    """The first of `size` consecutive ports nobody listens on, below the ephemeral
    range from which `free_port` and the kernel pick."""
    while True:
        first = random.randrange(20000, 32000 - size)
        try:
            for port in range(first, first + size):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first


def pinned_ports(head: bool) -> tuple[list[str], dict[str, str], set[int]]:
    """`ray start` flags and environment that pin every port a node opens, and those
    ports. The head's autoscaler monitor serves its metrics on 44217 unless
    `AUTOSCALER_METRIC_PORT` says otherwise; no flag moves it."""
    named = ["node-manager", "object-manager", "runtime-env-agent"]
    named += ["dashboard-agent-grpc", "dashboard-agent-listen", "metrics-export"]
    named += ["ray-client-server"] if head else []
    ports = {name: free_port() for name in named}
    first = port_block(WORKER_PORTS)
    last = first + WORKER_PORTS - 1
    flags = [f"--{name}-port={port}" for name, port in ports.items()]
    flags += [f"--min-worker-port={first}", f"--max-worker-port={last}"]
    pinned = {*ports.values(), *range(first, last + 1)}
    env = {}
    if head:
        gcs, monitor = free_port(), free_port()
        flags.append(f"--port={gcs}")
        env["AUTOSCALER_METRIC_PORT"] = str(monitor)
        pinned |= {gcs, monitor}
    return flags, env, pinned


def ray_start(flags: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """`ray start --block`: the node's processes are its children, and it stops them when
    it is stopped. Returns once the node is up."""
    command = [str(BIN / "ray"), "start", "--block", "--disable-usage-stats", *flags]
    with log.open("w") as out:
        node = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_WAIT_S
    while "Ray runtime started" not in log.read_text():
        assert node.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.5)
    return node


def stop_node(node: subprocess.Popen) -> None:
    """SIGTERM to the node's `ray start`, then SIGKILL to whatever of its family is left
    `STOP_WAIT_S` later."""
    try:
        family = psutil.Process(node.pid).children(recursive=True)
    except psutil.Error:
        family = []
    node.send_signal(signal.SIGTERM)
    try:
        node.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        node.kill()
        node.wait()
    _, alive = psutil.wait_procs(family, timeout=STOP_WAIT_S)
    for process in alive:
        process.kill()


@dataclass
class TwoNodes:
    """The cluster's nodes (their `ray start --block`), in the order they started, and what
    a run needs to reach it."""

    env: dict[str, str]
    """A clean environment with the cluster's token and temporary directory."""
    address: str = ""
    """The head's GCS, for `RAY_ADDRESS`."""
    ports: set[int] = field(default_factory=set)
    """Every port the two nodes may listen on."""
    nodes: list[subprocess.Popen] = field(default_factory=list)

    def run_env(self) -> dict[str, str]:
        """The environment of a run on the cluster."""
        return self.env | LOOPBACK_SWITCH | {"RAY_ADDRESS": self.address}

    def start(self, root: Path) -> None:
        """Start the head (one CPU) and the second node (one CPU and `SECOND_NODE`), their
        files under `root`, which must be short (Ray's socket paths)."""
        head_flags, head_env, head_ports = pinned_ports(head=True)
        second_flags, second_env, second_ports = pinned_ports(head=False)
        gcs = next(f for f in head_flags if f.startswith("--port=")).split("=")[1]
        self.address = f"127.0.0.1:{gcs}"
        self.ports = head_ports | second_ports
        head = [
            "--head",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            "--include-dashboard=false",
            f"--temp-dir={root / 'head'}",
        ]
        env = self.env | head_env | LOOPBACK_SWITCH
        self.nodes.append(ray_start(head + head_flags, env, root / "head.log"))
        second = [
            f"--address={HEAD_FROM_SECOND_NODE}:{gcs}",
            "--num-cpus=1",
            f'--resources={{"{SECOND_NODE}": 1}}',
            f"--temp-dir={root / 'second'}",
        ]
        env = self.env | second_env
        self.nodes.append(ray_start(second + second_flags, env, root / "second.log"))

    def stop(self) -> None:
        """Stop every node started, the last first."""
        for node in reversed(self.nodes):
            stop_node(node)


def cluster_env(root: Path) -> dict[str, str]:
    """This process's environment without its Ray settings, with a fresh token in `root`
    and `root` as the temporary directory."""
    token = ray_token(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return env | {"TMPDIR": str(root), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
