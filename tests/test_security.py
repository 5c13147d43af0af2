"""What a run's Ray is given: a fresh private token per run, and none of its own settings
when it joins a cluster of the user's own. Watching real runs from outside (every socket
on loopback, Ray's GCS refusing strangers, nothing left after a SIGKILL or a Ctrl-C) is
done where those runs are made: test_kill_and_resume for the simulation engine,
test_deployment for the deployment engine (`flower_runs.ListenerWatch`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fedmc_flwr.federation.superlink import RAY_ENV, RAY_NO_IDLE_WORKERS, flower_env


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
