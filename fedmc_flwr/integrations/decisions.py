"""What an exported policy decides on an estate, in the terms the hooks act on.

A hook needs the policy's traffic split (which share of each ingress region's jobs goes
to each region: what Kubernetes scales for) and its next decisions (which node the next
job of each ingress region goes to: what Placement claims). Both come from running the
served policy on the world the policy was trained for, optionally replaying signals a
real cluster reported, so a hook acts on the same decisions an evaluation would judge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedmc_flwr.config import ExperimentConfig, WorldConfig
from fedmc_flwr.evaluation import heldout_seeds
from fedmc_flwr.integrations.serving import OnnxPolicy, PolicyFileError
from fedmc_flwr.seeds import heldout_phases
from fedmc_flwr.sim.signals import build_spec
from fedmc_flwr.sim.sources import Grid, TraceSignals
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


@dataclass(frozen=True)
class ReplayedSignals:
    """What a cluster reported (`Signals`), as the signal source of a world
    (`sim.sources.SignalSource`): each sample lasts `sample_s` world seconds, the first
    repeated over `lead` more samples' time (the warm-up jobs run in it), and a region's
    NaN keeps the world's own value. Reported rates are jobs per second as they are."""

    observed: Signals
    sample_s: float
    lead: int = 0

    def signals(self, world: WorldConfig, regions: list[str]) -> TraceSignals | None:
        def grid(values: np.ndarray | None) -> Grid | None:
            if values is None:
                return None
            values = np.concatenate([np.repeat(values[:1], self.lead, axis=0), values]).T
            return Grid(values, np.full(len(values), values.shape[1], dtype=np.int64))

        rates = grid(self.observed.arrival_rate)
        carbon = grid(self.observed.carbon)
        if rates is None and carbon is None:
            return None
        jobs_s = shape = None
        if rates is not None:
            known = ~np.isnan(rates.values)
            counts = np.maximum(known.sum(axis=1), 1)
            jobs_s = np.where(
                known.any(axis=1), np.where(known, rates.values, 0).sum(1) / counts, np.nan
            )
            ratio = rates.values / np.where(np.isnan(jobs_s), 1.0, jobs_s)[:, None]
            shape = Grid(np.where(known, ratio, 1.0), rates.lengths)
        samples = self.observed.samples + self.lead
        return TraceSignals(
            step_s=1.0,
            speedup=1.0 / self.sample_s,
            start_unit_s=float(samples),
            rate=shape,
            rate_jobs_s=jobs_s,
            carbon=carbon,
        )


def _replayed(own: np.ndarray, trace: np.ndarray | None) -> np.ndarray:
    """The last replayed value of each region, or its own where there was none."""
    return own.copy() if trace is None else np.where(np.isnan(trace[-1]), own, trace[-1])


def _replay(cfg: ExperimentConfig, signals: Signals, steps: int) -> ReplayedSignals:
    """The reported samples as the world's signal source, each lasting as long as an equal
    share of the steps takes at the regions' mean rate (the world's own where a region
    reported none); the warm-up jobs run before the first sample's share."""
    own = build_spec(cfg.world, cfg.reward).arrival_rate
    rates = own
    if signals.arrival_rate is not None:
        reported = signals.arrival_rate
        known = ~np.isnan(reported)
        means = np.where(known, reported, 0).sum(0) / np.maximum(known.sum(0), 1)
        rates = np.where(known.any(axis=0), means, own)
    per_sample = max(1.0, steps / signals.samples)
    lead = math.ceil(cfg.world.warmup_jobs / per_sample)
    return ReplayedSignals(signals, per_sample / float(rates.mean()), lead)


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

    With `signals`, the world replays them as its signal source (`ReplayedSignals`),
    sample after sample, each for about an equal share of the steps.
    """
    require_fit(policy, cfg)
    regions = cfg.world.regions
    ingress = np.repeat(np.arange(regions), worlds)
    signals = signals or Signals()
    sim = MultiCloudSim(cfg.world, cfg.reward, ingress, source=_replay(cfg, signals, steps))
    seeds = np.concatenate([heldout_seeds(cfg, r)[:worlds] for r in range(regions)])
    obs, mask = sim.reset(seeds, np.tile(heldout_phases(worlds), regions))
    sent = np.zeros((regions, regions))
    totals = np.zeros(len(METRIC_NAMES) + 1)
    for _ in range(steps):
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
