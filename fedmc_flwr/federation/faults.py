"""Faults a region's client injects on purpose (config `faults:`), to drill the defences.

Each kind imitates something real federations meet: a crashed client (`raise`), a node
that stalls past the round timeout (`hang`), a diverged learner (`nan`), a client on
another model version (`shape`), a client that lies about its data (`examples`), a
poisoned or exploding update (`scale`), an attacker that pushes against the others
(`sign-flip`: its update reversed and multiplied by `scale`), a free rider that trains
nothing and sends the round's global weights back (`free-rider`) and one that poisons the
pooled normalisers with a huge sample count and a variance of 0 (`statistics`), one
that sends an honest network with its data's means shifted (`shift-means`) or its
variances scaled (`scale-variance`), and an impostor that sends its update as the next
region's (`impersonate`). The
server never sees the config's fault list as such: it only sees the reply, exactly as it
would from a broken or hostile client.
"""

from __future__ import annotations

import time

import numpy as np

from fedmc_flwr.config import ExperimentConfig, FaultConfig
from fedmc_flwr.policies.moments import MOMENT_ARRAYS

Weights = list[np.ndarray]
HANG_MARGIN_S = 5.0
"""How far past the round timeout a hanging client replies."""
ABSURD_STEPS = 10**15
"""The environment-step count an `examples` fault claims."""
POISON_COUNT_FACTOR = 1e6
"""How many times its true sample count a `statistics` fault claims for its moments."""


class InjectedFault(RuntimeError):
    """The `raise` fault: a client that fails."""


def fault_for(cfg: ExperimentConfig, region: int, server_round: int) -> FaultConfig | None:
    """The fault this region injects in this round, if any (the first listed)."""
    return next((f for f in cfg.faults if f.region == region and f.round == server_round), None)


def before_training(fault: FaultConfig | None, cfg: ExperimentConfig) -> None:
    """Faults that strike before any work: fail, or stall past the round timeout."""
    if fault is None:
        return
    if fault.kind == "raise":
        raise InjectedFault(f"region {fault.region} fails in round {fault.round} (injected)")
    if fault.kind == "hang":
        time.sleep(cfg.federation.round_timeout_s + HANG_MARGIN_S)


def claimed_region(fault: FaultConfig | None, region: int, regions: int) -> int:
    """The region a reply names for `region`'s update: an `impersonate` fault names the
    next region (its update relabelled as another's)."""
    if fault is not None and fault.kind == "impersonate":
        return (region + 1) % regions
    return region


def corrupt(
    fault: FaultConfig | None, update: Weights, steps: int, start: Weights, network_arrays: int
) -> tuple[Weights, int]:
    """The reply a faulty region sends instead of (`update`, `steps`); `start` is the round's
    global weights and the first `network_arrays` arrays are the network."""
    if fault is None:
        return update, steps
    update = [np.array(a, copy=True) for a in update]
    if fault.kind == "nan":
        update[0].flat[0] = np.nan
    elif fault.kind == "shape":
        update[0] = update[0][:-1]
    elif fault.kind == "examples":
        steps = ABSURD_STEPS
    elif fault.kind in ("scale", "sign-flip"):
        factor = fault.scale if fault.kind == "scale" else -abs(fault.scale)
        for k in range(network_arrays):
            delta = update[k].astype(np.float64) - start[k]
            update[k] = (start[k] + factor * delta).astype(update[k].dtype)
    elif fault.kind == "free-rider":
        update = [np.array(a, copy=True) for a in start]
    elif fault.kind == "statistics":
        for k in range(network_arrays, len(update), MOMENT_ARRAYS):
            update[k] = update[k] * POISON_COUNT_FACTOR
            update[k + 2] = np.zeros_like(update[k + 2])
    elif fault.kind == "shift-means":
        for k in range(network_arrays, len(update), MOMENT_ARRAYS):
            update[k + 1] = update[k + 1] + fault.scale
    elif fault.kind == "scale-variance":
        for k in range(network_arrays, len(update), MOMENT_ARRAYS):
            update[k + 2] = update[k + 2] * fault.scale
    return update, steps
