"""A node of the Ray cluster lost mid-round costs the messages it was serving, not the run
(`federation/ray_pool.py`): on a two-node cluster (`ray_nodes.TwoNodes`), the second
node's processes are all killed, as a machine that loses power, while round 2 trains.
The run must end exit 0 with its table, the lost messages recorded as `failed` rows that
say the node left, every later round must serve every region from the surviving node,
and the console must carry no traceback (those and Ray's own words are in run.log)."""

from __future__ import annotations

import contextlib
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from conftest import TINY
from flower_runs import ray_start_slot
from ray_nodes import TwoNodes, cluster_env

ROUNDS = 3
STEPS_PER_ROUND = 2048
"""Enough training for round 2 to be under way when the node goes."""
KILL_AFTER_S = 2.0
"""After round 1 is recorded: round 2's training has begun on both nodes."""
RUN_TIMEOUT_S = 900


def kill_node(node: subprocess.Popen) -> None:
    """SIGKILL a node's `ray start` and every process under it, all at once."""
    family = [*psutil.Process(node.pid).children(recursive=True), psutil.Process(node.pid)]
    for process in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    node.wait()


def wait_for_round_1(progress: Path, run: subprocess.Popen) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not progress.exists() or json.loads(progress.read_text())["completed_round"] < 1:
        assert run.poll() is None, "the run ended before round 1 was recorded"
        assert time.monotonic() < deadline, "round 1 was not recorded in time"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.flower
@pytest.mark.timeout(1500)  # two Ray nodes start before the run, on two shared cores
def test_a_run_outlives_a_ray_node_killed_mid_round(tmp_path: Path) -> None:
    out = tmp_path / "tiny_federation"
    console = tmp_path / "console.txt"
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="fedmc-ray-") as short:
        cluster = TwoNodes(cluster_env(Path(short)))
        try:
            with ray_start_slot(out / "progress.json"):
                cluster.start(Path(short))
                command = [sys.executable, "-m", "fedmc_flwr.cli", "run", "--config", str(TINY)]
                for setting in (
                    f"results_dir={tmp_path}",
                    f"train.rounds={ROUNDS}",
                    f"train.steps_per_round={STEPS_PER_ROUND}",
                ):
                    command += ["--set", setting]
                with console.open("w") as sink:
                    run = subprocess.Popen(
                        command, env=cluster.run_env(), stdout=sink, stderr=subprocess.STDOUT
                    )
                wait_for_round_1(out / "progress.json", run)
            time.sleep(KILL_AFTER_S)
            kill_node(cluster.nodes[1])
            code = run.wait(RUN_TIMEOUT_S)
        finally:
            cluster.stop()
    printed = console.read_text()
    assert code == 0, printed[-4000:]
    with (out / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    failed = [r for r in rows if r["phase"] == "failed"]
    assert failed, printed[-4000:]
    assert {r["round"] for r in failed} == {"2"}, failed
    assert all("Ray node left the cluster" in r["reason"] for r in failed), failed
    regions = {r["client"] for r in rows if r["phase"] == "eval" and r["round"] == "1"}
    for later in map(str, range(3, ROUNDS + 1)):
        served = {r["client"] for r in rows if r["phase"] == "eval" and r["round"] == later}
        assert served >= regions, (later, served, regions)
    assert "Traceback" not in printed, printed[-4000:]
    assert f"details (tracebacks, Ray's words) are in {out / 'run.log'}" in printed
    assert "Ray says:" in (out / "run.log").read_text()
    assert "reward: higher is better" in printed  # the run's closing table
