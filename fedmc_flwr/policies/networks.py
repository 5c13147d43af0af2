"""The two actor-critic networks a PPO learner can train (`ppo.policy`).

`mlp` is the seed's design: flat MLPs over the whole observation vector, one logit per
node. It must learn each node's facts from its index, so it serves one estate shape.
`node-scorer` reads the observation as one row per node (`sim/layout.py`): a shared
encoder turns each row (with the global features) into an embedding, the mean embedding
is the estate's context, and a shared head scores each node from its embedding beside the
context. The critic reads its own encoder's pooled context. No parameter depends on the
number of regions or nodes, so estates of different shapes can average one network and a
policy can move to a bigger estate; the mean (not the sum) keeps the context in the same
range on any estate size.

Both give `(logits, value)` from one normalised `[B, obs_dim]` batch; masking is shared.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedmc_flwr.sim.layout import GLOBAL_WIDTH, NODE_WIDTH

MASKED_LOGIT = -1e8
"""Logit of a masked action: its probability is exactly 0 and its entropy term 0, never NaN."""
KINDS = ("mlp", "node-scorer")


def _layer(n_in: int, n_out: int, std: float) -> nn.Linear:
    """Orthogonal weights and zero bias, CleanRL's initialisation."""
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def _mlp(n_in: int, hidden: int, n_out: int | None, out_std: float = 1.0) -> nn.Sequential:
    """Two tanh layers of width `hidden`, then a linear output layer if `n_out` is given."""
    gain = float(np.sqrt(2.0))
    layers: list[nn.Module] = [_layer(n_in, hidden, gain), nn.Tanh()]
    layers += [_layer(hidden, hidden, gain), nn.Tanh()]
    if n_out is not None:
        layers.append(_layer(hidden, n_out, out_std))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """What a learner needs of either network: logits and value of one batch."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`[B, obs_dim]` -> (`[B, nodes]` logits, `[B]` values)."""
        raise NotImplementedError

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def masked_logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.logits(obs).masked_fill(~mask, MASKED_LOGIT)


class FlatMLP(ActorCritic):
    """Separate 2-layer tanh MLPs for the logits over all nodes and for the state value."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int) -> None:
        super().__init__()
        self.actor = _mlp(obs_dim, hidden, num_actions, 0.01)
        self.critic = _mlp(obs_dim, hidden, 1, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(obs), self.critic(obs).squeeze(-1)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)


def pool(embeddings: torch.Tensor) -> torch.Tensor:
    """`[B, N, H]` -> `[B, 1, H]`: the mean over nodes, written as sum / N. On CPU torch's
    mean is that sum and division, so the numbers are the same, but its backward divides
    the gradient after broadcasting it to every node, N times the work of dividing the
    pooled gradient first, which this form's backward does."""
    return embeddings.sum(dim=1, keepdim=True) / embeddings.shape[1]


def node_rows(obs: torch.Tensor) -> torch.Tensor:
    """`[B, N * NODE_WIDTH + GLOBAL_WIDTH]` -> `[B, N, NODE_WIDTH + GLOBAL_WIDTH]`: each
    node's row with the global features beside it (N read from the width)."""
    n = (obs.shape[-1] - GLOBAL_WIDTH) // NODE_WIDTH
    nodes = obs[:, : n * NODE_WIDTH].reshape(len(obs), n, NODE_WIDTH)
    shared = obs[:, n * NODE_WIDTH :].unsqueeze(1).expand(-1, n, -1)
    return torch.cat([nodes, shared], dim=-1)


class NodeScorer(ActorCritic):
    """Shared per-node encoders, mean-pooled context, one score per node; see the module."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        row = NODE_WIDTH + GLOBAL_WIDTH
        self.actor_encoder = _mlp(row, hidden, None)
        self.actor_head = _mlp(2 * hidden, hidden, 1, 0.01)
        self.critic_encoder = _mlp(row, hidden, None)
        self.critic_head = _mlp(hidden, hidden, 1, 1.0)

    def _scores(self, rows: torch.Tensor) -> torch.Tensor:
        """The head on `[embedding, context]` per node, its first layer split in two: the
        context's half is the same for every node of an estate, so it is computed once
        per estate and added, not once per node (the same weights; about a fifth fewer
        multiply-adds than the concatenation, whose result it equals up to rounding)."""
        embedding = self.actor_encoder(rows)
        first = self.actor_head[0]
        hidden = embedding.shape[-1]
        own = F.linear(embedding, first.weight[:, :hidden], first.bias)
        shared = F.linear(pool(embedding), first.weight[:, hidden:])
        return self.actor_head[1:](own + shared).squeeze(-1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = node_rows(obs)
        value = self.critic_head(pool(self.critic_encoder(rows))).reshape(-1)
        return self._scores(rows), value

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self._scores(node_rows(obs))


def build_network(kind: str, obs_dim: int, num_actions: int, hidden: int) -> ActorCritic:
    """The network `ppo.policy` names, for an estate of this observation and action size."""
    if kind == "mlp":
        return FlatMLP(obs_dim, num_actions, hidden)
    if kind == "node-scorer":
        return NodeScorer(hidden)
    raise ValueError(f"unknown network kind {kind!r}; expected one of {KINDS}")
