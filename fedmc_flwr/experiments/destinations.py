"""Where a policy sends a region's jobs on its held-out worlds, and what those places
cost at the moment each job was sent.

A policy's reward says how well it did, not what it does. Watching its decisions on the
held-out worlds of `evaluation.evaluate` (the same worlds, the same episodes, the policy
itself untouched) shows its routing: the share of jobs each destination region gets, and
the price and carbon intensity the chosen region had when the job left. Prices and carbon
move over the day, so a policy that follows them pays less than the regions' daily means.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedmc_flwr.config import ExperimentConfig
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.policies.base import Policy, PolicyFactory
from fedmc_flwr.sim.signals import region_catalogue
from fedmc_flwr.sim.world import MultiCloudSim


class _Watched:
    """A policy whose every decision is tallied by destination region."""

    def __init__(self, policy: Policy, sim: MultiCloudSim) -> None:
        self.name = policy.name
        self._policy = policy
        self._nodes = sim.nodes_per_region
        self._price = sim.layout.region("price")
        self._carbon = sim.layout.region("carbon")
        self.jobs = np.zeros(sim.num_regions)
        self.price = np.zeros(sim.num_regions)
        self.carbon = np.zeros(sim.num_regions)

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        actions = self._policy.act(obs, mask)
        where = actions // self._nodes
        envs = np.arange(len(actions))
        np.add.at(self.jobs, where, 1.0)
        np.add.at(self.price, where, obs[:, self._price][envs, where])
        np.add.at(self.carbon, where, obs[:, self._carbon][envs, where])
        return actions


def where_jobs_go(make_policy: PolicyFactory, cfg: ExperimentConfig, region: int) -> pd.DataFrame:
    """One row per destination region for `region`'s held-out worlds: its share of the
    jobs, and the mean price (USD/h of a speed-1 node) and carbon intensity (gCO2eq/kWh)
    it had when they were sent (NaN where it got none)."""
    watched: list[_Watched] = []

    def factory(sim: MultiCloudSim) -> _Watched:
        watched.append(_Watched(make_policy(sim), sim))
        return watched[-1]

    evaluate(factory, cfg, region)
    tally = watched[0]
    names = [r.name for r in region_catalogue(cfg.world.regions)]
    sent = np.where(tally.jobs > 0, tally.jobs, np.nan)
    return pd.DataFrame(
        {
            "policy": tally.name,
            "ingress": names[region],
            "destination": names,
            "share of jobs": tally.jobs / tally.jobs.sum(),
            "price when sent": tally.price / sent,
            "carbon when sent": tally.carbon / sent,
        }
    )
