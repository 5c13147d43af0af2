"""How the server combines the regions' weights, and the Flower strategy that applies it.

The math is plain numpy so that it can be tested, and reused, without Flower:
`check_update` rejects malformed updates, `by_region` fixes the order of the survivors
(float sums depend on order; replies arrive in any order), and `aggregate` takes the
network's mean weighted by environment steps (shrunk toward the previous global weights
for 'shrink') and pools the running observation and return moments exactly: the global
moments plus each region's moments of this round, between-region spread included (see
`policies/moments.py`). Sums run in float64 and every array keeps its own dtype (float32
network weights, float64 moments), so one round's result does not depend on how many
virtual clients served the regions.

`RegionStrategy` is the thin legacy-API wrapper: it sends the global weights to every
client, splits each reply into per-region updates, aggregates them, and hands the round's
results to a `RoundRecorder` (metrics, checkpoints). Any failed client fails the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from logging import ERROR, WARNING
from typing import Protocol

import numpy as np
from flwr.common import (
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.logger import log
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from fedmc_flwr.config import FederationConfig
from fedmc_flwr.evaluation import EvalResult
from fedmc_flwr.federation import wire
from fedmc_flwr.policies.moments import MOMENT_ARRAYS, Moments, pool

Weights = list[np.ndarray]
CLIENT_WAIT_S = 60.0
"""How long the first round waits for any virtual client to register."""


@dataclass
class RegionUpdate:
    """One region's trained weights, as reported after a round of local PPO."""

    region: int
    """Region index (the partition id when every virtual client serves one region)."""
    weights: Weights
    num_examples: int
    """Environment steps behind the update: its weight in the mean."""
    metrics: dict[str, Scalar] = field(default_factory=dict)


def policy_name(federation: FederationConfig) -> str:
    """The learner's name in metrics.csv, from what its federation does: `ppo-fedavg`,
    `ppo-shrink` (server shrink), `ppo-fedprox` (client proximal term) or both."""
    client = ["fedprox"] if federation.proximal_mu > 0 else []
    server = ["shrink"] if federation.strategy == "shrink" else []
    return "-".join(["ppo", *(client + server or ["fedavg"])])


def check_update(weights: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> str | None:
    """Why `weights` cannot be averaged with arrays shaped like `reference`, or None if it can."""
    if len(weights) != len(reference):
        return f"{len(weights)} arrays, expected {len(reference)}"
    for k, (array, ref) in enumerate(zip(weights, reference, strict=True)):
        array = np.asarray(array)
        if array.shape != ref.shape:
            return f"array {k} has shape {array.shape}, expected {ref.shape}"
        if array.dtype != ref.dtype:
            return f"array {k} has dtype {array.dtype}, expected {ref.dtype}"
        if not np.all(np.isfinite(array)):
            return f"array {k} holds NaN or inf"
    return None


def by_region(updates: Sequence[RegionUpdate]) -> list[RegionUpdate]:
    """Updates in region order; two updates for one region are an error, not a choice."""
    ordered = sorted(updates, key=lambda u: u.region)
    for first, second in pairwise(ordered):
        if first.region == second.region:
            raise ValueError(f"two updates for region {first.region}")
    return ordered


def weighted_mean(updates: Sequence[Sequence[np.ndarray]], weights: Sequence[float]) -> Weights:
    """Mean of several weight lists, weighted by `weights`, summed in the order given."""
    if not updates:
        raise ValueError("nothing to average")
    if len(updates) != len(weights):
        raise ValueError(f"{len(updates)} updates but {len(weights)} weights")
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all zero, got {list(weights)}")
    w = w / w.sum()
    out = []
    for k, ref in enumerate(updates[0]):
        total = np.zeros(np.shape(ref), dtype=np.float64)
        for share, update in zip(w, updates, strict=True):
            total += share * np.asarray(update[k], dtype=np.float64)
        out.append(total.astype(np.asarray(ref).dtype))
    return out


def shrink(average: Sequence[np.ndarray], previous: Sequence[np.ndarray], mu: float) -> Weights:
    """The server shrink: `(1 - mu) * average + mu * previous`, array by array (a damped FedAvg)."""
    if not 0.0 <= mu < 1.0:
        raise ValueError(f"mu must lie in [0, 1), got {mu}")
    return [
        ((1.0 - mu) * np.asarray(a, np.float64) + mu * np.asarray(p, np.float64)).astype(a.dtype)
        for a, p in zip(average, previous, strict=True)
    ]


def pool_statistics(
    previous: Sequence[np.ndarray], fresh: Sequence[Sequence[np.ndarray]]
) -> Weights:
    """Running moments (`[count, mean, var]` groups) pooled: the global ones plus what each
    region saw this round, with the between-region spread (never a plain average)."""
    out: Weights = []
    for k in range(0, len(previous), MOMENT_ARRAYS):
        parts = [Moments.from_arrays(previous[k : k + MOMENT_ARRAYS])]
        parts += [Moments.from_arrays(f[k : k + MOMENT_ARRAYS]) for f in fresh]
        out += pool(parts).arrays()
    return out


def aggregate(
    updates: Sequence[RegionUpdate],
    previous: Sequence[np.ndarray],
    federation: FederationConfig,
    statistics: int,
) -> Weights:
    """The next global weights from valid updates (see the module docstring).

    The last `statistics` groups of `MOMENT_ARRAYS` arrays are running moments, pooled;
    the arrays before them are the network, averaged (and shrunk for 'shrink').
    """
    ordered = by_region(updates)
    cut = len(previous) - statistics * MOMENT_ARRAYS
    if cut < 0:
        raise ValueError(f"{len(previous)} arrays cannot hold {statistics} statistics")
    average = weighted_mean([u.weights[:cut] for u in ordered], [u.num_examples for u in ordered])
    if federation.strategy == "shrink":
        average = shrink(average, previous[:cut], federation.mu)
    return average + pool_statistics(previous[cut:], [u.weights[cut:] for u in ordered])


def split_update(
    weights: Sequence[np.ndarray], metrics: dict[str, Scalar], per_region: int
) -> list[RegionUpdate]:
    """Cut one client's reply (its regions' weight lists, concatenated) into region updates.

    ValueError when the reply cannot be cut: wrong array count, no step count.
    """
    regions = wire.regions(metrics)
    if len(weights) != per_region * len(regions):
        raise ValueError(
            f"{len(weights)} arrays for regions {regions}, expected {per_region} per region"
        )
    updates = []
    for k, region in enumerate(regions):
        values = wire.unpack(metrics, region)
        if "env_steps" not in values:
            raise ValueError(f"region {region}'s update does not say its env_steps")
        chunk = list(weights[k * per_region : (k + 1) * per_region])
        updates.append(RegionUpdate(region, chunk, int(values["env_steps"]), values))
    return updates


class RoundRecorder(Protocol):
    """Where a round's outcome goes (metrics.csv, timing.csv, checkpoints)."""

    def on_fit(
        self, server_round: int, updates: list[RegionUpdate], weights: Weights, wall_s: float
    ) -> None: ...

    def on_evaluate(self, server_round: int, results: list[EvalResult], wall_s: float) -> None: ...


class RegionStrategy(Strategy):
    """FedAvg or the server shrink over regions, for NumPyClient region clients (legacy API)."""

    def __init__(
        self,
        initial: Weights,
        federation: FederationConfig,
        num_regions: int,
        instructions: Callable[[int], dict[str, Scalar]],
        recorder: RoundRecorder,
        statistics: int,
    ) -> None:
        self.weights = [np.asarray(a) for a in initial]
        self.statistics = statistics
        self.federation = federation
        self.num_regions = num_regions
        self.instructions = instructions
        self.recorder = recorder
        self._started = 0.0

    def __repr__(self) -> str:
        return f"RegionStrategy({self.federation.strategy}, mu={self.federation.mu})"

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return ndarrays_to_parameters(self.weights)

    def _clients(self, client_manager: ClientManager) -> list[ClientProxy]:
        """Every virtual client: each serves its share of the regions, so all are needed."""
        if not client_manager.wait_for(1, timeout=int(CLIENT_WAIT_S)):
            raise RuntimeError(f"no virtual client registered within {CLIENT_WAIT_S:.0f} s")
        available = client_manager.all()
        return [available[cid] for cid in sorted(available)]

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        self._started = time.perf_counter()
        clients = self._clients(client_manager)
        if server_round == 1 and len(clients) != self.num_regions:
            log(
                WARNING,
                "%d regions on %d virtual clients (client p serves regions p, p + %d, ...); "
                'for one client per region run with --federation-config "num-supernodes=%d"',
                self.num_regions,
                len(clients),
                len(clients),
                self.num_regions,
            )
        ins = FitIns(parameters, self.instructions(server_round))
        return [(client, ins) for client in clients]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        _raise_on_failures("fit", server_round, failures)
        updates = []
        for _, res in results:
            try:
                updates += split_update(
                    parameters_to_ndarrays(res.parameters), res.metrics, len(self.weights)
                )
            except ValueError as exc:
                log(ERROR, "round %d: rejected a client's reply: %s", server_round, exc)
        valid = []
        for update in by_region(updates):
            problem = check_update(update.weights, self.weights)
            if problem is None:
                valid.append(update)
            else:
                log(
                    ERROR,
                    "round %d: rejected region %d's update: %s",
                    server_round,
                    update.region,
                    problem,
                )
        if not valid:
            raise RuntimeError(f"round {server_round}: no valid update to aggregate")
        self.weights = aggregate(valid, self.weights, self.federation, self.statistics)
        self.recorder.on_fit(server_round, valid, self.weights, time.perf_counter() - self._started)
        return ndarrays_to_parameters(self.weights), {}

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        self._started = time.perf_counter()
        ins = EvaluateIns(parameters, self.instructions(server_round))
        return [(client, ins) for client in self._clients(client_manager)]

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[float | None, dict[str, Scalar]]:
        _raise_on_failures("evaluate", server_round, failures)
        evals = sorted(
            (
                wire.eval_result(res.metrics, r)
                for _, res in results
                for r in wire.regions(res.metrics)
            ),
            key=lambda e: e.region,
        )
        missing = sorted(set(range(self.num_regions)) - {e.region for e in evals})
        if missing:
            raise RuntimeError(f"round {server_round}: no evaluation from regions {missing}")
        self.recorder.on_evaluate(server_round, evals, time.perf_counter() - self._started)
        return -float(np.mean([e.per_seed_reward.mean() for e in evals])), {}

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> tuple[float, dict[str, Scalar]] | None:
        return None  # the regions evaluate the global policy on their own held-out seeds


def _raise_on_failures(phase: str, server_round: int, failures: Sequence[object]) -> None:
    """Legacy Flower carries on without failed clients; here a failure fails the run."""
    if failures:
        first = failures[0]
        reason = repr(
            first if isinstance(first, BaseException) else getattr(first[1], "status", first)
        )
        if len(reason) > 400:  # a remote traceback: its end names the cause
            reason = "..." + reason[-400:]
        raise RuntimeError(
            f"round {server_round}: {len(failures)} client(s) failed in {phase}; first: {reason}"
        )
