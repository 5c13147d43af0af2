"""SCAFFOLD's correction of client drift (Karimireddy et al. 2020), for regions that train
with Adam.

Averaging falls short where regions pull apart: each region's local steps walk toward its
own optimum, and the mean of those walks is not the walk the pooled experience would take.
SCAFFOLD keeps a control variate per region, `c_i` (the region's mean step direction), and
one for the federation, `c` (the mean of the `c_i`), and corrects every local step by
`c - c_i`: the region steps as the federation would on average, plus what its own
minibatch says beyond its own average.

The regions train with Adam, whose step direction is not the gradient, so the variates
live in the units of Adam's direction: a local step moves the weights by
`-lr * (direction + c - c_i)` (`FlatAdam.step`), and after the round, from the start `x`
(the global weights) and end `y_i` of the region's walk and the sum `S_i` of its steps'
learning rates, SCAFFOLD's option II gives

    c_i+ = c_i - c + (x - y_i) / S_i      (the region's own mean uncorrected direction)
    c+   = c + (1 / N) * sum over replying regions of (c_i+ - c_i)

with N the regions taking part in the round. `c_i+ - c_i = (x - y_i) / S_i - c` depends on
nothing the server lacks (the update it received, `S_i` from the reply's
`step_size_sum`), so the server keeps `c` without the regions uploading their variates:
the upload is unchanged and the download carries `c` beside the weights (`wire`). Each
region keeps `c_i` in its learner state; the server keeps `c` in its `ServerState`, so a
resumed run continues both. Before the first round every variate is 0 (plain local
training). Arithmetic is float64 over the network's parameters flattened in order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedmc_flwr.federation.aggregation import RegionUpdate
from fedmc_flwr.federation.drift import flat
from fedmc_flwr.policies.ppo import PPOLearner

STEP_SIZE_SUM = "step_size_sum"
"""The training reply's value (`PPOLearner.train_round`) that scales a walk to a direction."""


def train_corrected(
    learner: PPOLearner,
    control: np.ndarray,
    steps_per_env: int,
    proximal_mu: float = 0.0,
    imitate: bool = False,
) -> dict[str, float]:
    """A round of local training from the learner's current (global) weights, each step
    corrected by the federation's `control` less the region's own; the learner's own
    variate becomes its round's mean direction (the module docstring's `c_i+`)."""
    size = sum(p.numel() for p in learner.params)
    if control.shape != (size,):
        raise ValueError(f"control variate of shape {control.shape}, expected ({size},)")
    own = learner.control if learner.control is not None else np.zeros(size)
    start = flat([p.detach().numpy() for p in learner.params])
    stats = learner.train_round(steps_per_env, proximal_mu, imitate, correction=control - own)
    end = flat([p.detach().numpy() for p in learner.params])
    learner.control = own - control + (start - end) / stats[STEP_SIZE_SUM]
    return stats


def next_control(
    control: np.ndarray,
    previous: Sequence[np.ndarray],
    updates: Sequence[RegionUpdate],
    regions: int,
) -> np.ndarray:
    """The federation's next variate from this round's region updates (their networks:
    the arrays of `previous`, the global network the round started from), `regions` the
    regions taking part. A reply without a positive `step_size_sum` moves nothing."""
    start = flat(previous)
    total = np.zeros_like(control)
    for update in updates:
        step_sum = float(update.metrics.get(STEP_SIZE_SUM, 0.0))
        if np.isfinite(step_sum) and step_sum > 0:
            walk = start - flat(update.weights[: len(previous)])
            total += walk / step_sum - control
    return control + total / regions
