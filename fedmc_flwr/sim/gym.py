"""Gymnasium adapters of MultiCloudSim: one world as an `Env`, a batch as a `VectorEnv`.

Both are thin: every step is one call of the batched kernel (B = 1 for the `Env`), so a
policy trained through Gymnasium sees exactly the world that `evaluation.evaluate` judges.
The world is a continuing task: no state ends an episode, only the time limit truncates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from fedmc_flwr.config import ExperimentConfig, RewardWeights, WorldConfig, load_config
from fedmc_flwr.sim import DEFAULT_EPISODE_STEPS
from fedmc_flwr.sim.layout import GLOBAL_FEATURES, MAX_BACKGROUND, NODE_FEATURES
from fedmc_flwr.sim.signals import region_catalogue
from fedmc_flwr.sim.world import METRIC_NAMES, MultiCloudSim

_MAX_SEED = 2**63
"""World seeds drawn from the env's generator lie in [0, 2**63)."""

ConfigLike = str | Path | ExperimentConfig | None
Region = int | str


def _resolve_config(
    config: ConfigLike, world: WorldConfig | None, reward: RewardWeights | None
) -> tuple[WorldConfig, RewardWeights]:
    """A YAML path or an ExperimentConfig, or else a WorldConfig/RewardWeights pair."""
    if config is not None and (world is not None or reward is not None):
        raise ValueError("pass either config or world/reward, not both")
    if isinstance(config, str | Path):
        config = load_config(config)
    if isinstance(config, ExperimentConfig):
        return config.world, config.reward
    if config is not None:
        raise TypeError(f"config must be a path or an ExperimentConfig, got {type(config)}")
    return world or WorldConfig(), reward or RewardWeights()


def _region_index(region: Region, names: list[str]) -> int:
    """A region given by index or by name (e.g. 'us-east1')."""
    if isinstance(region, str):
        if region not in names:
            raise ValueError(f"unknown ingress region {region!r}; expected one of {names}")
        return names.index(region)
    index = int(region)
    if not 0 <= index < len(names):
        raise ValueError(f"ingress region {index} out of range [0, {len(names)})")
    return index


def observation_space(sim: MultiCloudSim) -> spaces.Box:
    """Bounds of one env's observation, feature by feature (the table of `layout.py`)."""
    spec = sim.spec
    region = np.repeat(np.arange(sim.num_regions), sim.nodes_per_region)
    zero, one = np.zeros(sim.num_actions), np.ones(sim.num_actions)
    worst_delay = spec.rtt_s.max() + (spec.hard_capacity + 1) * spec.mean_service_s / (
        spec.speed * (1.0 - MAX_BACKGROUND)
    )  # the hard capacity at the slowest moment, from the farthest ingress
    if spec.declared_size:  # a declared job may be of any size
        worst_delay = np.full(sim.num_actions, np.inf)
    if spec.log_delay:
        worst_delay = np.log1p(worst_delay / spec.mean_service_s)
    node_bounds = {
        "queue": (zero, one * spec.hard_capacity),
        "up": (zero, one),
        "expected_delay": (zero, worst_delay),
        # the daily cycles stay within mean * (1 +- swing)
        "price": (zero, (spec.price_mean * (1.0 + spec.price_swing))[region]),
        "carbon": (zero, (spec.carbon_mean * (1.0 + spec.carbon_swing))[region]),
        "background": (zero, one * MAX_BACKGROUND),
        "speed": (zero, spec.speed),
        "power": (zero, spec.power_w),
        "price_mult": (zero, spec.price_mult),
        "rtt": (zero, spec.rtt_s.max(axis=0)[region]),
        "local": (zero, one),
    }
    global_bounds = {"clock_sin": (-1.0, 1.0), "clock_cos": (-1.0, 1.0)}
    layout = sim.layout
    low = np.empty(layout.size, dtype=np.float64)
    high = np.empty(layout.size, dtype=np.float64)
    for feature in NODE_FEATURES:
        low[layout.node(feature.name)], high[layout.node(feature.name)] = node_bounds[feature.name]
    for feature in GLOBAL_FEATURES:
        index = layout.global_(feature.name)
        low[index], high[index] = global_bounds[feature.name]
    # one ulp each way covers the float32 rounding of values computed in float64
    low32 = np.nextafter(low.astype(np.float32), np.float32(-np.inf))
    high32 = np.nextafter(high.astype(np.float32), np.float32(np.inf))
    return spaces.Box(np.where(low == 0.0, 0.0, low32), high32, dtype=np.float32)


def _metrics_info(metrics: np.ndarray) -> dict[str, np.ndarray]:
    return {name: metrics[:, j] for j, name in enumerate(METRIC_NAMES)}


class MultiCloudEnv(gym.Env[np.ndarray, np.int64]):
    """One multi-cloud estate seen from one ingress region; each step dispatches one job.

    ## Description

    Jobs of the ingress region's own workload (diurnal, bursty, non-IID across regions)
    arrive one at a time at an estate of `regions x nodes_per_region` nodes with
    heterogeneous speeds and power, other tenants' background load, node outages, a
    network round-trip time between regions, and prices and grid carbon intensities that
    follow synthetic daily cycles around public annual means. The agent picks the node
    that serves the waiting job. The world is `MultiCloudSim` with a batch of one.

    ## Action Space

    `Discrete(regions * nodes_per_region)`: action `a` sends the job to node
    `a % nodes_per_region` of region `a // nodes_per_region` (Tier 1 load balancer, then
    Tier 2 scheduler). Nodes in an outage or with a full queue are invalid:
    `info["action_mask"]` (bool, one entry per action) marks the valid ones. There are no
    free drops: an invalid action sends the job to the valid node where its immediate
    weighted cost is highest, with that node's real latency, cost, carbon, energy and load,
    and sets `info["invalid_action"]`. When every live node is full the mask offers the
    live nodes with headroom left; in the rare case that none has any, the job is refused
    (`info["refused"]`: no load, scored as if served at the worst node, a violation).

    ## Observation Space

    `Box(float32)` of size `N * NODE_WIDTH + GLOBAL_WIDTH` (N nodes): one row per node
    (node-major, numbered region by region), then the global features (`layout.py`;
    `layout.feature_list(bounds=True)` writes this list):

    - node.queue (jobs; 0 to hard capacity): jobs in the node's queue (incl. in service)
    - node.up (share; 0 to 1): the share of its speed the node serves at: 1 when live,
      world.slowdown_share while slowed, 0 during an outage
    - node.expected_delay (s; 0 to full slowest node (none with declared sizes)): RTT from
      the ingress + queue mean jobs and the waiting job (a mean job, or its declared size
      with world.declared_size) at the node's effective speed (shortest expected delay's
      estimate); log(1 + it / the mean service time) with world.log_delay
    - node.price (USD/h; 0 to peak price): hourly price of a speed-1.0 node in the node's
      region
    - node.carbon (gCO2eq/kWh; 0 to peak carbon): grid carbon intensity of the node's region
    - node.background (0..1; 0 to 0.95): share of the region's capacity used by other
      tenants
    - node.speed (x 1.0; 0 to fastest type): relative service speed of the node's instance
      type (static)
    - node.power (W; 0 to most powerful type): dynamic power of the node at full use
      (static)
    - node.price_mult (x 1.0; 0 to dearest type): the node's price over a speed-1.0 node's
      (static)
    - node.rtt (s; 0 to longest RTT): round-trip time from the ingress region to the node's
      region (static)
    - node.local (flag; 0 to 1): 1 if the node sits in the ingress region
    - global.clock_sin (-1..1; -1 to 1): sin of the (compressed) time of day
    - global.clock_cos (-1..1; -1 to 1): cos of the (compressed) time of day

    `MultiCloudSim.layout` gives each feature's place (`layout.node("queue")` is every
    node's queue). A region's peak price or carbon is its mean times one plus its daily
    swing; a node's hard capacity is `queue_capacity` plus headroom
    (`MultiCloudSim.spec.hard_capacity`).

    ## Rewards

    `-(w_latency * latency / SLO + w_violations * violation + w_cost * cost / cost_ref
    + w_carbon * carbon / carbon_ref)` for the job just dispatched, with the weights of
    `RewardWeights` (default 0.6 / 0.25 / 0.1 / 0.05) and the estate's mean cost and
    carbon per job as references. `info` also carries the job's real-unit metrics:
    `latency_ms`, `slo_violation`, `cost_usd`, `carbon_g`, `energy_kwh`, and the flags
    `invalid_action` and `refused`.

    ## Starting State

    Every node live, the clock at a phase of the (compressed) day drawn uniformly from the
    world seed, or `options={"phase": p}` with `p` in [0, 1). From empty queues the world
    then dispatches `world.warmup_jobs` jobs by itself (each to the node of shortest
    expected delay on the true state; none is scored), so the first job the agent sees
    meets a busy estate. `reset(seed=s)` uses world seed `s` (the same trajectory as
    `MultiCloudSim` seeded with `s`); `reset()` draws the world seed from the env's
    generator.

    ## Episode

    An episode is a stretch of `max_episode_steps` jobs starting anywhere in the day, so
    training episodes cover the whole day. The task is continuing: `terminated` is always
    False. `gymnasium.make` truncates after `max_episode_steps` jobs (default 2000).

    ## Arguments

    `config` (a YAML path or an `ExperimentConfig`) or `world` / `reward` (a `WorldConfig`
    and `RewardWeights`; defaults when omitted), and `ingress` (region index or name).

    ## Example

    >>> import gymnasium as gym
    >>> import fedmc_flwr.sim
    >>> env = gym.make("fedmc/MultiCloud-v0", ingress="europe-west9", max_episode_steps=3)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, info["action_mask"].shape
    ((200,), (18,))
    >>> for _ in range(3):
    ...     action = int(np.flatnonzero(info["action_mask"])[0])
    ...     obs, reward, terminated, truncated, info = env.step(action)
    >>> reward < 0, terminated, truncated
    (True, False, True)
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        config: ConfigLike = None,
        *,
        world: WorldConfig | None = None,
        reward: RewardWeights | None = None,
        ingress: Region = 0,
    ) -> None:
        world, reward = _resolve_config(config, world, reward)
        names = [r.name for r in region_catalogue(world.regions)]
        self.sim = MultiCloudSim(world, reward, [_region_index(ingress, names)])
        self.action_space = spaces.Discrete(self.sim.num_actions)
        self.observation_space = observation_space(self.sim)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        world_seed = seed if seed is not None else int(self.np_random.integers(_MAX_SEED))
        phase = (options or {}).get("phase")
        obs, mask = self.sim.reset([world_seed], None if phase is None else [phase])
        return obs[0], {"action_mask": mask[0]}

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict]:
        result = self.sim.step(np.array([action], dtype=np.int64))
        info: dict[str, Any] = {"action_mask": result.mask[0]}
        info.update({name: float(v[0]) for name, v in _metrics_info(result.metrics).items()})
        info["invalid_action"] = bool(result.invalid[0])
        info["refused"] = bool(result.refused[0])
        return result.obs[0], float(result.reward[0]), False, False, info


class MultiCloudVectorEnv(VectorEnv):
    """A batch of `num_envs` MultiCloudEnv worlds stepped by one kernel call.

    Same spaces, reward and info keys as `MultiCloudEnv`, batched (infos follow Gymnasium's
    vector convention: `info[key][k]` plus the bool `info["_" + key]`). Each env serves
    `ingress` (one region for all, or one per env). `reset(seed=s)` gives env k world seed
    `s + k`, so env k matches `MultiCloudEnv` reset with `s + k`; `options={"phases": p}`
    gives env k start phase `p[k]` (else each phase is drawn from its world seed, and an
    autoreset draws a new seed and phase). Every env is truncated
    after `max_episode_steps` jobs and restarted on its next step (next-step autoreset):
    that step ignores its action, returns the new episode's first observation, reward 0 and
    no metrics (`info["_latency_ms"][k]` is False).
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": [],
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    def __init__(
        self,
        num_envs: int = 1,
        config: ConfigLike = None,
        *,
        world: WorldConfig | None = None,
        reward: RewardWeights | None = None,
        ingress: Region | Sequence[Region] = 0,
        max_episode_steps: int = DEFAULT_EPISODE_STEPS,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        world, reward = _resolve_config(config, world, reward)
        names = [r.name for r in region_catalogue(world.regions)]
        regions = [ingress] * num_envs if isinstance(ingress, int | str) else list(ingress)
        if len(regions) != num_envs:
            raise ValueError(f"need one ingress region per env: {num_envs} envs, {len(regions)}")
        self.sim = MultiCloudSim(world, reward, [_region_index(r, names) for r in regions])
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.single_action_space = spaces.Discrete(self.sim.num_actions)
        self.single_observation_space = observation_space(self.sim)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._autoreset = np.zeros(num_envs, dtype=np.bool_)

    def _draw_seeds(self, count: int) -> np.ndarray:
        return self.np_random.integers(_MAX_SEED, size=count, dtype=np.uint64)

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None or isinstance(seed, int | np.integer):
            super().reset(seed=None if seed is None else int(seed))
            seeds = (
                self._draw_seeds(self.num_envs)
                if seed is None
                else seed + np.arange(self.num_envs, dtype=np.uint64)
            )
        else:
            if len(seed) != self.num_envs:
                raise ValueError(f"need one seed per env: {self.num_envs} envs, {len(seed)}")
            super().reset(seed=None)
            drawn = self._draw_seeds(self.num_envs)
            seeds = np.array([d if s is None else s for s, d in zip(seed, drawn, strict=True)])
        obs, mask = self.sim.reset(seeds, (options or {}).get("phases"))
        self._elapsed[:] = 0
        self._autoreset[:] = False
        ones = np.ones(self.num_envs, dtype=np.bool_)
        return obs, {"action_mask": mask, "_action_mask": ones}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        result = self.sim.step(np.asarray(actions))
        obs, mask, reward = result.obs, result.mask, result.reward
        restarted = self._autoreset
        if restarted.any():
            envs = np.flatnonzero(restarted)
            obs, mask = self.sim.reset_envs(envs, self._draw_seeds(len(envs)))
            reward[envs] = 0.0
            result.metrics[envs] = 0.0
            self._elapsed[envs] = 0
        self._elapsed[~restarted] += 1
        truncated = self._elapsed >= self.max_episode_steps
        self._autoreset = truncated.copy()
        stepped = ~restarted
        info: dict[str, Any] = {"action_mask": mask, "_action_mask": np.ones_like(stepped)}
        flags = {"invalid_action": result.invalid, "refused": result.refused}
        for name, values in (_metrics_info(result.metrics) | flags).items():
            values[restarted] = 0
            info[name] = values
            info[f"_{name}"] = stepped.copy()
        terminated = np.zeros(self.num_envs, dtype=np.bool_)
        return obs, reward, terminated, truncated, info
