"""Kubernetes: the policy's traffic split as replica counts of each region's Deployment.

Each region r receives the jobs the policy sends there from every ingress region,
`demand[r] = sum_i arrival_rate[i] * split[i, r]` jobs per second, and needs
`ceil(demand[r] / (jobs_per_replica_s * target_utilisation))` replicas, within the
configured bounds. The counts go through the Deployment's scale subresource, the same
path `kubectl scale` and the HorizontalPodAutoscaler use, so nothing else in the
Deployment is touched.

Dry run with a reachable cluster sends each patch with `dryRun=All`: the API server
validates and admits it but persists nothing. Without a kubeconfig the dry run only
prints. Live patches for real.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import urllib3

from fedmc_flwr.integrations.config import KubernetesHook
from fedmc_flwr.integrations.decisions import Decisions
from fedmc_flwr.integrations.extras import require
from fedmc_flwr.integrations.mode import ActionLog
from fedmc_flwr.integrations.retry import with_retries

kubernetes = require("kubernetes", "the k8s hook")
client = kubernetes.client
ApiException = kubernetes.client.exceptions.ApiException


@dataclass(frozen=True)
class Scale:
    """The replica count one region's Deployment should have."""

    region: str
    deployment: str
    demand_jobs_s: float
    replicas: int


def desired_replicas(decisions: Decisions, hook: KubernetesHook) -> list[Scale]:
    """One `Scale` per region, from the policy's split and the ingress arrival rates."""
    demand = decisions.arrival_rate @ decisions.split
    per_replica = hook.jobs_per_replica_s * hook.target_utilisation
    out = []
    for region, jobs in zip(decisions.region_names, demand, strict=True):
        replicas = int(np.clip(math.ceil(jobs / per_replica), hook.min_replicas, hook.max_replicas))
        name = hook.deployment.format(region=region)
        out.append(Scale(region, name, float(jobs), replicas))
    return out


class _Retryable(Exception):
    """A server-side (5xx) or throttling (429) answer worth another try."""


class Scaler:
    """Applies `Scale`s through one AppsV1Api (None: print only, contact nothing)."""

    def __init__(self, api: client.AppsV1Api | None, hook: KubernetesHook, log: ActionLog):
        self.api, self.hook, self.log = api, hook, log

    def _call(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            try:
                return method(*args, _request_timeout=self.hook.timeout_s, **kwargs)
            except ApiException as exc:
                if exc.status == 429 or (exc.status or 0) >= 500:
                    raise _Retryable(f"{exc.status} {exc.reason}") from exc
                raise

        return with_retries(
            call,
            f"kubernetes {what}",
            (_Retryable, urllib3.exceptions.HTTPError),
            self.hook.attempts,
        )

    def apply(self, scales: list[Scale], live: bool) -> None:
        """Read each Deployment's replicas, then patch its scale (dryRun=All unless live)."""
        ns = self.hook.namespace
        for s in scales:
            record = {
                "namespace": ns,
                "deployment": s.deployment,
                "region": s.region,
                "demand_jobs_s": round(s.demand_jobs_s, 3),
                "replicas": s.replicas,
            }
            if self.api is None:
                self.log.emit("scale", **record, sent="nothing (no kubeconfig)")
                continue
            current = self._call(
                f"read {ns}/{s.deployment}",
                self.api.read_namespaced_deployment_scale,
                s.deployment,
                ns,
            )
            dry_run = None if live else "All"
            self._call(
                f"scale {ns}/{s.deployment}",
                self.api.patch_namespaced_deployment_scale,
                s.deployment,
                ns,
                {"spec": {"replicas": s.replicas}},
                dry_run=dry_run,
            )
            self.log.emit(
                "scale",
                **record,
                current=current.spec.replicas,
                sent="patch" if live else "patch with dryRun=All (nothing persisted)",
            )


def apps_api(kubeconfig: str) -> client.AppsV1Api:
    """An AppsV1Api for the kubeconfig's current context."""
    return client.AppsV1Api(kubernetes.config.new_client_from_config(config_file=kubeconfig))
