"""Integration configs (`conf/integrations/*.yaml`): one schema, checked like experiments.

A file names the experiment config the policy was trained for (the world the hooks
replay) and the section of its hook. Unknown keys and values of the wrong type are a
`ConfigError` naming the key and the file, as for experiment configs. Credentials never
live here: a config names the environment variable or file that holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from fedmc_flwr.config import read_yaml


@dataclass
class ServiceCalls:
    """How patiently a hook talks to its service (see `retry.py`)."""

    timeout_s: float = 5.0
    """Timeout of one request, in seconds."""
    attempts: int = 3
    """Tries per request before the hook gives up with one log line."""


@dataclass
class PrometheusHook(ServiceCalls):
    """Where the cluster's signals come from (read only: this hook never writes)."""

    url: str = "http://127.0.0.1:9090"
    """Base URL of the Prometheus server's HTTP API."""
    region_label: str = "region"
    """Series label whose value is a world region name (e.g. us-east1)."""
    arrival_rate: str = ""
    """PromQL giving jobs per second per region ("" keeps the world's workload)."""
    carbon: str = ""
    """PromQL giving grid carbon intensity in gCO2eq/kWh per region ("" keeps the world's)."""
    window_s: float = 600.0
    """How far back the range queries reach."""
    step_s: float = 60.0
    """Resolution of the range queries: one replayed sample per step."""


@dataclass
class KubernetesHook(ServiceCalls):
    """Which Deployment serves each region, and how many jobs one replica serves."""

    namespace: str = "default"
    deployment: str = "fedmc-{region}"
    """Deployment name of a region; `{region}` is the world region name."""
    jobs_per_replica_s: float = 20.0
    """Jobs per second one replica serves at full use."""
    target_utilisation: float = 0.7
    """Share of a replica's capacity the plan aims to use."""
    min_replicas: int = 1
    max_replicas: int = 50
    kubeconfig: str = ""
    """Kubeconfig file ("" reads $KUBECONFIG); live mode needs one."""


@dataclass
class OpenStackHook(ServiceCalls):
    """The Placement endpoint and how a (region, node) maps to a resource provider."""

    url: str = "http://127.0.0.1:8778"
    token_env: str = "OS_AUTH_TOKEN"
    """Environment variable holding the Keystone token; live mode needs it."""
    microversion: str = "1.39"
    """Placement API microversion sent with every request."""
    provider: str = "{region}-node-{node}"
    """Resource provider name of a node; `{region}` name, `{node}` index in the region."""
    resources: dict[str, int] = field(default_factory=lambda: {"VCPU": 1, "MEMORY_MB": 512})
    """What one job claims."""
    project_id: str = "fedmc"
    user_id: str = "fedmc"


@dataclass
class IntegrationConfig:
    """One hook's config and the experiment whose world and policy it acts for."""

    experiment: str = "conf/small_demo.yaml"
    """Experiment config the policy was trained with (relative to the current directory)."""
    steps: int = 200
    """Jobs the policy dispatches per world to measure its traffic split."""
    worlds: int = 4
    """Held-out worlds per ingress region the split is measured on."""
    prometheus: PrometheusHook = field(default_factory=PrometheusHook)
    kubernetes: KubernetesHook = field(default_factory=KubernetesHook)
    openstack: OpenStackHook = field(default_factory=OpenStackHook)


def load_integration(path: str | Path) -> IntegrationConfig:
    """Read and check an integration config; `ConfigError` in one line on any problem."""
    merged = read_yaml(path, IntegrationConfig, "integration config")
    return OmegaConf.to_object(merged)  # type: ignore[return-value]
