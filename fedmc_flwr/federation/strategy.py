"""The Flower strategy: sends the global weights, accounts for every region, aggregates.

`RegionStrategy` is the thin legacy-API wrapper around plain functions: it sends the global
weights to every client, sorts each round's replies and failures into healthy region
updates and failed regions (`accounting.sort_out`), turns away the healthy-looking updates
the aggregation rule refuses (`aggregation.screen`: each a failed region with its reason),
builds the next global weights from the rest (`aggregation.aggregate`, then the server
optimiser's step on the network: `server_optimizers.server_step`), keeps the federation's
control variate under SCAFFOLD (`control_variates.next_control`, sent with the weights of
the next round's training messages), measures how far the
regions' updates pulled apart (`drift.update_drift`), and hands the
round to a `RoundRecorder` (metrics rows, failure rows, checkpoints, progress). A round
with fewer than `federation.min_regions` healthy regions stops the run with a
`RoundFailed` naming them. Each client is asked through a `ReportingProxy`, so the
recorder hears of every reply as it arrives, not only when the round's last one is in.

The regions evaluate the global policy themselves (with what each keeps for itself, under
`federation.personal_statistics`, `fine_tuned` or `global_share`:
`client_app.adopt_global`); the strategy hands Flower no loss for it (Flower would print
it as a "loss" history that is only the negative reward), and no centralised evaluation
(`evaluate` returns None).

Each node speaks only for its own regions. Before each round the strategy fixes which
partition every node serves (`partitions`: by rank for the simulation's virtual nodes, by
authenticated key under `fedmc deploy`; `identity`), names it in that node's instructions
(`partition-id`, `num-partitions`), and refuses a reply that covers other regions: the
node's own regions are failed with the reason, the regions it claimed stay with the nodes
that serve them.

A region that joins late (`federation.join_rounds`) is expected from its join round on:
before it, no reply is missing for it. When the run names which round each node joins in
(run-config `node-joins`, set by `fedmc deploy`), a round waits for the nodes joining by
then to connect, so a SuperNode started mid-run serves its region from its first round.

Rounds are numbered from `first_round`, so a resumed run continues its own numbering while
Flower counts from 1 again. When `owner_alive` says the process that started the run is
gone (a `fedmc run` killed outright), the strategy stops at the next step of a round instead
of training on for nobody.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from logging import WARNING
from typing import Protocol

import numpy as np
from flwr.common import (
    Code,
    DisconnectRes,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    GetParametersIns,
    GetParametersRes,
    GetPropertiesIns,
    GetPropertiesRes,
    Parameters,
    ReconnectIns,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.logger import log
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from fedmc_flwr.config import FederationConfig, regions_of
from fedmc_flwr.evaluation import EvalResult
from fedmc_flwr.federation import wire
from fedmc_flwr.federation.accounting import (
    failure_reason,
    missing_reason,
    one_line,
    sort_out,
)
from fedmc_flwr.federation.aggregation import RegionUpdate, Score, Weights, aggregate, screen
from fedmc_flwr.federation.bundle import bundle
from fedmc_flwr.federation.control_variates import next_control
from fedmc_flwr.federation.drift import update_drift
from fedmc_flwr.federation.identity import by_rank, impostor
from fedmc_flwr.federation.server_optimizers import ServerState, server_step
from fedmc_flwr.policies.moments import MOMENT_ARRAYS

CLIENT_WAIT_S = 60.0
"""How long the first round waits for any virtual client to register."""


Partitions = Callable[[list[str]], tuple[dict[str, int], int]]
"""Node ids -> (the partition each serves, how many partitions there are)."""


def ranked(node_ids: list[str]) -> tuple[dict[str, int], int]:
    """The simulation's virtual nodes, assigned by rank (`identity.by_rank`)."""
    return by_rank(node_ids), len(node_ids)


class RoundFailed(RuntimeError):
    """Too few regions delivered in a round for the federation to go on."""


class RoundRecorder(Protocol):
    """Where a round's outcome goes (metrics.csv, timing.csv, checkpoints, progress)."""

    def on_fit(
        self,
        server_round: int,
        updates: list[RegionUpdate],
        weights: Weights,
        wall_s: float,
        server_state: Mapping[str, np.ndarray] | None = None,
        drift: Mapping[str, float] | None = None,
    ) -> None: ...

    def on_failures(self, server_round: int, phase: str, failed: dict[int, str]) -> None: ...

    def on_evaluate(self, server_round: int, results: list[EvalResult], wall_s: float) -> None: ...

    def on_reply(self, server_round: int, phase: str, regions: list[int], wall_s: float) -> None:
        """A client's reply for `regions` arrived, `wall_s` seconds after it was asked."""

    def on_abort(self, reason: str) -> None: ...


class ReportingProxy(ClientProxy):
    """A client proxy that passes every call on and reports each successful fit and
    evaluate reply to `on_reply(phase, metrics, wall_s)` the moment it arrives (Flower
    collects a round's replies before the strategy sees any)."""

    def __init__(
        self, proxy: ClientProxy, on_reply: Callable[[str, Mapping[str, Scalar], float], None]
    ) -> None:
        super().__init__(proxy.cid)
        self.proxy = proxy
        if hasattr(proxy, "node_id"):
            self.node_id = proxy.node_id
        self._on_reply = on_reply

    def get_properties(
        self, ins: GetPropertiesIns, timeout: float | None, group_id: int | None
    ) -> GetPropertiesRes:
        return self.proxy.get_properties(ins, timeout, group_id)

    def get_parameters(
        self, ins: GetParametersIns, timeout: float | None, group_id: int | None
    ) -> GetParametersRes:
        return self.proxy.get_parameters(ins, timeout, group_id)

    def fit(self, ins: FitIns, timeout: float | None, group_id: int | None) -> FitRes:
        start = time.perf_counter()
        res = self.proxy.fit(ins, timeout, group_id)
        if res.status.code == Code.OK:
            self._on_reply("trained", res.metrics, time.perf_counter() - start)
        return res

    def evaluate(
        self, ins: EvaluateIns, timeout: float | None, group_id: int | None
    ) -> EvaluateRes:
        start = time.perf_counter()
        res = self.proxy.evaluate(ins, timeout, group_id)
        if res.status.code == Code.OK:
            self._on_reply("evaluated", res.metrics, time.perf_counter() - start)
        return res

    def reconnect(
        self, ins: ReconnectIns, timeout: float | None, group_id: int | None
    ) -> DisconnectRes:
        return self.proxy.reconnect(ins, timeout, group_id)


class RegionStrategy(Strategy):
    """FedAvg, the server shrink or a robust rule over regions, for NumPyClient region
    clients (legacy API); see the module docstring."""

    def __init__(
        self,
        initial: Weights,
        federation: FederationConfig,
        num_regions: int,
        instructions: Callable[[int], dict[str, Scalar]],
        recorder: RoundRecorder,
        statistics: int,
        max_steps: int,
        first_round: int = 1,
        owner_alive: Callable[[], bool] = lambda: True,
        join_rounds: Sequence[int] = (),
        node_joins: Sequence[int] = (),
        partitions: Partitions = ranked,
        score: Score | None = None,
        server_state: ServerState | None = None,
    ) -> None:
        self.weights = [np.asarray(a) for a in initial]
        self.server_state = server_state or ServerState()
        """The server optimiser's state (`server_optimizers`), carried round to round."""
        self.join_rounds = list(join_rounds) or [1] * num_regions
        """The round each region joins in."""
        self.node_joins = list(node_joins)
        """The round each node joins in, where the run says (else no waiting for nodes)."""
        self.statistics = statistics
        self.federation = federation
        self.num_regions = num_regions
        self.instructions = instructions
        self.recorder = recorder
        self.max_steps = max_steps
        """Environment steps one region trains per round: no honest update claims more."""
        self.offset = first_round - 1
        self.owner_alive = owner_alive
        self.partitions = partitions
        self.score = score
        """The server's judgement of candidate weights, for aggregation 'acceptance'."""
        self._serves: dict[str, list[int]] | None = None
        """This round's regions of each asked node; None before a round was configured."""
        self._started = 0.0

    def __repr__(self) -> str:
        f = self.federation
        return f"RegionStrategy({f.strategy}, mu={f.mu}, aggregation={f.aggregation})"

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return ndarrays_to_parameters(bundle(self.weights))

    def _active(self, server_round: int) -> list[int]:
        """The regions that have joined by `server_round`."""
        return [r for r, k in enumerate(self.join_rounds) if k <= server_round]

    def _clients(self, client_manager: ClientManager, server_round: int) -> list[ClientProxy]:
        """Every client: each serves its share of the regions, so all are asked. Nodes due
        by this round (`node_joins`) get CLIENT_WAIT_S to connect; one that does not is
        its regions' missing reply."""
        if not client_manager.wait_for(1, timeout=int(CLIENT_WAIT_S)):
            self._abort(f"no virtual client registered within {CLIENT_WAIT_S:.0f} s")
        due = sum(1 for k in self.node_joins if k <= server_round)
        if due > len(client_manager.all()) and not client_manager.wait_for(
            due, timeout=int(CLIENT_WAIT_S)
        ):
            log(
                WARNING,
                "round %d: %d of %d nodes connected",
                server_round,
                len(client_manager.all()),
                due,
            )
        available = client_manager.all()
        return [available[cid] for cid in sorted(available)]

    def _assign(
        self, clients: list[ClientProxy], server_round: int, base: dict[str, Scalar]
    ) -> list[tuple[ClientProxy, dict[str, Scalar]]]:
        """Each client that serves a partition, with its instructions naming it; the
        regions each will answer for this round are kept for `_vouched`. A node with no
        partition (an unlisted key) is not asked."""
        assigned, count = self.partitions([c.cid for c in clients])
        active = set(self._active(server_round))
        self._serves = {}
        out = []
        for client in clients:
            if client.cid not in assigned:
                log(WARNING, "round %d: node %s serves no partition", server_round, client.cid)
                continue
            partition = assigned[client.cid]
            mine = regions_of(partition, count, self.num_regions)
            self._serves[client.cid] = [r for r in mine if r in active]
            out.append((client, {**base, "partition-id": partition, "num-partitions": count}))
        return out

    def _vouched(
        self, results: Sequence[tuple[ClientProxy, FitRes | EvaluateRes]]
    ) -> tuple[list[tuple[ClientProxy, FitRes | EvaluateRes]], dict[int, str]]:
        """The replies that cover exactly their node's regions, and a reason for each
        region of a node whose reply claimed others (`identity.impostor`)."""
        if self._serves is None:  # aggregation driven without a configured round
            return list(results), {}
        kept, refused = [], {}
        for proxy, res in results:
            serves = self._serves.get(proxy.cid, [])
            try:
                why = impostor(proxy.cid, wire.regions(res.metrics), serves)
            except ValueError:
                why = None  # unreadable: `sort_out` names it
            if why is None:
                kept.append((proxy, res))
            else:
                refused |= {region: f"refused reply: {why}" for region in serves}
        return kept, refused

    def _reporting(self, clients: list[ClientProxy], server_round: int) -> list[ClientProxy]:
        """`clients`, each reporting its replies to the recorder (`ReportingProxy`)."""

        def on_reply(phase: str, metrics: Mapping[str, Scalar], wall_s: float) -> None:
            try:
                regions = wire.regions(metrics)
            except ValueError:
                return  # an unreadable reply: aggregation names it as a failure
            self.recorder.on_reply(server_round, phase, regions, wall_s)

        return [ReportingProxy(client, on_reply) for client in clients]

    def _abort(self, reason: str) -> None:
        self.recorder.on_abort(reason)
        raise RoundFailed(reason)

    def _check_owner(self) -> None:
        if not self.owner_alive():
            self._abort("the process that started this run is gone")

    def _require(self, server_round: int, phase: str, healthy: int, failed: dict[int, str]) -> None:
        """Record the round's failed regions; stop the run if too few regions are left."""
        if failed:
            self.recorder.on_failures(server_round, phase, failed)
            for region, why in failed.items():
                log(
                    WARNING, "round %d %s: region %d left out: %s", server_round, phase, region, why
                )
        if healthy < self.federation.min_regions:
            first = next(iter(failed.items()), (None, "none"))
            self._abort(
                f"round {server_round} {phase}: {healthy} of {self.num_regions} regions healthy, "
                f"federation.min_regions is {self.federation.min_regions} "
                f"(region {first[0]}: {first[1]})"
            )

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        self._check_owner()
        self._started = time.perf_counter()
        rnd = self.offset + server_round
        clients = self._clients(client_manager, rnd)
        if server_round == 1 and not self.node_joins and len(clients) != self.num_regions:
            log(
                WARNING,
                "%d regions on %d virtual clients (client p serves regions p, p + %d, ...); "
                'for one client per region run with --federation-config "num-supernodes=%d"',
                self.num_regions,
                len(clients),
                len(clients),
                self.num_regions,
            )
        assigned = self._assign(clients, rnd, self.instructions(rnd))
        reporting = self._reporting([client for client, _ in assigned], rnd)
        if self.federation.drift_correction != "none":
            parameters = ndarrays_to_parameters(
                bundle(wire.with_control(self.weights, self._control()))
            )
        return [
            (proxy, FitIns(parameters, config))
            for proxy, (_, config) in zip(reporting, assigned, strict=True)
        ]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        self._check_owner()
        rnd = self.offset + server_round
        results, refused = self._vouched(results)
        outcome = sort_out(
            self._active(rnd),
            [(parameters_to_ndarrays(res.parameters), res.metrics) for _, res in results],
            self._reasons(failures),
            self.weights,
            self.max_steps,
        )
        kept, rejected = screen(
            outcome.updates, self.weights, self.federation, self.statistics, self.score
        )
        failed = dict(sorted({**outcome.failed, **refused, **rejected}.items()))
        self._require(rnd, "training", len(kept), failed)
        combined = aggregate(kept, self.weights, self.federation, self.statistics)
        cut = len(combined) - self.statistics * MOMENT_ARRAYS
        networks = [u.weights[:cut] for u in kept]
        drift = update_drift(self.weights[:cut], networks)
        network, self.server_state = server_step(
            self.weights[:cut], combined[:cut], self.server_state, self.federation, networks
        )
        if self.federation.drift_correction != "none":
            control = next_control(
                self._control(), self.weights[:cut], kept, len(self._active(rnd))
            )
            self.server_state = replace(self.server_state, control=control)
        self.weights = network + combined[cut:]
        self.recorder.on_fit(
            rnd,
            kept,
            self.weights,
            time.perf_counter() - self._started,
            server_state=self.server_state.arrays(),
            drift=drift,
        )
        return ndarrays_to_parameters(bundle(self.weights)), {}

    def _control(self) -> np.ndarray:
        """The federation's control variate (`control_variates`): 0 before the first round."""
        if self.server_state.control is None:
            cut = len(self.weights) - self.statistics * MOMENT_ARRAYS
            return np.zeros(sum(a.size for a in self.weights[:cut]))
        return self.server_state.control

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        self._check_owner()
        self._started = time.perf_counter()
        rnd = self.offset + server_round
        clients = self._clients(client_manager, rnd)
        assigned = self._assign(clients, rnd, self.instructions(rnd))
        reporting = self._reporting([client for client, _ in assigned], rnd)
        return [
            (proxy, EvaluateIns(parameters, config))
            for proxy, (_, config) in zip(reporting, assigned, strict=True)
        ]

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[float | None, dict[str, Scalar]]:
        self._check_owner()
        rnd = self.offset + server_round
        active = self._active(rnd)
        results, failed = self._vouched(results)
        evals: dict[int, EvalResult] = {}
        for _, res in results:
            try:
                regions = wire.regions(res.metrics)
            except ValueError:
                continue
            for region in regions:
                if region not in active or region in evals:
                    continue
                try:
                    evals[region] = wire.eval_result(res.metrics, region)
                except ValueError as exc:
                    failed[region] = f"unreadable evaluation: {exc}"
        why = missing_reason(self._reasons(failures))
        for region in active:
            if region not in evals:
                failed.setdefault(region, why)
        self._require(rnd, "evaluation", len(evals), dict(sorted(failed.items())))
        ordered = [evals[r] for r in sorted(evals)]
        self.recorder.on_evaluate(rnd, ordered, time.perf_counter() - self._started)
        return None, {}  # no loss: see the module docstring

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> tuple[float, dict[str, Scalar]] | None:
        return None  # the regions evaluate the global policy on their own held-out seeds

    def _reasons(self, failures: Sequence[object]) -> list[str]:
        """One line per failed client."""
        reasons = []
        for failure in failures:
            if isinstance(failure, BaseException):
                reasons.append(failure_reason(failure, self.federation.round_timeout_s))
            else:  # a reply whose status is not OK
                reasons.append(one_line(str(getattr(failure[1], "status", failure))))
        return reasons
