"""`fedmc run` on a Ray cluster of two nodes started by hand with `ray start`, as
docs/deployment.md tells a user to start one on two machines, here both on this
machine's loopback: a head node, and a second node that joins it with a custom resource
of its own. Ray's token authentication is on, every port a node opens is pinned, and
`RAY_ADDRESS` points the run at the cluster. Ray's own records (the GCS's node and actor
tables and its task timeline) must show Flower's ClientApp actors working on both nodes,
the results must equal the reference run's byte for byte, nothing may listen beyond
loopback or outside the pinned ports, and both nodes stop by the PIDs the test started.

Ray rewrites 127.0.0.1 and `localhost` in a `--node-ip-address`, `--address` or
`RAY_ADDRESS` into the machine's outward address unless `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`
is set, and it holds its sockets to loopback only when a node's IP is exactly 127.0.0.1.
The head and the run set the switch; `ray start --address` refuses to join a cluster with
it set, so the second node names the head as `127.0.0.01`, which Ray leaves alone and the
resolver reads as 127.0.0.1, and takes 127.0.0.1 as its own IP, the address it reaches the
head from. (Ray's `ray list` needs the dashboard, which needs `ray[default]`; the lock
holds plain `ray`, so the test reads the same GCS tables through `ray.nodes`,
`ray.timeline` and `ray._private.state.actors`.)"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
from conftest import TINY_TRACED
from flower_runs import (
    ListenerWatch,
    beyond_loopback,
    check_listeners,
    check_ray_refuses_strangers,
    processes_with_env,
    ray_start_slot,
)

from fedmc_flwr.federation.superlink import BIN, free_port, ray_token

LOOPBACK_SWITCH = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Makes Ray keep 127.0.0.1 as the node IP (see the module's docstring)."""
HEAD_FROM_SECOND_NODE = "127.0.0.01"
"""127.0.0.1 spelt so that `ray start --address` does not rewrite it."""
SECOND_NODE = "second_node"
"""The custom resource only the second node has: how its records are told apart."""
WORKER_PORTS = 24
"""Ports pinned per node for its worker processes (and the run's driver on the head)."""
START_WAIT_S = 240.0
STOP_WAIT_S = 60.0
QUERY = """
import json, ray
from ray._private import state
ray.init(logging_level="ERROR", log_to_driver=False)
print(json.dumps({"nodes": ray.nodes(), "actors": list(state.actors().values()),
                  "timeline": ray.timeline()}, default=str))
"""
"""Ray's records of the cluster, read by a driver of its own (it finds the cluster
through RAY_ADDRESS)."""


def _port_block(size: int) -> int:
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


def _pinned_ports(head: bool) -> tuple[list[str], dict[str, str], set[int]]:
    """`ray start` flags and environment that pin every port a node opens, and those
    ports. The head's autoscaler monitor serves its metrics on 44217 unless
    `AUTOSCALER_METRIC_PORT` says otherwise; no flag moves it."""
    named = ["node-manager", "object-manager", "runtime-env-agent"]
    named += ["dashboard-agent-grpc", "dashboard-agent-listen", "metrics-export"]
    named += ["ray-client-server"] if head else []
    ports = {name: free_port() for name in named}
    first = _port_block(WORKER_PORTS)
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


def _ray_start(flags: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
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


def _stop(node: subprocess.Popen) -> None:
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


@pytest.mark.slow
@pytest.mark.flower
@pytest.mark.timeout(1200)  # two Ray nodes start before the run, on two shared cores
def test_fedmc_run_uses_both_nodes_of_a_ray_cluster_started_by_hand(
    tiny_run: Path, tmp_path: Path
) -> None:
    """Both nodes run ClientApp actors, each actor executes Flower's `run` tasks, the
    tables equal the reference run's, and the cluster stays on loopback and its pinned
    ports, refusing a client without its token."""
    out = tmp_path / "tiny_traced"
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="fedmc-ray-") as short:
        # Ray's socket paths must stay short: a cluster of its own under /tmp.
        root = Path(short)
        token = ray_token(root)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env |= {"TMPDIR": short, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
        head_flags, head_env, head_ports = _pinned_ports(head=True)
        second_flags, second_env, second_ports = _pinned_ports(head=False)
        gcs = next(f for f in head_flags if f.startswith("--port=")).split("=")[1]
        address = f"127.0.0.1:{gcs}"
        nodes: list[subprocess.Popen] = []
        with ListenerWatch(f"TMPDIR={short}") as watch:
            try:
                with ray_start_slot(out / "progress.json"):
                    head = [
                        "--head",
                        "--node-ip-address=127.0.0.1",
                        "--num-cpus=1",
                        "--include-dashboard=false",
                        f"--temp-dir={root / 'head'}",
                    ]
                    nodes.append(
                        _ray_start(
                            head + head_flags, env | head_env | LOOPBACK_SWITCH, root / "head.log"
                        )
                    )
                    second = [
                        f"--address={HEAD_FROM_SECOND_NODE}:{gcs}",
                        "--num-cpus=1",
                        f'--resources={{"{SECOND_NODE}": 1}}',
                        f"--temp-dir={root / 'second'}",
                    ]
                    nodes.append(
                        _ray_start(second + second_flags, env | second_env, root / "second.log")
                    )
                    run_env = env | LOOPBACK_SWITCH | {"RAY_ADDRESS": address}
                    command = [sys.executable, "-m", "fedmc_flwr.cli", "run"]
                    command += ["--config", str(TINY_TRACED), "--set", f"results_dir={tmp_path}"]
                    run = subprocess.run(
                        command, env=run_env, capture_output=True, text=True, timeout=900
                    )
                assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
                query = [sys.executable, "-c", QUERY]
                read = subprocess.run(
                    query, env=run_env, cwd=root, capture_output=True, text=True, timeout=300
                )
                assert read.returncode == 0, read.stderr[-4000:]
                records = json.loads(read.stdout.strip().splitlines()[-1])
                check_ray_refuses_strangers(watch.seen())
            finally:
                for node in reversed(nodes):
                    _stop(node)
        seen = watch.seen()
        deadline = time.monotonic() + STOP_WAIT_S
        while (left := processes_with_env(f"TMPDIR={short}")) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"left running after both nodes stopped: {left}"

    alive = [n for n in records["nodes"] if n["Alive"]]
    assert len(alive) == 2, alive
    assert {n["NodeManagerAddress"] for n in alive} == {"127.0.0.1"}, alive
    second_id = next(n["NodeID"] for n in alive if SECOND_NODE in n["Resources"])
    head_id = next(n["NodeID"] for n in alive if n["NodeID"] != second_id)
    actors = [a for a in records["actors"] if a["ActorClassName"] == "ClientAppActor"]
    assert Counter(a["Address"]["NodeID"] for a in actors) == {head_id: 1, second_id: 1}
    assert all(a["NumRestarts"] == 0 for a in actors), actors
    runs = Counter(
        e["tid"] for e in records["timeline"] if e.get("cat") == "task::ClientAppActor.run"
    )
    assert len(runs) == len(actors), runs  # each actor's worker ran ClientApp messages

    for table in ("metrics.csv", "per_seed.csv"):
        assert (out / table).read_bytes() == (tiny_run / table).read_bytes(), table
    check_listeners(seen, {"gcs_server", "raylet", "flwr-simulation"})
    assert not beyond_loopback(seen)
    raylets = [pid for pid, (name, ports) in seen.items() if name == "raylet" and ports]
    assert len(raylets) == 2, seen
    ray_ports = {
        int(port.rsplit(":", 1)[1])
        for name, ports in seen.values()
        if not name.startswith("flower-")
        for port in ports
    }
    assert ray_ports <= head_ports | second_ports, sorted(ray_ports - head_ports - second_ports)
