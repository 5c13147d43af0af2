"""One PPO update of a learner, watched: what its rollout held and what the update changed.

The update is the learner's own (`PPOLearner.train_round` over exactly one rollout), so
what is shown is what training does, not a re-enactment of it. This module only looks on:
it keeps the rollout the learner collected and scores every step of it with the clipped
surrogate (`ppo.ppo_loss`) before the update's epochs of minibatches and after them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedmc_flwr.policies.ppo import PPOLearner, ppo_loss


@dataclass(frozen=True)
class Scored:
    """The network's view of one rollout at one moment."""

    losses: dict[str, float]
    """`ppo_loss`'s diagnostics over the whole rollout as one batch."""
    ratio: np.ndarray
    """[T*B] pi(a|s) / pi_old(a|s) of each action taken: 1 before the update."""
    values: np.ndarray
    """[T*B] the critic's value of each step's state."""


@dataclass(frozen=True)
class WatchedUpdate:
    """A rollout and the network's view of it before and after the update it fed."""

    advantages: np.ndarray
    """[T*B] GAE advantages (before the per-minibatch normalisation)."""
    returns: np.ndarray
    """[T*B] the critic's targets: advantages plus the values the rollout stored."""
    reward_scale: float
    """What the rewards were divided by by the rollout's end: the running standard
    deviation of the discounted return."""
    clip_coef: float
    before: Scored
    after: Scored


def _score(learner: PPOLearner, rollout: dict[str, torch.Tensor]) -> Scored:
    with torch.no_grad():
        _, losses = ppo_loss(learner.model, rollout, learner.ppo)
        logp, _, values = learner.model.evaluate(rollout, rollout["actions"])
        ratio = (logp - rollout["logprobs"]).exp()
    return Scored(losses, ratio.numpy().copy(), values.numpy().copy())


def watch_one_update(learner: PPOLearner) -> WatchedUpdate:
    """Train `learner` for one rollout (`ppo.rollout_steps` steps in each of its worlds)
    and return what that rollout held and how the update changed the network's view of
    it. The learner is left trained, as `train_round` leaves it."""
    seen: dict[str, object] = {}
    update = learner._update

    def watched(rollout: dict[str, torch.Tensor], *args: object) -> object:
        seen["rollout"] = rollout
        seen["before"] = _score(learner, rollout)
        result = update(rollout, *args)
        seen["after"] = _score(learner, rollout)
        return result

    learner._update = watched  # type: ignore[method-assign]
    try:
        learner.train_round(learner.ppo.rollout_steps)
    finally:
        del learner._update  # the class's own method again
    rollout = seen["rollout"]
    assert isinstance(rollout, dict)
    return WatchedUpdate(
        advantages=rollout["advantages"].numpy().copy(),
        returns=rollout["returns"].numpy().copy(),
        reward_scale=float(np.sqrt(learner.return_norm.total.var[0] + 1e-8)),
        clip_coef=learner.ppo.clip_coef,
        before=seen["before"],  # type: ignore[arg-type]
        after=seen["after"],  # type: ignore[arg-type]
    )
