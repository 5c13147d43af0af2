"""A node speaks only for its own regions: the server fixes each node's partition before
a round (by rank for virtual nodes, by authenticated key under `fedmc deploy`) and
refuses a reply that claims other regions, keeping the honest node's region."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives import serialization
from flwr.common import (
    Code,
    EvaluateRes,
    FitRes,
    Status,
    ndarrays_to_parameters,
)
from flwr.supercore.primitives.asymmetric import public_key_to_bytes

from fedmc_flwr.config import ExperimentConfig, FaultConfig, FederationConfig, to_yaml
from fedmc_flwr.evaluation import EvalResult
from fedmc_flwr.federation import faults, wire
from fedmc_flwr.federation.bundle import bundle
from fedmc_flwr.federation.client_app import RegionClient
from fedmc_flwr.federation.credentials import make_node_key
from fedmc_flwr.federation.identity import by_key, by_rank, fingerprint
from fedmc_flwr.federation.strategy import RegionStrategy
from fedmc_flwr.sim.world import METRIC_NAMES


@dataclass
class Node:
    """A client proxy as the strategy sees it: only its id matters here."""

    cid: str


@dataclass
class Manager:
    """A client manager whose nodes are all connected."""

    nodes: dict[str, Node]

    def wait_for(self, num_clients: int, timeout: int) -> bool:
        return True

    def all(self) -> dict[str, Node]:
        return self.nodes


@dataclass
class Recorder:
    fits: list[dict[int, float]] = field(default_factory=list)
    evals: list[dict[int, float]] = field(default_factory=list)
    failures: list[tuple[str, dict[int, str]]] = field(default_factory=list)

    def on_fit(self, server_round, updates, weights, wall_s, **saved) -> None:
        self.fits.append({u.region: float(u.weights[0].flat[0]) for u in updates})

    def on_failures(self, server_round: int, phase: str, failed: dict[int, str]) -> None:
        self.failures.append((phase, failed))

    def on_evaluate(self, server_round: int, results: list[EvalResult], wall_s: float) -> None:
        self.evals.append({r.region: float(r.per_seed_reward[0]) for r in results})

    def on_reply(self, server_round: int, phase: str, regions: list[int], wall_s: float) -> None:
        pass

    def on_abort(self, reason: str) -> None:
        raise AssertionError(reason)


def _strategy(recorder: Recorder) -> RegionStrategy:
    return RegionStrategy(
        [np.zeros((2, 3), np.float32)],
        FederationConfig(min_regions=1),
        3,
        lambda rnd: {"server-round": rnd},
        recorder,
        statistics=0,
        max_steps=100,
    )


def _fit(claims: dict[int, float]) -> FitRes:
    """A training reply naming `claims` (region -> the value of its weights)."""
    metrics = wire.covering(list(claims))
    weights = []
    for region, value in claims.items():
        metrics |= wire.pack(region, {"env_steps": 50.0})
        weights.append(np.full((2, 3), value, np.float32))
    return FitRes(Status(Code.OK, ""), ndarrays_to_parameters(bundle(weights)), 50, metrics)


def _eval(claims: dict[int, float]) -> EvaluateRes:
    """An evaluation reply naming `claims` (region -> its one world's reward)."""
    metrics = wire.covering(list(claims))
    for region, reward in claims.items():
        result = EvalResult(
            policy="ppo-fedavg",
            region=region,
            seeds=1,
            steps=10,
            per_seed_reward=np.array([reward]),
            means=dict.fromkeys(METRIC_NAMES, 0.0),
            latency_p95_ms=1.0,
        )
        metrics |= wire.pack(region, wire.eval_metrics(result))
    return EvaluateRes(Status(Code.OK, ""), 0.0, 10, metrics)


NODES = {cid: Node(cid) for cid in ("11", "22", "33")}
"""By rank: node 11 serves region 0, node 22 region 1, node 33 region 2."""


def test_each_node_is_told_its_partition() -> None:
    strategy = _strategy(Recorder())
    asked = strategy.configure_fit(1, ndarrays_to_parameters([]), Manager(NODES))
    told = {
        proxy.cid: (ins.config["partition-id"], ins.config["num-partitions"])
        for proxy, ins in asked
    }
    assert told == {"11": (0, 3), "22": (1, 3), "33": (2, 3)}


def test_a_relabelled_training_reply_fails_its_sender_and_keeps_the_honest_region() -> None:
    recorder = Recorder()
    strategy = _strategy(recorder)
    strategy.configure_fit(1, ndarrays_to_parameters([]), Manager(NODES))
    replies = [
        (NODES["11"], _fit({1: 99.0})),
        (NODES["22"], _fit({1: 1.0})),
        (NODES["33"], _fit({2: 2.0})),
    ]
    strategy.aggregate_fit(1, replies, [])
    assert recorder.fits == [{1: 1.0, 2: 2.0}]  # region 1 is node 22's own update
    assert recorder.failures == [
        ("training", {0: "refused reply: node 11 answered for regions [1], it serves [0]"})
    ]


def test_an_evaluation_carrying_a_copy_for_another_region_is_refused() -> None:
    recorder = Recorder()
    strategy = _strategy(recorder)
    strategy.configure_evaluate(1, ndarrays_to_parameters([]), Manager(NODES))
    replies = [
        (NODES["11"], _eval({0: -1.0, 1: -9.0})),  # its own region and a forged copy of 1's
        (NODES["22"], _eval({1: -2.0})),
        (NODES["33"], _eval({2: -3.0})),
    ]
    strategy.aggregate_evaluate(1, replies, [])
    assert recorder.evals == [{1: -2.0, 2: -3.0}]
    assert recorder.failures == [
        ("evaluation", {0: "refused reply: node 11 answered for regions [0, 1], it serves [0]"})
    ]


def test_a_client_serves_the_partition_the_server_names() -> None:
    cfg = ExperimentConfig()
    cfg.world.regions = 4
    client = RegionClient(partition=0, num_partitions=2, state_dir=Path("unused"))
    config = {"server-round": 1, "experiment": to_yaml(cfg)}
    assert client._regions(cfg, config) == [0, 2]  # its own node config
    assert client._regions(cfg, {**config, "partition-id": 1, "num-partitions": 4}) == [1]


def test_an_authenticated_node_serves_its_keys_partition(tmp_path: Path) -> None:
    keys = [make_node_key(tmp_path, f"node-{k}") for k in range(3)]
    listed = [fingerprint(key.public.read_bytes()) for key in keys]

    def as_the_superlink_reports(k: int) -> bytes:  # PEM, as `flwr supernode register` stores
        return public_key_to_bytes(serialization.load_ssh_public_key(keys[k].public.read_bytes()))

    reported = {"901": as_the_superlink_reports(2), "17": as_the_superlink_reports(0), "5": b"junk"}
    assert by_key(reported, listed) == {"901": 2, "17": 0}  # an unknown key serves nothing
    assert by_rank(["901", "17", "5"]) == {"17": 0, "5": 1, "901": 2}


def test_an_impersonating_client_names_the_next_region() -> None:
    fault = FaultConfig(region=2, round=1, kind="impersonate")
    assert faults.claimed_region(fault, 2, 3) == 0
    assert faults.claimed_region(None, 2, 3) == 2
