"""What an exported policy decides on an estate, in the terms the hooks act on.

A hook needs the policy's traffic split (which share of each ingress region's jobs goes
to each region: what Kubernetes scales for) and its next decisions (which node the next
job of each ingress region goes to: what Placement claims). Both come from running the
served policy on the world the policy was trained for, optionally replaying signals a
real cluster reported, so a hook acts on the same decisions an evaluation would judge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedmc_flwr.config import ExperimentConfig
from fedmc_flwr.evaluation import heldout_seeds
from fedmc_flwr.integrations.serving import OnnxPolicy, PolicyFileError
from fedmc_flwr.seeds import heldout_phases
from fedmc_flwr.sim.signals import build_spec
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim


@dataclass(frozen=True)
class Decisions:
    """The policy's decisions on `worlds` worlds per ingress region."""

    region_names: list[str]
    nodes_per_region: int
    split: np.ndarray
    """[R, R] share of ingress region i's jobs the policy sent to region r."""
    next_actions: np.ndarray
    """[R] the action the next job of each ingress region gets (first world of each)."""
    arrival_rate: np.ndarray
    """[R] mean jobs per second entering at each region, as the world ran them."""
    metrics: dict[str, float]
    """Mean reward and real-unit metrics per job over the rollout."""

    def place(self, action: int) -> tuple[str, int]:
        """(region name, node index within the region) of an action."""
        region, node = divmod(int(action), self.nodes_per_region)
        return self.region_names[region], node


@dataclass(frozen=True)
class Signals:
    """Per-region signals to replay, [T, R] each (None keeps the world's own)."""

    arrival_rate: np.ndarray | None = None
    carbon: np.ndarray | None = None

    @property
    def samples(self) -> int:
        present = [s for s in (self.arrival_rate, self.carbon) if s is not None]
        return max((len(s) for s in present), default=1)


def _replayed(own: np.ndarray, trace: np.ndarray | None) -> np.ndarray:
    """The last replayed value of each region, or its own where there was none."""
    return own.copy() if trace is None else np.where(np.isnan(trace[-1]), own, trace[-1])


def require_fit(policy: OnnxPolicy, cfg: ExperimentConfig) -> None:
    """Refuse an estate other than the one the policy was exported for: its observations
    would not fit the graph's inputs. Checked before any service is asked for signals."""
    spec = build_spec(cfg.world, cfg.reward)
    if (len(policy.region_names), policy.nodes_per_region) != (
        spec.num_regions,
        spec.nodes_per_region,
    ):
        raise PolicyFileError(
            f"{policy.path}: exported for {len(policy.region_names)} regions x "
            f"{policy.nodes_per_region} nodes, not {cfg.name}'s {spec.num_regions} x "
            f"{spec.nodes_per_region}"
        )


def decide(
    policy: OnnxPolicy,
    cfg: ExperimentConfig,
    steps: int = 200,
    worlds: int = 4,
    signals: Signals | None = None,
) -> Decisions:
    """Run `policy` for `steps` jobs on `worlds` held-out worlds of every ingress region.

    With `signals`, the world replays them sample by sample, spending an equal share of
    the steps on each sample.
    """
    require_fit(policy, cfg)
    regions = cfg.world.regions
    ingress = np.repeat(np.arange(regions), worlds)
    sim = MultiCloudSim(cfg.world, cfg.reward, ingress)
    seeds = np.concatenate([heldout_seeds(cfg, r)[:worlds] for r in range(regions)])
    obs, mask = sim.reset(seeds, np.tile(heldout_phases(worlds), regions))
    signals = signals or Signals()
    sent = np.zeros((regions, regions))
    totals = np.zeros(len(METRIC_NAMES) + 1)
    per_sample = max(1, steps // signals.samples)
    for k in range(steps):
        sample = min(k // per_sample, signals.samples - 1)
        if k % per_sample == 0:
            sim.replay_signals(
                None if signals.arrival_rate is None else signals.arrival_rate[sample],
                None if signals.carbon is None else signals.carbon[sample],
            )
        actions = policy.act(obs, mask)
        np.add.at(sent, (ingress, actions // policy.nodes_per_region), 1.0)
        result = sim.step(actions)
        totals[0] += result.reward.sum()
        totals[1:] += result.metrics.sum(axis=0)
        obs, mask = result.obs, result.mask
    names = ("reward", *METRIC_NAMES)
    return Decisions(
        region_names=policy.region_names,
        nodes_per_region=policy.nodes_per_region,
        split=sent / sent.sum(axis=1, keepdims=True),
        next_actions=policy.act(obs, mask)[::worlds],
        arrival_rate=_replayed(sim.spec.arrival_rate, signals.arrival_rate),
        metrics={n: float(v) for n, v in zip(names, totals / (steps * sim.num_envs), strict=True)},
    )
