"""The ClientApp: each virtual client trains and evaluates PPO on its own regions' worlds.

Client `p` of `n` serves regions `p, p + n, ...` (one region each when n equals the number
of regions). Flower builds a new client object for every message, so a region's learner
(optimizer moments, normalisers, RNG, the state of its worlds) lives in a region-local
file, `<state-dir>/<region>.npz`, between rounds. A file rather than `context.state`: it
works unchanged whether the ClientApp runs in a Ray actor or in a fresh process per message
(deployment), keeps nothing in the node's memory between rounds, and can be inspected. The
server sends the resolved experiment config and the state directory with every message,
so server and clients cannot disagree about the experiment.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch
from flwr.app import Context
from flwr.client import ClientApp, NumPyClient
from flwr.common import Config, Scalar
from omegaconf import OmegaConf

from fedmc_flwr.config import ExperimentConfig
from fedmc_flwr.evaluation import EvalResult, evaluate
from fedmc_flwr.federation import wire
from fedmc_flwr.federation.strategy import policy_name
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.seeds import learner_seed
from fedmc_flwr.sim.signals import region_catalogue

torch.set_num_threads(1)

Weights = list[np.ndarray]


def state_path(state_dir: Path, cfg: ExperimentConfig, region: int) -> Path:
    """Where a region keeps its learner between rounds."""
    return state_dir / f"{region_catalogue(cfg.world.regions)[region].name}.npz"


def train_region(
    cfg: ExperimentConfig, region: int, weights: Weights, server_round: int, state_dir: Path
) -> tuple[Weights, dict[str, float]]:
    """One round of local PPO from the global `weights`; the learner's state carries over.

    Round 1 starts a fresh learner (a file left by an earlier run is ignored); later rounds
    resume the file the previous round saved.
    """
    learner = PPOLearner(cfg, [region], seed=learner_seed(cfg.seed, region))
    path = state_path(state_dir, cfg, region)
    if server_round > 1:
        if not path.is_file():
            raise FileNotFoundError(f"round {server_round}: no learner state at {path}")
        learner.load(path)
    learner.set_weights(weights)
    start = time.perf_counter()
    stats = learner.train_round(cfg.train.steps_per_round, proximal_mu=cfg.federation.proximal_mu)
    stats["wall_time_s"] = time.perf_counter() - start
    partial = path.with_name(path.name + ".partial")
    learner.save(partial)
    os.replace(partial, path)  # never leave a half-written state behind
    return learner.get_update(), stats


def evaluate_region(
    cfg: ExperimentConfig, region: int, weights: Weights
) -> tuple[EvalResult, float]:
    """The global policy on the region's held-out seeds, and the seconds it took."""
    learner = PPOLearner(cfg, [region], seed=learner_seed(cfg.seed, region))
    learner.set_weights(weights)
    name = policy_name(cfg.federation)
    start = time.perf_counter()
    result = evaluate(lambda sim: learner.policy(name), cfg, region)
    return result, time.perf_counter() - start


def experiment_from(config: Config) -> ExperimentConfig:
    """The experiment config the server resolved and sent (already validated there)."""
    merged = OmegaConf.merge(
        OmegaConf.structured(ExperimentConfig), OmegaConf.create(str(config["experiment"]))
    )
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


class RegionClient(NumPyClient):
    """PPO on the regions of one virtual client (see the module docstring)."""

    def __init__(self, partition: int, num_partitions: int) -> None:
        self.partition = partition
        self.num_partitions = num_partitions

    def _regions(self, cfg: ExperimentConfig) -> list[int]:
        return wire.regions_of(self.partition, self.num_partitions, cfg.world.regions)

    def fit(self, parameters: Weights, config: Config) -> tuple[Weights, int, dict[str, Scalar]]:
        cfg = experiment_from(config)
        regions = self._regions(cfg)
        weights: Weights = []
        metrics: dict[str, Scalar] = wire.covering(regions)
        steps = 0
        for region in regions:
            trained, stats = train_region(
                cfg, region, parameters, int(config["server-round"]), Path(str(config["state-dir"]))
            )
            weights += trained
            metrics |= wire.pack(region, stats)
            steps += int(stats["env_steps"])
        return weights, steps, metrics

    def evaluate(self, parameters: Weights, config: Config) -> tuple[float, int, dict[str, Scalar]]:
        cfg = experiment_from(config)
        regions = self._regions(cfg)
        metrics: dict[str, Scalar] = wire.covering(regions)
        rewards = []
        for region in regions:
            result, wall = evaluate_region(cfg, region, parameters)
            rewards.append(result.per_seed_reward)
            metrics |= wire.pack(region, {**wire.eval_metrics(result), "wall_time_s": wall})
        loss = -float(np.mean(np.concatenate(rewards))) if rewards else 0.0
        return loss, cfg.eval.seeds * cfg.eval.steps * len(regions), metrics


def client_fn(context: Context) -> object:
    """One client per virtual node; its partition picks its regions."""
    partition = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    return RegionClient(partition, num_partitions).to_client()


app = ClientApp(client_fn=client_fn)
