"""What a run exposes, and what it leaves behind when it is killed.

One real `fedmc run` (the tiny federation, through Flower's simulation engine and Ray) and
one `fedmc deploy` (SuperLink and SuperNodes) are watched from outside while they train:
every socket any process of the family listens on must be loopback, and Ray's GCS must
refuse a client that does not hold the run's token (and answer one that does, so the
refusal is the token's doing). Then the runner is killed outright (SIGKILL): within a
short wait no process of its family may be left, Ray's helpers included. The token file
itself is checked without Flower.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import psutil
import pytest
from flower_runs import TINY, processes_with_env

from fedmc_flwr.federation.superlink import RAY_ENV, flower_env
from fedmc_flwr.integrations.prometheus import is_loopback

GCS_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""A GCS call any Ray client makes first; an empty request is valid."""
REAP_WAIT_S = 20.0


def _listening(pids: list[int]) -> dict[int, tuple[str, set[str]]]:
    """pid -> (process name, `ip:port` of each socket it listens on)."""
    found = {}
    for pid in pids:
        try:
            process = psutil.Process(pid)
            ports = {
                f"{c.laddr.ip}:{c.laddr.port}"
                for c in process.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            }
            found[pid] = (process.name(), ports)
        except psutil.Error:
            continue
    return found


def _gcs_answer(port: int, token: str | None) -> grpc.StatusCode:
    """The status of one GCS call to 127.0.0.1:`port`, with `token` or without one."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            channel.unary_unary(GCS_PROBE)(b"", metadata=metadata, timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


ENGINES = {
    "run": ([], {"gcs_server", "raylet", "flwr-simulation"}),
    "deploy": (["--insecure", "--no-node-auth"], {"flower-supernod"}),
}
"""Subcommand -> its extra arguments, and (some of) the processes that must be seen
listening, by name as the kernel shortens it."""


@pytest.mark.flower
@pytest.mark.slow
@pytest.mark.parametrize("subcommand", sorted(ENGINES))
def test_a_run_listens_on_loopback_locks_ray_and_dies_whole(
    tmp_path: Path, subcommand: str
) -> None:
    out = tmp_path / "tiny_federation"
    extra, listeners = ENGINES[subcommand]
    command = [sys.executable, "-m", "fedmc_flwr.cli", subcommand, "--config", str(TINY)]
    command += ["--set", f"results_dir={tmp_path}", "--set", "train.rounds=6", *extra]
    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # Ray's socket paths are short
        marker = f"TMPDIR={short}"
        runner = subprocess.Popen(command, env={**os.environ, "TMPDIR": short})
        try:
            listening: dict[int, tuple[str, set[str]]] = {}
            progress = out / "progress.json"
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and runner.poll() is None:
                for pid, (name, ports) in _listening(processes_with_env(marker)).items():
                    listening.setdefault(pid, (name, set()))[1].update(ports)
                if progress.exists() and json.loads(progress.read_text())["completed_round"]:
                    break
                time.sleep(0.5)
            assert runner.poll() is None, "the run ended before it could be watched"
            names = {name for name, ports in listening.values() if ports}
            assert listeners <= names, names
            assert any(name.startswith("flower-superl") for name in names), names
            wide = {
                f"{name} ({pid}): {port}"
                for pid, (name, ports) in listening.items()
                for port in ports
                if not is_loopback(port.rsplit(":", 1)[0])
            }
            assert not wide, f"listening beyond loopback: {sorted(wide)}"

            if subcommand == "run":
                _check_ray_refuses_strangers(listening)
        finally:
            runner.send_signal(signal.SIGKILL)
            runner.wait()
        left: list[int] = []
        deadline = time.monotonic() + REAP_WAIT_S
        while time.monotonic() < deadline:
            left = [p for p in processes_with_env(marker) if p != os.getpid()]
            if not left:
                break
            time.sleep(0.5)
        survivors = []
        for pid in left:
            try:
                survivors.append(f"{psutil.Process(pid).name()} ({pid})")
            except psutil.Error:
                continue
            os.kill(pid, signal.SIGKILL)  # do not leave them to the rest of the suite
        assert not survivors, f"alive {REAP_WAIT_S:g} s after the runner's SIGKILL: {survivors}"


def _check_ray_refuses_strangers(listening: dict[int, tuple[str, set[str]]]) -> None:
    """Ray's GCS answers only the run's token; Ray's helpers were up to be seen."""
    gcs = next(pid for pid, (name, _) in listening.items() if name == "gcs_server")
    environ = psutil.Process(gcs).environ()
    token = Path(environ["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
    for port in {int(p.rsplit(":", 1)[1]) for p in listening[gcs][1]}:
        assert _gcs_answer(port, None) == grpc.StatusCode.UNAUTHENTICATED
        assert _gcs_answer(port, "0" * len(token)) == grpc.StatusCode.UNAUTHENTICATED
        assert _gcs_answer(port, token) == grpc.StatusCode.OK
    commands = []
    for pid in listening:
        try:
            commands.append(" ".join(psutil.Process(pid).cmdline()))
        except psutil.Error:
            continue
    assert any("ray::" in c or "dashboard/agent" in c for c in commands), commands


def test_each_run_gets_a_fresh_private_ray_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "inherited")
    tokens = []
    for k in range(2):
        home = tmp_path / str(k)
        home.mkdir()
        env = flower_env(home)
        assert {key: env[key] for key in RAY_ENV} == RAY_ENV
        assert "RAY_AUTH_TOKEN" not in env  # it would win over the run's own file
        path = Path(env["RAY_AUTH_TOKEN_PATH"])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        tokens.append(path.read_text())
        assert len(tokens[-1]) == 64
        with pytest.raises(FileExistsError):
            flower_env(home)  # a token file is never reused
    assert tokens[0] != tokens[1]
    captured = capsys.readouterr()
    assert not any(t in captured.out + captured.err for t in tokens)


def test_a_cluster_of_the_users_own_keeps_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RAY_ADDRESS joins a cluster someone started (README, "Scaling out"): its owner chose
    its addresses and authentication, so the run adds neither."""
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "the cluster's")
    env = flower_env(tmp_path)
    added = set(env) - set(os.environ)
    assert not added & set(RAY_ENV), added
    assert env["RAY_AUTH_TOKEN"] == "the cluster's"
    assert "RAY_AUTH_TOKEN_PATH" not in env
    assert not list(tmp_path.iterdir())
