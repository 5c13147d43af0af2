"""A batch of worlds whose parameters differ from env to env: a learner's training worlds
when the regions it trains for live through different workloads or events
(`train.experience`, `config.training_world`).

One `MultiCloudSim` has one set of parameters for its whole batch. A centralised learner
pooling regions that trained on different worlds needs each env in its own region's
world, so `MixedSim` holds one `MultiCloudSim` per distinct world and answers as one batch
in the learner's env order. Every env has its own random stream, so an env steps exactly
as it would in a batch of its world alone. Only the workload and events may differ between
the worlds (`config.Experience`): the estate, and with it every static fact a dispatcher
or the observation layout reads, is the same, and `spec` is the first world's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedmc_flwr.config import RewardWeights, WorldConfig
from fedmc_flwr.sim.records import State, StepOut
from fedmc_flwr.sim.world import MultiCloudSim

Numbers = Sequence[float] | np.ndarray
"""Env indices, seeds or phases, one per env."""


def world_batch(
    worlds: Mapping[int, WorldConfig], reward: RewardWeights, ingress: Sequence[int]
) -> MultiCloudSim | MixedSim:
    """A batch of envs, env b serving region `ingress[b]` in the world `worlds[ingress[b]]`:
    one `MultiCloudSim` when every env's world is the same, else a `MixedSim`."""
    distinct: list[WorldConfig] = []
    for region in ingress:
        if worlds[int(region)] not in distinct:
            distinct.append(worlds[int(region)])
    if len(distinct) == 1:
        return MultiCloudSim(distinct[0], reward, ingress)
    return MixedSim(distinct, [distinct.index(worlds[int(r)]) for r in ingress], reward, ingress)


class MixedSim:
    """Envs in several worlds of one estate, as one batch (the module docstring says why).

    `world_of[b]` is the index in `worlds` of env b's world. It answers what a learner and
    its teacher ask of a `MultiCloudSim`: the batch's shape and layout, `reset`,
    `reset_envs`, `step`, `dispatch_costs`, `state` (read-only), `get_state` and
    `set_state`, whose arrays are laid out as a `MultiCloudSim` of the same envs lays them
    out, so a learner's saved state moves between the two.
    """

    joint = False

    def __init__(
        self,
        worlds: Sequence[WorldConfig],
        world_of: Sequence[int],
        reward: RewardWeights,
        ingress: Sequence[int],
    ) -> None:
        world_of = np.asarray(world_of, dtype=np.int64)
        ingress = np.asarray(ingress, dtype=np.int64)
        self._envs = [np.flatnonzero(world_of == k) for k in range(len(worlds))]
        self._sims = [
            MultiCloudSim(world, reward, ingress[envs])
            for world, envs in zip(worlds, self._envs, strict=True)
        ]
        first = self._sims[0]
        self.num_envs = len(world_of)
        self.num_regions = first.num_regions
        self.nodes_per_region = first.nodes_per_region
        self.num_actions = first.num_actions
        self.layout = first.layout
        self.obs_dim = first.obs_dim
        self.threads = first.threads
        self.spec = first.spec

    def _gather(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """The groups' arrays (leading axis: their envs) as one array in env order."""
        out = np.empty((self.num_envs, *parts[0].shape[1:]), dtype=parts[0].dtype)
        for envs, part in zip(self._envs, parts, strict=True):
            out[envs] = part
        return out

    @property
    def state(self) -> State:
        """Every env's state, gathered (a copy: writing it changes nothing)."""
        states = [sim.state for sim in self._sims]
        return State(*(self._gather([s[k] for s in states]) for k in range(len(State._fields))))

    @property
    def obs(self) -> np.ndarray:
        return self._gather([sim.obs for sim in self._sims])

    @property
    def mask(self) -> np.ndarray:
        return self._gather([sim.mask for sim in self._sims])

    def reset(self, seeds: Numbers, phases: Numbers | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.reset_envs(np.arange(self.num_envs), seeds, phases)

    def reset_envs(
        self, envs: Numbers, seeds: Numbers, phases: Numbers | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """`MultiCloudSim.reset_envs`: each listed env restarts in its own world."""
        envs, seeds = np.asarray(envs, dtype=np.int64), np.asarray(seeds, dtype=np.uint64)
        for sim, mine in zip(self._sims, self._envs, strict=True):
            picked = np.isin(envs, mine)
            if picked.any():
                local = np.searchsorted(mine, envs[picked])
                start = None if phases is None else np.asarray(phases)[picked]
                sim.reset_envs(local, seeds[picked], start)
        return self.obs.copy(), self.mask.copy()

    def step(self, actions: np.ndarray) -> StepOut:
        actions = np.asarray(actions, dtype=np.int64)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"expected {self.num_envs} actions, got shape {actions.shape}")
        outs = [sim.step(actions[envs]) for sim, envs in zip(self._sims, self._envs, strict=True)]
        return StepOut(*(self._gather([o[k] for o in outs]) for k in range(len(StepOut._fields))))

    def dispatch_costs(self, knows_size: bool = True, knows_backlogs: bool = True) -> np.ndarray:
        return self._gather([sim.dispatch_costs(knows_size, knows_backlogs) for sim in self._sims])

    def get_state(self) -> dict[str, np.ndarray]:
        return self.state._asdict()  # `state` gathers into fresh arrays: copies already

    def set_state(self, state: dict[str, np.ndarray], adopt: bool = False) -> None:
        """`MultiCloudSim.set_state`; each world takes its envs' rows, copies of `state`'s
        (so `adopt` changes nothing here)."""
        for sim, envs in zip(self._sims, self._envs, strict=True):
            sim.set_state({name: np.asarray(value)[envs] for name, value in state.items()})
