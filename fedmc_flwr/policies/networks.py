"""The actor-critic networks a PPO learner can train (`ppo.policy`).

`two-tier` (the default) makes the decision as the estate is built: Tier 1 scores the
regions from one summary row each, Tier 2 scores the nodes of the chosen region from their
own rows. `p(a) = p(region) * p(node | region)` over the one categorical action
`a = region * nodes_per_region + node`; a region with no valid node gets probability 0.
A region's summary is a fixed reduction of its nodes' normalised rows (no weights): the
mean of every node feature, the least expected delay over its valid nodes (what shortest
expected delay reads) and the share of its nodes that are valid, beside the global
features. Sampling, the greedy act and the training sample need only the chosen region's
nodes, so a decision's learned work grows as regions + nodes, not as their product, and a
rollout stores `regions * summary + nodes * row` numbers a step instead of the whole
estate. Its critic reads the region summaries.

`mlp` is the seed's design: flat MLPs over the whole observation vector, one logit per
node. It must learn each node's facts from its index, so it serves one estate shape.
`node-scorer` reads the observation as one row per node (`sim/layout.py`): a shared
encoder turns each row (with the global features) into an embedding, the mean embedding
is the estate's context, and a shared head scores each node from its embedding beside the
context; its critic reads its own encoder's pooled context.

Neither `two-tier` nor `node-scorer` has a parameter that depends on the number of regions
or nodes, so estates of different shapes can average one network and a policy can move to
a bigger estate; means (not sums) keep every context in the same range on any estate.

A learner uses any of them through `ActorCritic`: `sample` (a rollout step: action, its
log-probability, the value and the inputs the update will need), `evaluate` (the update:
log-probabilities, entropy and values of stored inputs and actions), `value`, `greedy`
and `masked_logits` (every action's log-probability, for the export and the tests).
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedmc_flwr.config import POLICY_KINDS
from fedmc_flwr.policies.two_tier_kernels import MASKED_LOGIT, ROW_WIDTH, SUMMARY_WIDTH
from fedmc_flwr.sim.layout import EXPECTED_DELAY, GLOBAL_WIDTH, NODE_WIDTH

KINDS = POLICY_KINDS

Maybe = Tensor | None
Inputs = dict[str, torch.Tensor]
"""What a rollout stores of one step for the update, batch first."""


class Step(NamedTuple):
    """One sampled rollout step of a batch."""

    action: torch.Tensor
    logprob: torch.Tensor
    value: torch.Tensor
    inputs: Inputs


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


def _gumbel_argmax(logits: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """A sample of each row's categorical (the Gumbel-max trick, one uniform per logit)."""
    return (logits - torch.log(-torch.log(noise))).argmax(dim=-1)


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    """Entropy of each row's categorical from its log-probabilities (masked terms are 0)."""
    return -(logp.exp() * logp).sum(-1)


def _pick(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`values[b, index[b]]` for every row b."""
    return values.gather(1, index.unsqueeze(1)).squeeze(1)


class ActorCritic(nn.Module):
    """What a learner needs of a network; see the module docstring."""

    def noise_width(self, num_actions: int) -> int:
        """Uniforms `sample` reads per env, for an estate of `num_actions` nodes."""
        raise NotImplementedError

    def sample(
        self, obs: Tensor, mask: Tensor, noise: Tensor, hidden: Maybe = None, teacher: Maybe = None
    ) -> Step:
        """A rollout step, drawn with `noise`: `[B, noise_width]` uniforms in [0, 1).
        `hidden`: what a privileged critic reads beside the observation (`[B, P]`);
        `teacher`: actions to take instead of drawing (a teacher's), scored as if drawn."""
        raise NotImplementedError

    def evaluate(
        self, inputs: Inputs, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log-probabilities of `actions`, entropies, values) of stored inputs, `[B]` each."""
        raise NotImplementedError

    def value(self, obs: Tensor, mask: Tensor, hidden: Maybe = None) -> Tensor:
        """`[B]` values of a batch (the mask is part of what the two-tier critic reads)."""
        raise NotImplementedError

    def greedy(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The deterministic act: the most probable valid action."""
        raise NotImplementedError

    def masked_logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`[B, A]` logits of every action, `MASKED_LOGIT` where masked."""
        raise NotImplementedError

    def on_estate(self, nodes_per_region: int) -> ActorCritic:
        """The network reading an estate of `nodes_per_region` nodes a region, with the
        same weights (shared, not copied): a flat network reads no split into regions."""
        return self


class FlatActorCritic(ActorCritic):
    """A network with one logit per action from the whole observation (`forward`): the
    rollout stores the observation and mask, the update re-reads them whole."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`[B, obs_dim]` -> (`[B, nodes]` logits, `[B]` values)."""
        raise NotImplementedError

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def masked_logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.logits(obs).masked_fill(~mask, MASKED_LOGIT)

    def noise_width(self, num_actions: int) -> int:
        return num_actions

    def sample(
        self, obs: Tensor, mask: Tensor, noise: Tensor, hidden: Maybe = None, teacher: Maybe = None
    ) -> Step:
        logits, values = self(obs)
        logits = logits.masked_fill(~mask, MASKED_LOGIT)
        logp_all = torch.log_softmax(logits, dim=-1)
        action = _gumbel_argmax(logits, noise) if teacher is None else teacher
        return Step(action, _pick(logp_all, action), values, {"obs": obs, "mask": mask})

    def evaluate(
        self, inputs: Inputs, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, values = self(inputs["obs"])
        logp_all = torch.log_softmax(logits.masked_fill(~inputs["mask"], MASKED_LOGIT), dim=-1)
        return _pick(logp_all, actions), _entropy(logp_all), values

    def value(self, obs: Tensor, mask: Tensor, hidden: Maybe = None) -> Tensor:
        return self(obs)[1]

    def greedy(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.masked_logits(obs, mask).argmax(dim=1)


class FlatMLP(FlatActorCritic):
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
    """`[..., N, H]` -> `[..., 1, H]`: the mean over the N rows, written as sum / N. On CPU
    torch's mean is that sum and division, so the numbers are the same, but its backward
    divides the gradient after broadcasting it to every row, N times the work of dividing
    the pooled gradient first, which this form's backward does."""
    return embeddings.sum(dim=-2, keepdim=True) / embeddings.shape[-2]


def node_rows(obs: torch.Tensor) -> torch.Tensor:
    """`[B, N * NODE_WIDTH + GLOBAL_WIDTH]` -> `[B, N, ROW_WIDTH]`: each node's row with
    the global features beside it (N read from the width)."""
    n = (obs.shape[-1] - GLOBAL_WIDTH) // NODE_WIDTH
    nodes = obs[:, : n * NODE_WIDTH].reshape(len(obs), n, NODE_WIDTH)
    shared = obs[:, n * NODE_WIDTH :].unsqueeze(1).expand(-1, n, -1)
    return torch.cat([nodes, shared], dim=-1)


def score(encoder: nn.Sequential, head: nn.Sequential, rows: torch.Tensor) -> torch.Tensor:
    """`[..., N, row]` -> `[..., N]`: a shared head on `[embedding, mean embedding]` per
    row, its first layer split in two: the context's half is the same for every row of a
    set, so it is computed once per set and added, not once per row (the same weights;
    fewer multiply-adds than the concatenation, whose result it equals up to rounding)."""
    embedding = encoder(rows)
    first = head[0]
    hidden = embedding.shape[-1]
    own = F.linear(embedding, first.weight[:, :hidden], first.bias)
    shared = F.linear(pool(embedding), first.weight[:, hidden:])
    return head[1:](own + shared).squeeze(-1)


class NodeScorer(FlatActorCritic):
    """Shared per-node encoders, mean-pooled context, one score per node; see the module."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.actor_encoder = _mlp(ROW_WIDTH, hidden, None)
        self.actor_head = _mlp(2 * hidden, hidden, 1, 0.01)
        self.critic_encoder = _mlp(ROW_WIDTH, hidden, None)
        self.critic_head = _mlp(hidden, hidden, 1, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = node_rows(obs)
        value = self.critic_head(pool(self.critic_encoder(rows))).reshape(-1)
        return score(self.actor_encoder, self.actor_head, rows), value

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return score(self.actor_encoder, self.actor_head, node_rows(obs))


def _scorer(row: int, hidden: int, out_std: float, depth: int = 2) -> nn.Sequential:
    """`depth` ReLU layers and a linear score, applied to each row of a set on its own (the
    softmax over the set compares them). ReLU, not tanh: on the CPU torch's tanh and its
    backward cost several times ReLU's, and this network applies them to every region's
    and node's row, not once a sample."""
    gain = float(np.sqrt(2.0))
    layers: list[nn.Module] = []
    for k in range(depth):
        layers += [_layer(row if k == 0 else hidden, hidden, gain), nn.ReLU()]
    return nn.Sequential(*layers, _layer(hidden, 1, out_std))


class Estate(NamedTuple):
    """One observation batch read as regions: `nodes` `[B, R, N, NODE_WIDTH]`, `globals`
    `[B, GLOBAL_WIDTH]`, `mask` `[B, R, N]` (views, no copy)."""

    nodes: torch.Tensor
    globals: torch.Tensor
    mask: torch.Tensor


class TwoTier(ActorCritic):
    """Tier 1 scores regions from their summaries, Tier 2 the chosen region's nodes; see
    the module docstring. `nodes_per_region` is the estate's shape, not a parameter: the
    same weights serve an estate of any shape."""

    def __init__(
        self, hidden: int, nodes_per_region: int, depth: int = 2, privileged: int = 0
    ) -> None:
        super().__init__()
        self.nodes_per_region = nodes_per_region
        self.privileged = privileged
        """Width of what the critic reads beyond the observation (0: nothing)."""
        self.region_scorer = _scorer(SUMMARY_WIDTH, hidden, 0.01, depth)
        self.node_scorer = _scorer(ROW_WIDTH, hidden, 0.01, depth)
        self.critic = _scorer(SUMMARY_WIDTH + privileged, hidden, 1.0)

    def on_estate(self, nodes_per_region: int) -> TwoTier:
        twin = copy.copy(self)
        twin.nodes_per_region = nodes_per_region
        return twin

    def estate(self, obs: torch.Tensor, mask: torch.Tensor) -> Estate:
        b, n = len(obs), self.nodes_per_region
        flat = obs.shape[-1] - GLOBAL_WIDTH
        if flat % (n * NODE_WIDTH):
            raise ValueError(
                f"an observation of {flat // NODE_WIDTH} nodes is no estate of {n} nodes a "
                "region: read it with on_estate(its nodes per region)"
            )
        nodes = obs[:, :flat].reshape(b, -1, n, NODE_WIDTH)
        return Estate(nodes, obs[:, flat:], mask.reshape(b, -1, n))

    @staticmethod
    def summaries(estate: Estate) -> tuple[torch.Tensor, torch.Tensor]:
        """`[B, R, SUMMARY_WIDTH]` region rows and the `[B, R]` mask of regions with a
        valid node. A fixed reduction, no weights: its gradient is never needed."""
        nodes, mask = estate.nodes, estate.mask
        delay = nodes[..., EXPECTED_DELAY].masked_fill(~mask, torch.inf).amin(dim=-1)
        valid = mask.any(dim=-1)
        regions = nodes.shape[1]
        rows = [
            pool(nodes).squeeze(-2),
            torch.where(valid, delay, 0.0).unsqueeze(-1),
            mask.to(nodes.dtype).mean(dim=-1, keepdim=True),
            estate.globals.unsqueeze(1).expand(-1, regions, -1),
        ]
        return torch.cat(rows, dim=-1), valid

    @staticmethod
    def region_rows(estate: Estate, region: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The `[B, N, ROW_WIDTH]` rows and `[B, N]` mask of each env's chosen region."""
        index = torch.arange(len(region))
        nodes = estate.nodes[index, region]
        shared = estate.globals.unsqueeze(1).expand(-1, nodes.shape[1], -1)
        return torch.cat([nodes, shared], dim=-1), estate.mask[index, region]

    def _region_logp(self, summaries: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        logits = self.region_scorer(summaries).squeeze(-1)
        return torch.log_softmax(logits.masked_fill(~valid, MASKED_LOGIT), dim=-1)

    def _node_logp(self, rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        logits = self.node_scorer(rows).squeeze(-1)
        return torch.log_softmax(logits.masked_fill(~mask, MASKED_LOGIT), dim=-1)

    def _value(self, summaries: torch.Tensor, privileged: torch.Tensor | None) -> torch.Tensor:
        """The critic reads the regions' mean summary: one row a state on any estate; a
        privileged critic reads what the simulation knows beside it."""
        pooled = pool(summaries)
        if self.privileged:
            if privileged is None:
                raise ValueError("this network's critic reads privileged inputs; none given")
            pooled = torch.cat([pooled, privileged.unsqueeze(-2)], dim=-1)
        return self.critic(pooled).reshape(-1)

    def noise_width(self, num_actions: int) -> int:
        """One uniform per region, then one per node of the chosen region."""
        return num_actions // self.nodes_per_region + self.nodes_per_region

    def sample(
        self, obs: Tensor, mask: Tensor, noise: Tensor, hidden: Maybe = None, teacher: Maybe = None
    ) -> Step:
        estate = self.estate(obs, mask)
        summaries, valid = self.summaries(estate)
        region_logp = self._region_logp(summaries, valid)
        regions = region_logp.shape[-1]
        region = _gumbel_argmax(region_logp, noise[:, :regions])
        if teacher is not None:
            region = teacher // self.nodes_per_region
        rows, node_mask = self.region_rows(estate, region)
        node_logp = self._node_logp(rows, node_mask)
        node = _gumbel_argmax(node_logp, noise[:, regions:])
        if teacher is not None:
            node = teacher % self.nodes_per_region
        logprob = _pick(region_logp, region) + _pick(node_logp, node)
        inputs = {"summaries": summaries, "valid": valid, "rows": rows, "node_mask": node_mask}
        if self.privileged:
            inputs["privileged"] = hidden
        action = region * self.nodes_per_region + node
        return Step(action, logprob, self._value(summaries, hidden), inputs)

    def evaluate(
        self, inputs: Inputs, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The chosen region's nodes are all the update reads: `log p(a)` is the region's
        log-probability plus the node's within it, and the entropy is the regions' plus
        the chosen region's nodes' (an unbiased sample of the conditional entropy term)."""
        region_logp = self._region_logp(inputs["summaries"], inputs["valid"])
        node_logp = self._node_logp(inputs["rows"], inputs["node_mask"])
        region, node = actions // self.nodes_per_region, actions % self.nodes_per_region
        logprob = _pick(region_logp, region) + _pick(node_logp, node)
        entropy = _entropy(region_logp) + _entropy(node_logp)
        return logprob, entropy, self._value(inputs["summaries"], inputs.get("privileged"))

    def value(self, obs: Tensor, mask: Tensor, hidden: Maybe = None) -> Tensor:
        return self._value(self.summaries(self.estate(obs, mask))[0], hidden)

    def greedy(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Tier by tier: the most probable region, then its most probable node."""
        estate = self.estate(obs, mask)
        summaries, valid = self.summaries(estate)
        region = self._region_logp(summaries, valid).argmax(dim=-1)
        rows, node_mask = self.region_rows(estate, region)
        return region * self.nodes_per_region + self._node_logp(rows, node_mask).argmax(dim=-1)

    def masked_logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`log p(region) + log p(node | region)` of every node (every region's nodes
        scored: the export's and the tests' view, not the learner's)."""
        estate = self.estate(obs, mask)
        summaries, valid = self.summaries(estate)
        region_logp = self._region_logp(summaries, valid)
        shared = estate.globals[:, None, None, :].expand(*estate.nodes.shape[:3], -1)
        rows = torch.cat([estate.nodes, shared], dim=-1)
        joint = region_logp.unsqueeze(-1) + self._node_logp(rows, estate.mask)
        return joint.reshape(len(obs), -1).masked_fill(~mask, MASKED_LOGIT)


def build_network(
    kind: str,
    obs_dim: int,
    num_actions: int,
    hidden: int,
    nodes_per_region: int,
    scorer_depth: int = 2,
    privileged: int = 0,
) -> ActorCritic:
    """The network `ppo.policy` names, for an estate of this observation and action size;
    `privileged`: the width of what its critic reads beyond the observation (two-tier)."""
    if privileged and kind != "two-tier":
        raise ValueError(f"only the two-tier network has a privileged critic, not {kind!r}")
    if kind == "two-tier":
        return TwoTier(hidden, nodes_per_region, scorer_depth, privileged)
    if kind == "mlp":
        return FlatMLP(obs_dim, num_actions, hidden)
    if kind == "node-scorer":
        return NodeScorer(hidden)
    raise ValueError(f"unknown network kind {kind!r}; expected one of {KINDS}")
