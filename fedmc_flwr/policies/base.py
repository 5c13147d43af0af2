"""The one interface every dispatcher and learner serves decisions through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from fedmc_flwr.sim.world import MultiCloudSim


class Policy(Protocol):
    """Chooses one action per environment of a batch, never a masked one."""

    name: str

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """[B, obs_dim] observations and [B, A] masks -> [B] int64 actions."""
        ...


PolicyFactory = Callable[[MultiCloudSim], Policy]
"""Builds a policy for a given batch of worlds (heuristics read its static spec)."""
