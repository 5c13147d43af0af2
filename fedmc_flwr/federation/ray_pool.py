"""A Ray node lost mid-run costs the messages it was serving, not the rest of the run.

Flower 1.42's simulation engine hands each message to an actor from `BasicActorPool`
(`flwr/simulation/ray_transport/ray_actor.py`) and, whatever the task raised, puts the
actor back (`raybackend.RayBackend.process_message`). When a node of the cluster dies, its
actors die with it, yet stay in the pool: every later message given to one fails, round
after round, on nodes that are alive. And the engine runs one worker thread per actor it
started with, so a pool that lost an actor pops from an empty list.

`tolerate_node_loss` changes three of the pool's methods, in the process that runs the
engine (the simulation process, which loads the ServerApp beside it):

- a task whose actor died (`ray.exceptions.RayActorError`) fails with `RayActorLost`,
  whose one line says why (the node left the cluster, or the actor died or became
  unreachable), and its actor leaves the pool for good; Ray's own account goes to the
  log, not into the reason;
- a thread that finds no idle actor waits for one instead of failing, so the surviving
  actors serve every message in turn;
- once an actor was lost, each message first tops the pool up to what the cluster's
  live nodes hold (Flower's `pool_size_from_resources`): a node that rejoins gets actors
  again. A new actor joins the pool only once Ray has placed and started it, so a node
  that is still counted while it dies never receives work.

A message that finds no actor alive and none starting within `NO_ACTOR_WAIT_S` fails
with the same error, and the round goes on without it.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

from flwr.common.logger import log

NO_ACTOR_WAIT_S = 60.0
"""How long a message waits for an actor when none is alive or busy."""
WAIT_POLL_S = 0.5
"""How often a waiting message looks for a started or returned actor."""
NODE_VERDICT_S = 30.0
"""How long a lost actor's reply waits for the GCS to say whether its node died."""
CAPACITY_POLL_S = 5.0
"""After a loss, how often the pool asks Ray how many actors its live nodes hold."""
ACTOR_LOST = "ClientApp actor lost"
"""How the log line starts that gives a lost actor's reason and Ray's own account."""
SIMULATION_ENGINE = "flwr.server.superlink.fleet.vce"
"""Loaded in a process that runs Flower's simulation engine, before its ServerApp starts;
its Ray backend and actor pool are imported later, as the engine starts them."""


class RayActorLost(RuntimeError):
    """The actor serving a message is gone, with the reason in one line."""


@dataclass
class _PoolState:
    """What the patched pool keeps beside Flower's own fields."""

    idle: threading.Condition = field(default_factory=threading.Condition)
    starting: dict[Any, Any] = field(default_factory=dict)
    """Actors created after a loss, by the reference that is ready once Ray started them."""
    lost: int = 0
    capacity_read_at: float = float("-inf")


def _state(pool: Any) -> _PoolState:
    state = pool.__dict__.get("_fedmc_state")
    if state is None:
        state = pool.__dict__.setdefault("_fedmc_state", _PoolState())
    return state


def actor_node(actor: Any) -> str | None:
    """The ID of the node Ray placed `actor` on, from the GCS's actor table; None when Ray
    cannot say."""
    from ray._private import state

    try:
        return state.actors(actor_id=actor._actor_id.hex())["Address"]["NodeID"]
    except Exception:  # a debugging table: no answer is an answer
        return None


def node_left(node_id: str | None, within_s: float) -> bool:
    """Whether the GCS counts node `node_id` dead within `within_s` (it notices a node
    that stopped answering its health checks after a few missed ones)."""
    import ray

    deadline = time.monotonic() + within_s
    while node_id is not None:
        if any(n["NodeID"] == node_id and not n["Alive"] for n in ray.nodes()):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(WAIT_POLL_S)
    return False


def why_lost(error: BaseException, node_id: str | None) -> str:
    """One line for a lost actor, for its reply (Ray's own words go to the log)."""
    import ray.exceptions

    if node_left(node_id, NODE_VERDICT_S):
        return "its Ray node left the cluster"
    if isinstance(error, ray.exceptions.ActorUnavailableError):
        return "its Ray actor became unreachable"
    return "its Ray actor died"


def _top_up(pool: Any, state: _PoolState) -> None:
    """Started actors join the idle pool; after a loss, new actors are asked for up to
    what the live nodes hold."""
    import ray
    from flwr.simulation.ray_transport.ray_actor import pool_size_from_resources

    if state.starting:
        ready, _ = ray.wait(list(state.starting), num_returns=len(state.starting), timeout=0)
        for ref in ready:
            actor = state.starting.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                pool.num_actors -= 1
                continue
            pool.pool.append(actor)
    if state.lost and time.monotonic() - state.capacity_read_at >= CAPACITY_POLL_S:
        state.capacity_read_at = time.monotonic()
        try:
            capacity = pool_size_from_resources(pool.client_resources)
        except ValueError:  # no live node has room for one actor (Flower logged it)
            capacity = 0
        for _ in range(capacity - pool.num_actors):
            actor = pool.create_actor_fn()
            state.starting[actor.__ray_ready__.remote()] = actor
            pool.num_actors += 1
            log(INFO, "A ClientApp actor is starting: the live nodes hold %d", capacity)


def submit(pool: Any, actor_fn: Any, job: tuple[Any, Any, str, Any]) -> Any:
    """Flower's `submit`, waiting for an idle actor rather than failing without one."""
    state = _state(pool)
    alone_since: float | None = None
    with state.idle:
        while True:
            _top_up(pool, state)
            if pool.pool:
                actor = pool.pool.pop()
                break
            if pool._future_to_actor:  # a busy actor will come back
                alone_since = None
            else:
                alone_since = alone_since or time.monotonic()
                if time.monotonic() - alone_since > NO_ACTOR_WAIT_S:
                    raise RayActorLost("no live node of the Ray cluster holds a ClientApp actor")
            state.idle.wait(WAIT_POLL_S)
        app_fn, message, cid, context = job
        future = actor_fn(actor, app_fn, message, cid, context)
        pool._future_to_actor[future] = actor
    return future


def add_actor_back_to_pool(pool: Any, future: Any) -> None:
    """Flower's, except for an actor already dropped as lost."""
    state = _state(pool)
    with state.idle:
        actor = pool._future_to_actor.pop(future, None)
        if actor is not None:
            pool.pool.append(actor)
            state.idle.notify()


def fetch_result_and_return_actor_to_pool(pool: Any, future: Any) -> tuple[Any, Any]:
    """Flower's, with a lost actor dropped and its task failed by `RayActorLost`."""
    import ray

    try:
        _, message, context = ray.get(future)
    except ray.exceptions.RayActorError as error:
        state = _state(pool)
        with state.idle:
            actor = pool._future_to_actor.pop(future, None)
            if actor is not None:
                pool.num_actors -= 1
                state.lost += 1
        node_id = None
        if actor is not None:
            node_id = actor_node(actor)
            ray.kill(actor, no_restart=True)
        reason = why_lost(error, node_id)
        log(WARNING, "%s: %s. Ray says: %s", ACTOR_LOST, reason, error)
        raise RayActorLost(reason) from None
    add_actor_back_to_pool(pool, future)
    return message, context


def tolerate_node_loss() -> bool:
    """Patch Flower's actor pool in this process, if the process runs Flower's simulation
    engine (see the module docstring); whether it does. Idempotent."""
    if SIMULATION_ENGINE not in sys.modules:
        return False
    from flwr.simulation.ray_transport.ray_actor import BasicActorPool as pool_class

    pool_class.submit = submit
    pool_class.add_actor_back_to_pool = add_actor_back_to_pool
    pool_class.fetch_result_and_return_actor_to_pool = fetch_result_and_return_actor_to_pool
    return True
