"""What a run exposes, and what it leaves behind when it is killed.

A run is watched from outside while it trains: every socket any process of the family
listens on must be loopback, and under the simulation engine Ray's GCS must refuse a
client that does not hold the run's token (and answer one that does, so the refusal is
the token's doing). Then the runner is killed outright (SIGKILL): within a short wait no
process of its family may be left, Ray's helpers included. Here one `fedmc deploy`
(SuperLink and SuperNodes) is watched; the `fedmc run` that test_kill_and_resume kills after
round 1 (and resumes) is watched with the checks here. The token file itself is checked
without Flower.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import psutil
import pytest
from flower_runs import TINY, beyond_loopback, survivors_of_sigkill, watch_to_first_round

from fedmc_flwr.federation.superlink import RAY_ENV, RAY_NO_IDLE_WORKERS, flower_env

GCS_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""A GCS call any Ray client makes first; an empty request is valid."""
REAP_WAIT_S = 20.0
"""How long a killed runner's family may take to go."""


def _gcs_answer(port: int, token: str | None) -> grpc.StatusCode:
    """The status of one GCS call to 127.0.0.1:`port`, with `token` or without one."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            channel.unary_unary(GCS_PROBE)(b"", metadata=metadata, timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def check_ray_refuses_strangers(seen: dict[int, tuple[str, set[str]]]) -> None:
    """Ray's GCS answers only the run's token; Ray's helpers were up to be seen."""
    gcs = next(pid for pid, (name, _) in seen.items() if name == "gcs_server")
    environ = psutil.Process(gcs).environ()
    token = Path(environ["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
    for port in {int(p.rsplit(":", 1)[1]) for p in seen[gcs][1]}:
        assert _gcs_answer(port, None) == grpc.StatusCode.UNAUTHENTICATED
        assert _gcs_answer(port, "0" * len(token)) == grpc.StatusCode.UNAUTHENTICATED
        assert _gcs_answer(port, token) == grpc.StatusCode.OK
    commands = []
    for pid in seen:
        try:
            commands.append(" ".join(psutil.Process(pid).cmdline()))
        except psutil.Error:
            continue
    assert any("ray::" in c or "dashboard/agent" in c for c in commands), commands


def check_listeners(seen: dict[int, tuple[str, set[str]]], expected: set[str]) -> None:
    """`expected` processes (by name as the kernel shortens it) and the SuperLink were
    seen listening, every one of them on loopback only."""
    names = {name for name, ports in seen.values() if ports}
    assert expected <= names, names
    assert any(name.startswith("flower-superl") for name in names), names
    wide = beyond_loopback(seen)
    assert not wide, f"listening beyond loopback: {sorted(wide)}"


@pytest.mark.flower
@pytest.mark.slow
def test_a_deployment_listens_on_loopback_and_dies_whole(tmp_path: Path) -> None:
    """The simulation engine's run gets the same watch in test_kill_and_resume."""
    command = [sys.executable, "-m", "fedmc_flwr.cli", "deploy", "--config", str(TINY)]
    command += ["--set", f"results_dir={tmp_path}", "--set", "train.rounds=6"]
    command += ["--insecure", "--no-node-auth"]
    with tempfile.TemporaryDirectory(dir="/tmp") as short:
        marker = f"TMPDIR={short}"
        runner = subprocess.Popen(command, env={**os.environ, "TMPDIR": short})
        try:
            seen = watch_to_first_round(
                runner, marker, tmp_path / "tiny_federation" / "progress.json"
            )
            assert runner.poll() is None, "the run ended before it could be watched"
            check_listeners(seen, {"flower-supernod"})
        finally:
            survivors = survivors_of_sigkill(runner, marker, REAP_WAIT_S)
        assert not survivors, f"alive {REAP_WAIT_S:g} s after the runner's SIGKILL: {survivors}"


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
        assert env.items() >= RAY_NO_IDLE_WORKERS.items()
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
    its addresses, authentication and workers, so the run adds none of its own."""
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "the cluster's")
    env = flower_env(tmp_path)
    added = set(env) - set(os.environ)
    assert not added & (set(RAY_ENV) | set(RAY_NO_IDLE_WORKERS)), added
    assert env["RAY_AUTH_TOKEN"] == "the cluster's"
    assert "RAY_AUTH_TOKEN_PATH" not in env
    assert not list(tmp_path.iterdir())
