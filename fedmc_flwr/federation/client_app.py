"""The ClientApp: each virtual client trains and evaluates PPO on its own regions' worlds.

Client `p` of `n` serves regions `p, p + n, ...`, `p` the partition the server names in
each message (`federation.identity`; its own node config's when none is named), one
region each when n equals the number
of regions). Flower builds a new client object for every message, so a region's learner
(optimizer moments, normalisers, RNG, the state of its worlds) lives in region-local
files, `<state root>/<experiment>/<region>/round_NNN.npz`, between rounds. Files rather
than `context.state`: they work unchanged whether the ClientApp runs in a Ray actor or in
a fresh process per message (deployment), keep nothing in the node's memory between
rounds, and can be inspected. One file per round (the newest two kept): a round resumes
from the newest state before it, so a region that failed a round resumes from the round
before, and a run resumed after a crash finds each region exactly as it was after the
last completed round, whatever the crash interrupted.

The state root belongs to the node, never to the server: a SuperNode's own `state-dir`
(`--node-config`), else the run-config `client-state-dir` (which `fedmc run` sets to the
experiment's `clients/` for the simulation engine, whose virtual nodes all live on the
launching machine), else `fedmc-state/` in the node's working directory. The server
sends only the resolved experiment config with every message, so server and clients
cannot disagree about the experiment.
"""

from __future__ import annotations

import copy
import functools
import os
import shutil
import time
from pathlib import Path

import numpy as np
from flwr.app import Context, UserConfig
from flwr.client import ClientApp, NumPyClient
from flwr.common import Config, Scalar
from omegaconf import OmegaConf

from fedmc_flwr.config import (
    ExperimentConfig,
    FederationConfig,
    active_regions,
    join_round,
    learner_plan,
    region_steps,
    regions_of,
)
from fedmc_flwr.evaluation import EvalResult, evaluate
from fedmc_flwr.federation import faults, wire
from fedmc_flwr.federation.aggregation import shrink
from fedmc_flwr.federation.bundle import bundle, unbundle
from fedmc_flwr.federation.console import quiet_flower
from fedmc_flwr.federation.control_variates import train_corrected
from fedmc_flwr.federation.wire import policy_name
from fedmc_flwr.policies.checkpoints import round_file, saved_rounds
from fedmc_flwr.policies.moments import MOMENT_ARRAYS, Moments
from fedmc_flwr.policies.ppo import STATISTICS, PPOLearner
from fedmc_flwr.seeds import learner_seed
from fedmc_flwr.sim.signals import region_catalogue

quiet_flower()  # this module is loaded in every ClientApp process: its console

Weights = list[np.ndarray]
KEPT_STATES = 2
"""State files a region keeps: its newest two rounds."""


NODE_STATE_DIR = "fedmc-state"
"""In the node's working directory, for a node that names no state directory."""


def state_root(node_config: UserConfig, run_config: UserConfig) -> Path:
    """Where this node keeps its regions' learners (see the module docstring)."""
    chosen = str(node_config.get("state-dir", "")) or str(run_config.get("client-state-dir", ""))
    return Path(chosen or NODE_STATE_DIR).expanduser().resolve()


def state_dir_of(state_dir: Path, cfg: ExperimentConfig, region: int) -> Path:
    """The folder where a region keeps its learner, one file per round."""
    return state_dir / cfg.name / region_catalogue(cfg.world.regions)[region].name


def forget_earlier_runs(state_dir: Path, cfg: ExperimentConfig, region: int) -> None:
    """Round 1 starts afresh: drop whatever an earlier run of the experiment left, so that
    no later round of this run can resume from it (a node outlives runs)."""
    shutil.rmtree(state_dir_of(state_dir, cfg, region), ignore_errors=True)


def train_region(
    cfg: ExperimentConfig,
    region: int,
    weights: Weights,
    server_round: int,
    state_dir: Path,
    control: np.ndarray | None = None,
) -> tuple[Weights, dict[str, Scalar]]:
    """One round of local PPO from the global `weights`; the learner's state carries over,
    and the round's means come back with each PPO update's diagnostics (`wire.updates_metrics`).

    The region's first round (round 1, or the round it joins in) starts a fresh learner
    (`forget_earlier_runs` has cleared its folder); later rounds resume the newest state
    saved before this round (see the module docstring), or start a fresh one if the region
    has none yet (it failed every round so far, or its node is new). A fresh learner takes
    the global weights and statistics: a late region starts where the federation is. Its
    worlds are this round's (`learner_plan`: a drifting region's change of workload).
    With the federation's `control` variate (SCAFFOLD), every local step is corrected by
    it less the region's own, which the learner's state keeps (`control_variates`).
    """
    learner = PPOLearner(learner_plan(cfg, [region], server_round), learner_seed(cfg.seed, region))
    folder = state_dir_of(state_dir, cfg, region)
    earlier = [r for r in saved_rounds(folder) if r < server_round] if server_round > 1 else []
    if earlier:
        learner.load(round_file(folder, earlier[-1]))
    adopt_global(learner, weights, cfg.federation, has_own=bool(earlier))
    start = time.perf_counter()
    steps = region_steps(cfg, region)
    mu, imitate = cfg.federation.proximal_mu, server_round == 1  # imitate untrained weights only
    trained = (
        learner.train_round(steps, mu, imitate)
        if control is None
        else train_corrected(learner, control, steps, mu, imitate)
    )
    stats: dict[str, Scalar] = {**trained, **wire.updates_metrics(learner.updates)}
    stats["wall_time_s"] = time.perf_counter() - start
    path = round_file(folder, server_round)
    partial = path.with_name(path.name + ".partial")
    learner.save(partial)
    os.replace(partial, path)  # never leave a half-written state behind
    for old in saved_rounds(folder)[:-KEPT_STATES]:
        round_file(folder, old).unlink(missing_ok=True)
    return learner.get_update(), stats


def adopt_global(
    learner: PPOLearner,
    weights: Weights,
    federation: FederationConfig,
    has_own: bool,
    judging: bool = False,
) -> None:
    """The learner takes the global weights and statistics, but for what its region keeps
    for itself: its own statistics (`personal_statistics`; none yet in its first round),
    its own critic (`local_critic`), its own network's share (`global_share`), and, when
    it is judged, its own fine-tuned or mixed network and all (`fine_tuned`,
    `global_share`). `has_own`: the learner holds the region's saved state."""
    if judging and judged_on_own_network(federation) and has_own:
        return  # judged as it left its last local round
    own = (learner.norm.total, learner.return_norm.total)
    if federation.global_share < 1 and has_own:
        networks = len(learner.params)  # the statistics after them stay the global ones
        mine = learner.get_weights()[:networks]
        start = shrink(mine, weights[:networks], mu=federation.global_share)
        weights = [*start, *weights[networks:]]
    if federation.local_critic and has_own:
        critic = learner.critic_arrays()
        weights = [critic.get(k, array) for k, array in enumerate(weights)]
    learner.set_weights(weights)
    if federation.personal_statistics:
        if not has_own:
            own = tuple(Moments.empty(len(m.mean)) for m in own)
        learner.norm.start_from(own[0])
        learner.return_norm.start_from(own[1])


def judged_on_own_network(federation: FederationConfig) -> bool:
    """Whether a region is judged with its own network as its last round left it, not the
    global one: it dispatches with that network (`fine_tuned`, `global_share` below 1)."""
    return federation.fine_tuned or federation.global_share < 1


def evaluate_region(
    cfg: ExperimentConfig,
    region: int,
    weights: Weights,
    state_dir: Path | None = None,
    server_round: int = 0,
) -> tuple[EvalResult, float]:
    """The region's policy on its held-out seeds, and the seconds it took: the global one,
    but for what the region keeps for itself (`adopt_global`), read from its newest state
    up to `server_round` under `state_dir` (None: the global policy as it is)."""
    learner = PPOLearner(learner_plan(cfg, [region]), seed=learner_seed(cfg.seed, region))
    personal = cfg.federation.personal_statistics or judged_on_own_network(cfg.federation)
    saved = []
    if personal and state_dir is not None:
        folder = state_dir_of(state_dir, cfg, region)
        saved = [r for r in saved_rounds(folder) if r <= server_round]
    if saved:
        learner.load(round_file(folder, saved[-1]))
    adopt_global(learner, weights, cfg.federation, has_own=bool(saved), judging=True)
    name = policy_name(cfg.federation)
    start = time.perf_counter()
    result = evaluate(lambda sim: learner.policy(name), cfg, region)
    return result, time.perf_counter() - start


def experiment_from(config: Config) -> ExperimentConfig:
    """The experiment config the server resolved and sent (already validated there): a
    copy of the one parsed from the same text, which every message of a run repeats."""
    return copy.deepcopy(_parsed(str(config["experiment"])))


@functools.lru_cache(maxsize=4)
def _parsed(resolved: str) -> ExperimentConfig:
    """Why cached: OmegaConf takes some 30 ms to merge the text into the schema, paid by
    every message: some 3 s of CPU a round on a 100-region estate."""
    merged = OmegaConf.merge(OmegaConf.structured(ExperimentConfig), OmegaConf.create(resolved))
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


class RegionClient(NumPyClient):
    """PPO on the regions of one virtual client (see the module docstring)."""

    def __init__(self, partition: int, num_partitions: int, state_dir: Path) -> None:
        self.partition = partition
        self.num_partitions = num_partitions
        self.state_dir = state_dir

    def _regions(self, cfg: ExperimentConfig, config: Config) -> list[int]:
        """The regions of the partition the server assigned this node (its own
        `partition-id` when the message names none) that have joined by this round."""
        joined = set(active_regions(cfg, int(config["server-round"])))
        partition = int(config.get("partition-id", self.partition))
        count = int(config.get("num-partitions", self.num_partitions))
        return [
            region for region in regions_of(partition, count, cfg.world.regions) if region in joined
        ]

    def fit(self, arrays: Weights, config: Config) -> tuple[Weights, int, dict[str, Scalar]]:
        cfg = experiment_from(config)
        parameters, control = wire.split_control(unbundle(arrays), cfg.federation)
        server_round = int(config["server-round"])
        regions = self._regions(cfg, config)
        weights: Weights = []
        metrics: dict[str, Scalar] = {}
        claimed: list[int] = []
        steps = 0
        network_arrays = len(parameters) - len(STATISTICS) * MOMENT_ARRAYS
        for region in regions:
            if server_round == join_round(cfg, region):
                forget_earlier_runs(self.state_dir, cfg, region)
            fault = faults.fault_for(cfg, region, server_round)
            faults.before_training(fault, cfg)
            trained, stats = train_region(
                cfg, region, parameters, server_round, self.state_dir, control
            )
            trained, region_steps = faults.corrupt(
                fault, trained, int(stats["env_steps"]), parameters, network_arrays
            )
            stats["env_steps"] = region_steps
            claimed.append(faults.claimed_region(fault, region, cfg.world.regions))
            weights += trained
            metrics |= wire.pack(claimed[-1], stats)
            steps += region_steps
        return bundle(weights), steps, wire.covering(claimed) | metrics

    def evaluate(self, parameters: Weights, config: Config) -> tuple[float, int, dict[str, Scalar]]:
        cfg = experiment_from(config)
        server_round = int(config["server-round"])
        regions = self._regions(cfg, config)
        weights = unbundle(parameters)
        metrics: dict[str, Scalar] = wire.covering(regions)
        rewards = []
        for region in regions:
            result, wall = evaluate_region(cfg, region, weights, self.state_dir, server_round)
            rewards.append(result.per_seed_reward)
            metrics |= wire.pack(region, {**wire.eval_metrics(result), "wall_time_s": wall})
        loss = -float(np.mean(np.concatenate(rewards))) if rewards else 0.0
        return loss, cfg.eval.seeds * cfg.eval.steps * len(regions), metrics


def client_fn(context: Context) -> object:
    """One client per node; its partition picks its regions, its config the state root."""
    partition = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    root = state_root(context.node_config, context.run_config)
    return RegionClient(partition, num_partitions, root).to_client()


app = ClientApp(client_fn=client_fn)
