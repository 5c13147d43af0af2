"""The Kubernetes scaling hook against kmock's in-memory API server (no real cluster can
run here): dry run patches only with dryRun=All, live patches the scale, live without a
kubeconfig refuses before contacting anything."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from exported import REGIONS, apply_argv, exported_policy, integration_config

from fedmc_flwr.cli import main
from fedmc_flwr.integrations.config import KubernetesHook
from fedmc_flwr.integrations.decisions import Decisions
from fedmc_flwr.integrations.kubernetes import desired_replicas

DEPLOYMENTS = "apps/v1/deployments"


def test_replicas_follow_the_split_and_the_arrival_rates() -> None:
    decisions = Decisions(
        region_names=["a", "b"],
        nodes_per_region=2,
        split=np.array([[0.5, 0.5], [0.0, 1.0]]),
        next_actions=np.array([0, 3]),
        arrival_rate=np.array([28.0, 14.0]),
        metrics={},
    )
    hook = KubernetesHook(jobs_per_replica_s=10.0, target_utilisation=0.7, max_replicas=4)
    scales = desired_replicas(decisions, hook)
    assert [s.deployment for s in scales] == ["fedmc-a", "fedmc-b"]
    assert [s.demand_jobs_s for s in scales] == [14.0, 28.0]
    assert [s.replicas for s in scales] == [2, 4]  # ceil(14 / 7); ceil(28 / 7) = 4 <= max


def kubeconfig(folder: Path, url: str) -> Path:
    path = folder / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: kmock\n"
        f"clusters: [{{name: kmock, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: test, user: {token: not-a-secret}}]\n"
        "contexts: [{name: kmock, context: {cluster: kmock, user: test}}]\n"
    )
    return path


@pytest.fixture
def estate(kmock, tmp_path, monkeypatch) -> list[str]:
    """One Deployment per region on the emulator, and the argv of `fedmc hooks apply`."""
    for region in REGIONS:
        name = f"fedmc-{region}"
        kmock.objects[DEPLOYMENTS, "default", name] = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 1},
        }
    experiment, policy = exported_policy(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, str(kmock.url))))
    monkeypatch.delenv("INTEGRATION_MODE", raising=False)
    config = integration_config(tmp_path, experiment, "kubernetes", jobs_per_replica_s=5.0)
    return apply_argv("k8s", policy, config)


def writes(kmock) -> list:
    return [r for r in kmock if str(r.method).upper() not in ("GET", "METHOD.GET")]


@pytest.mark.asyncio
async def test_dry_run_sends_only_server_side_dry_run_patches(kmock, estate, capsys) -> None:
    assert await asyncio.to_thread(main, estate) == 0
    sent = writes(kmock)
    assert len(sent) == len(REGIONS), "one patch of the scale subresource per region"
    assert all(r.params.get("dryRun") == "All" for r in sent)
    assert all(r.url.path.endswith("/scale") for r in sent)
    assert capsys.readouterr().out.count('"mode": "dry-run"') == 1 + len(REGIONS)


@pytest.mark.asyncio
async def test_live_scales_each_region(kmock, estate, monkeypatch, capsys) -> None:
    monkeypatch.setenv("INTEGRATION_MODE", "live")
    assert await asyncio.to_thread(main, estate) == 0
    sent = writes(kmock)
    assert len(sent) == len(REGIONS) and not any("dryRun" in r.params for r in sent)
    planned = [line for line in capsys.readouterr().out.splitlines() if '"scale"' in line]
    for region, line in zip(REGIONS, planned, strict=True):
        stored = kmock.objects[DEPLOYMENTS, "default", f"fedmc-{region}"]
        assert f'"replicas": {stored["spec"]["replicas"]},' in line


@pytest.mark.asyncio
async def test_live_without_a_kubeconfig_refuses_and_sends_nothing(
    kmock, estate, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("INTEGRATION_MODE", "live")
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    assert await asyncio.to_thread(main, estate) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refusing" in err
    assert list(kmock) == []
