"""`fedmc hooks plan|apply`: load the policy and the world, decide, hand over to a hook.

`plan` computes and prints, in any mode, and contacts nothing that could change. `apply`
acts as the mode says: a dry run (the default) goes as far as each service allows
without changing anything, live mode acts, and live mode without the hook's credentials
refuses before anything is computed.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from fedmc_flwr.config import load_config
from fedmc_flwr.errors import InputError
from fedmc_flwr.integrations.config import IntegrationConfig, load_integration
from fedmc_flwr.integrations.decisions import Decisions, Signals, decide, require_fit
from fedmc_flwr.integrations.mode import LIVE, ActionLog, current_mode, require_credentials
from fedmc_flwr.integrations.retry import ServiceUnavailable
from fedmc_flwr.integrations.serving import OnnxPolicy

log = logging.getLogger("fedmc.hooks")


class PolicyMissing(InputError, FileNotFoundError):
    """The hook was pointed at no policy file."""


def _kubeconfig(cfg: IntegrationConfig) -> str | None:
    """The kubeconfig file the config or $KUBECONFIG names, if it exists."""
    path = cfg.kubernetes.kubeconfig or os.environ.get("KUBECONFIG", "")
    return path if path and Path(path).is_file() else None


def _credentials(hook: str, cfg: IntegrationConfig) -> dict[str, str | None]:
    """What live mode needs, by the name an operator would set."""
    if hook == "k8s":
        return {"a kubeconfig file (KUBECONFIG)": _kubeconfig(cfg)}
    if hook == "openstack":
        name = cfg.openstack.token_env
        return {name: os.environ.get(name)}
    return {}


def _signals(cfg: IntegrationConfig, regions: list[str]) -> Signals:
    from fedmc_flwr.integrations.prometheus import observed_signals

    try:
        return observed_signals(cfg.prometheus, regions, time.time())
    except ServiceUnavailable:
        log.warning("prometheus: replaying the world's own signals instead")
        return Signals()


def run_hook(hook: str, action: str, policy_path: Path, config: Path, log_path: Path | None) -> int:
    """Run one hook; returns the exit code (LiveRefused, PolicyMissing and ConfigError
    propagate)."""
    cfg = load_integration(config)
    mode = current_mode()
    live = action == "apply" and mode == LIVE
    if live:
        require_credentials(hook, _credentials(hook, cfg))
    if not policy_path.is_file():
        raise PolicyMissing(f"{policy_path}: no such policy (write one with fedmc export)")
    policy = OnnxPolicy(policy_path)
    experiment = load_config(cfg.experiment)
    require_fit(policy, experiment)
    actions = ActionLog(
        hook, "live" if live else "dry-run" if action == "apply" else "plan", log_path
    )
    has_prometheus = bool(cfg.prometheus.arrival_rate or cfg.prometheus.carbon)
    signals = _signals(cfg, policy.region_names) if has_prometheus else Signals()
    decisions = decide(policy, experiment, cfg.steps, cfg.worlds, signals)
    _report(actions, decisions, signals)
    if hook == "k8s":
        from fedmc_flwr.integrations.kubernetes import Scaler, apps_api, desired_replicas

        kubeconfig = _kubeconfig(cfg)
        api = apps_api(kubeconfig) if action == "apply" and kubeconfig else None
        Scaler(api, cfg.kubernetes, actions).apply(
            desired_replicas(decisions, cfg.kubernetes), live
        )
    elif hook == "openstack":
        from fedmc_flwr.integrations.openstack import Placement, claim_next_jobs

        token = os.environ.get(cfg.openstack.token_env)
        placement = Placement(cfg.openstack, token) if action == "apply" and token else None
        claim_next_jobs(decisions, cfg.openstack, placement, live, actions)
    return 0


def _report(actions: ActionLog, decisions: Decisions, signals: Signals) -> None:
    """What every hook acts on: the replayed signals, the split and the judged outcome."""
    names = decisions.region_names
    if signals.carbon is not None or signals.arrival_rate is not None:
        actions.emit(
            "signals",
            samples=signals.samples,
            arrival_rate=None if signals.arrival_rate is None else signals.arrival_rate[-1],
            carbon=None if signals.carbon is None else signals.carbon[-1],
        )
    actions.emit(
        "split",
        arrival_rate=dict(zip(names, decisions.arrival_rate.round(3).tolist(), strict=True)),
        split={
            ingress: dict(zip(names, row.round(3).tolist(), strict=True))
            for ingress, row in zip(names, decisions.split, strict=True)
        },
        metrics={k: float(f"{v:.6g}") for k, v in decisions.metrics.items()},
    )
