"""The server's step: the round's aggregate taken as a pseudo-gradient (Reddi et al. 2021).

Plain FedAvg moves the global network to the regions' mean, so each round advances it by
one mean update. When each region's update is a few Adam steps in a direction partly its
own, the mean of n updates is shorter than any of them, and n regions together move the
network about as far per round as one region alone would: the federation gathers n times
the experience but takes the steps of one learner. A server optimiser treats the mean
update `delta = mean - previous` as a gradient and takes its own step:

- 'fedavgm' (Hsu et al. 2019; Reddi et al.'s server momentum):
  `m = momentum * m + delta;  w = previous + lr * m`;
- 'fedadam' (Reddi et al. 2021, Algorithm 2, without bias correction):
  `m = beta1 * m + (1 - beta1) * delta;  v = beta2 * v + (1 - beta2) * delta**2;
  w = previous + lr * m / (sqrt(v) + tau)`;
- 'fedexp' (Jhunjhunwala et al. 2023, "FedExP"): no state; the step grows with how much
  of the regions' work the averaging cancelled,
  `eta = clip(mean_i |delta_i|**2 / (2 |delta|**2), 1, lr);  w = previous + eta * delta`,
  where `delta_i` is region i's own update. Regions that agree give eta = 1 (FedAvg; one
  region always does); n updates in unrelated directions give about n / 2. `lr` caps it,
  because a region's norm enters the step: the cap bounds what an outsized update the
  screening let through (`aggregation.screen`) can do to it.

With 'none' (or 'fedavgm' at lr 1 and momentum 0) the global network is the aggregate
itself. Only the network's arrays take the step; the running moments that follow them are
pooled (`aggregation.pool_statistics`), never extrapolated. Sums run in float64 and every
array keeps its dtype; the state (`ServerState`) goes into the round's checkpoint so that a
resumed run takes the same steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fedmc_flwr.config import SERVER_OPTIMIZERS, FederationConfig
from fedmc_flwr.federation.drift import flat

_FIRST, _SECOND, _CONTROL = "server_m", "server_v", "server_c"
"""Keys of the state in a round checkpoint (`arrays` / `from_arrays`), beside the weights'
`w000, w001, ...`, which readers of the weights alone never look at."""


@dataclass
class ServerState:
    """What the server carries from round to round beside the weights: its optimiser's
    moments and the federation's control variate."""

    first: list[np.ndarray] | None = None
    """Momentum (FedAvgM) or first moment (FedAdam) per network array, float64."""
    second: list[np.ndarray] | None = None
    """FedAdam's second moment per network array, float64."""
    control: np.ndarray | None = None
    """The federation's control variate under SCAFFOLD (`control_variates`), flat, float64."""

    def arrays(self) -> dict[str, np.ndarray]:
        """The state as named arrays for the round checkpoint (empty before a step)."""
        out: dict[str, np.ndarray] = {}
        for prefix, moments in ((_FIRST, self.first), (_SECOND, self.second)):
            out |= {f"{prefix}{k:03d}": m for k, m in enumerate(moments or [])}
        if self.control is not None:
            out[_CONTROL] = self.control
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> ServerState:
        """The state `arrays` wrote; a checkpoint without one (no server optimiser, or a
        file of an older version) gives the fresh state."""

        def moments(prefix: str) -> list[np.ndarray] | None:
            keys = sorted(k for k in arrays if k.startswith(prefix) and k[len(prefix) :].isdigit())
            return [np.asarray(arrays[k], dtype=np.float64) for k in keys] or None

        control = arrays.get(_CONTROL)
        control = None if control is None else np.asarray(control, dtype=np.float64)
        return cls(moments(_FIRST), moments(_SECOND), control)


def server_step(
    previous: Sequence[np.ndarray],
    aggregate: Sequence[np.ndarray],
    state: ServerState,
    federation: FederationConfig,
    regions: Sequence[Sequence[np.ndarray]] = (),
) -> tuple[list[np.ndarray], ServerState]:
    """The next global network from the previous one and this round's aggregate of the
    regions' networks (`regions`, the same arrays; only 'fedexp' reads them), with the
    optimiser's next state (the module docstring's maths)."""
    kind = federation.server_optimizer
    if kind == "none":
        return [np.asarray(a) for a in aggregate], state
    base = [np.asarray(p, dtype=np.float64) for p in previous]
    delta = [np.asarray(a, np.float64) - b for a, b in zip(aggregate, base, strict=True)]
    first = state.first or [np.zeros_like(d) for d in delta]
    if [m.shape for m in first] != [d.shape for d in delta]:
        raise ValueError("the server optimiser's state does not fit the network's arrays")
    lr = federation.server_learning_rate
    if kind == "fedavgm":
        beta = federation.server_momentum
        first = [beta * m + d for m, d in zip(first, delta, strict=True)]
        moves, second = [lr * m for m in first], None
    elif kind == "fedadam":
        beta1, beta2 = federation.server_momentum, federation.server_beta2
        second = state.second or [np.zeros_like(d) for d in delta]
        first = [beta1 * m + (1 - beta1) * d for m, d in zip(first, delta, strict=True)]
        second = [beta2 * v + (1 - beta2) * d * d for v, d in zip(second, delta, strict=True)]
        tau = federation.server_tau
        moves = [lr * m / (np.sqrt(v) + tau) for m, v in zip(first, second, strict=True)]
    elif kind == "fedexp":
        eta = extrapolation(previous, aggregate, regions, lr)
        moves, first, second = [eta * d for d in delta], None, None
    else:
        raise ValueError(f"server optimiser {kind!r}: expected one of {SERVER_OPTIMIZERS}")
    network = [
        (b + move).astype(np.asarray(p).dtype)
        for b, move, p in zip(base, moves, previous, strict=True)
    ]
    return network, ServerState(first, second, state.control)


def extrapolation(
    previous: Sequence[np.ndarray],
    aggregate: Sequence[np.ndarray],
    regions: Sequence[Sequence[np.ndarray]],
    largest: float,
) -> float:
    """FedExP's server step (module docstring): 1 where the regions' updates agree, up to
    `largest` where their mean cancels most of them. A round whose aggregate does not move
    has nothing to extrapolate (1)."""
    if not regions:
        raise ValueError("'fedexp' needs the regions' networks to size its step")
    base = flat(previous)
    moved = float(np.sum((flat(aggregate) - base) ** 2))
    if moved == 0.0:
        return 1.0
    own = float(np.mean([np.sum((flat(r) - base) ** 2) for r in regions]))
    return float(np.clip(own / (2.0 * moved), 1.0, largest))
