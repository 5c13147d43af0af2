"""`fedmc run` on a Ray cluster of two nodes started by hand (`ray_nodes.TwoNodes`: token
authentication on, every port pinned), with `RAY_ADDRESS` pointing the run at it. Ray's
own records (the GCS's node and actor tables and its task timeline) must show Flower's
ClientApp actors working on both nodes, the results must equal the reference run's byte
for byte, nothing may listen beyond loopback or outside the pinned ports, and both nodes
stop by the PIDs the test started. (Ray's `ray list` needs the dashboard, which needs
`ray[default]`; the lock holds plain `ray`, so the test reads the same GCS tables through
`ray.nodes`, `ray.timeline` and `ray._private.state.actors`.)"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

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
from ray_nodes import SECOND_NODE, STOP_WAIT_S, TwoNodes, cluster_env

QUERY = """
import json, ray
from ray._private import state
ray.init(logging_level="ERROR", log_to_driver=False)
print(json.dumps({"nodes": ray.nodes(), "actors": list(state.actors().values()),
                  "timeline": ray.timeline()}, default=str))
"""
"""Ray's records of the cluster, read by a driver of its own (it finds the cluster
through RAY_ADDRESS)."""


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
        cluster = TwoNodes(cluster_env(Path(short)))
        with ListenerWatch(f"TMPDIR={short}") as watch:
            try:
                with ray_start_slot(out / "progress.json"):
                    cluster.start(Path(short))
                    command = [sys.executable, "-m", "fedmc_flwr.cli", "run"]
                    command += ["--config", str(TINY_TRACED), "--set", f"results_dir={tmp_path}"]
                    run = subprocess.run(
                        command, env=cluster.run_env(), capture_output=True, text=True, timeout=900
                    )
                assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
                query = [sys.executable, "-c", QUERY]
                read = subprocess.run(
                    query,
                    env=cluster.run_env(),
                    cwd=short,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert read.returncode == 0, read.stderr[-4000:]
                records = json.loads(read.stdout.strip().splitlines()[-1])
                check_ray_refuses_strangers(watch.seen())
            finally:
                cluster.stop()
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
    assert ray_ports <= cluster.ports, sorted(ray_ports - cluster.ports)
