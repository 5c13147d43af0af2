"""The two-tier network's acting path, compiled: one call per batched decision.

Why: a rollout step of the two-tier network in torch is some 55 small ops (the summaries,
two scorers, two masked softmaxes, two samples, the critic), each a few microseconds of
dispatch around a few hundred multiply-adds; for a batch of 64 worlds that is most of a
training round's time, more than the world's own step and more than the update. Here the
same arithmetic runs in one numba call per decision, world by world: normalise the
observation, summarise each region, score the regions, sample one, score its nodes,
sample one, and read the critic.

It copies the torch network's weights when it is built (the learner builds one per
rollout, after the update has written them), and it draws from the same uniforms the torch
path would be given (`networks.TwoTier.sample`): the same inputs give the same action,
log-probability and value up to float32 rounding (the sums run in another order), which
`tests/test_acting.py` holds against the torch network, masks included. The update stays
in torch: it reads the inputs this path stores (`summaries`, `valid`, `rows`,
`node_mask`), exactly what `TwoTier.sample` stores.

Normalisation is the learner's own (`ObservationNorm`): `(obs - shift) * scale` in
float64 per feature, clipped to +-OBS_CLIP, then float32, the same numbers as
`ObservationNorm.__call__`. Only the network's layers use reassociating float32 maths.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from fedmc_flwr.policies import two_tier_kernels as kernels
from fedmc_flwr.policies.networks import ActorCritic, TwoTier
from fedmc_flwr.policies.normalisers import Affine, standardise
from fedmc_flwr.policies.two_tier_kernels import SUMMARY_WIDTH
from fedmc_flwr.sim.layout import GLOBAL_WIDTH, NODE_WIDTH

Array = np.ndarray
Maybe = np.ndarray | None


class Decision(NamedTuple):
    """One batched decision of the compiled path: numpy arrays, batch first."""

    action: np.ndarray
    logprob: np.ndarray
    value: np.ndarray
    inputs: dict[str, np.ndarray]
    """What `TwoTier.evaluate` reads back in the update (`summaries`, `valid`, `rows`,
    `node_mask`)."""


def _pack(scorers: list[nn.Sequential]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The scorers' weights (transposed to `[in, out]`) and biases copied into one float32
    array, and per scorer its layer table (`two_tier_kernels.scores`). One array and a few
    small tables are what a compiled call takes fastest: a tuple of arrays costs numba's
    dispatcher microseconds per call to type."""
    chunks: list[np.ndarray] = []
    tables: list[np.ndarray] = []
    offset = 0
    for scorer in scorers:
        table = []
        for layer in (m for m in scorer if isinstance(m, nn.Linear)):
            weight = layer.weight.detach().numpy().T.reshape(-1)
            bias = layer.bias.detach().numpy()
            fan_in, fan_out = layer.in_features, layer.out_features
            table.append((offset, fan_in, fan_out, offset + len(weight)))
            chunks += [weight, bias]
            offset += len(weight) + len(bias)
        tables.append(np.array(table, dtype=np.int64))
    return np.concatenate(chunks).astype(np.float32), tables


class Request(NamedTuple):
    """One batched decision's inputs, as every acting path receives them."""

    obs: Array
    mask: Array
    affine: Affine
    noise: Maybe
    """`[B, noise_width]` uniforms; None (the compiled path's `greedy` only): the most
    probable action, through the same kernel as a draw."""
    hidden: Maybe
    teacher: Maybe
    """int64 actions to take instead of drawing, or None."""


class Actor(ABC):
    """An acting path of one network: what a learner's rollout and a trained policy call.
    Every path takes the same inputs and gives the same outputs (up to float32 rounding),
    so the learner picks the fastest (`actor_of`) and the torch one is the reference."""

    def __init__(self, network: ActorCritic) -> None:
        self.network = network

    def noise_width(self, num_nodes: int) -> int:
        """Uniforms one decision draws per env (`ActorCritic.noise_width`)."""
        return self.network.noise_width(num_nodes)

    def decide(
        self,
        obs: Array,
        mask: Array,
        affine: Affine,
        noise: Array,
        hidden: Maybe = None,
        teacher: Maybe = None,
        out: Decision | None = None,
    ) -> Decision:
        """A sample of every env's action, drawn with `noise` (`[B, noise_width]`
        uniforms); `affine` is the normaliser's per-feature `(shift, scale)`;
        `hidden` what a privileged critic reads (`[B, P]`); `teacher` actions to take
        instead of drawing, scored as if drawn. `out`: arrays shaped as this decision's
        to write it into and return (a rollout's rows for this step: no copy of each
        step's arrays into the rollout's), else fresh ones."""
        forced = None if teacher is None else teacher.astype(np.int64, copy=False)
        return self._decide(Request(obs, mask, affine, noise, hidden, forced), out)

    @abstractmethod
    def _decide(self, request: Request, out: Decision | None = None) -> Decision: ...

    @abstractmethod
    def greedy(self, obs: Array, mask: Array, affine: Affine) -> Array:
        """Every env's most probable action (the two-tier network's: its most probable
        region, then that region's most probable node)."""

    @abstractmethod
    def value(self, obs: Array, mask: Array, affine: Affine, hidden: Maybe = None) -> Array:
        """`[B]` critic values (float32)."""


class TwoTierActor(Actor):
    """The compiled acting path of one `TwoTier` network (see the module docstring).

    It copies the weights when built (transposed, as the compiled loops read them best):
    build one after every change of the weights, as the learner does per rollout (a few
    microseconds)."""

    def __init__(self, network: TwoTier) -> None:
        super().__init__(network)
        self.nodes_per_region = network.nodes_per_region
        self.privileged = network.privileged
        scorers = [network.region_scorer, network.node_scorer, network.critic]
        self._params, (self._region, self._node, self._critic) = _pack(scorers)

    def _buffers(self, batch: int, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
        regions = num_nodes // self.nodes_per_region
        summaries = np.empty((batch, regions, SUMMARY_WIDTH), dtype=np.float32)
        return summaries, np.empty((batch, regions), dtype=np.bool_)

    def greedy(self, obs: Array, mask: Array, affine: Affine) -> Array:
        return self._decide(Request(obs, mask, affine, None, None, None)).action

    def _critic_inputs(self, batch: int, hidden: Maybe, into: Maybe = None) -> Array:
        """The `[B, P]` privileged inputs as the kernels read them (zeros where the caller
        needs no value, as the greedy act), written into `into` where it is given."""
        if into is not None:
            into[...] = 0.0 if hidden is None else hidden
            return into
        if hidden is None:
            return np.zeros((batch, self.privileged), dtype=np.float32)
        return np.ascontiguousarray(hidden, dtype=np.float32)

    def _decision(self, batch: int, num_nodes: int) -> Decision:
        """Fresh arrays for a decision of `batch` envs (what `decide` writes)."""
        n = self.nodes_per_region
        summaries, valid = self._buffers(batch, num_nodes)
        inputs = {
            "summaries": summaries,
            "valid": valid,
            "rows": np.empty((batch, n, NODE_WIDTH + GLOBAL_WIDTH), dtype=np.float32),
            "node_mask": np.empty((batch, n), dtype=np.bool_),
        }
        if self.privileged:
            inputs["privileged"] = np.empty((batch, self.privileged), dtype=np.float32)
        logprob, value = np.empty((2, batch), dtype=np.float32)
        return Decision(np.empty(batch, dtype=np.int64), logprob, value, inputs)

    def _decide(self, request: Request, out: Decision | None = None) -> Decision:
        obs, mask, (shift, scale), noise, hidden, teacher = request
        batch, num_nodes = mask.shape
        decision = self._decision(batch, num_nodes) if out is None else out
        action, logprob, value, inputs = decision
        if teacher is not None:  # the kernel scores the actions `action` holds
            action[...] = teacher
        greedy = noise is None
        if noise is None:
            noise = np.empty((batch, self.noise_width(num_nodes)), dtype=np.float32)
        tiers = (inputs["summaries"], inputs["valid"], inputs["rows"], inputs["node_mask"])
        weights = (self._params, self._region, self._node, self._critic)
        critic_inputs = self._critic_inputs(batch, hidden, inputs.get("privileged"))
        flags = (greedy, teacher is not None)
        n = self.nodes_per_region
        outputs = (action, logprob, value, *tiers)
        kernels.decide(obs, mask, shift, scale, n, *weights, noise, *flags, critic_inputs, *outputs)
        return decision

    def value(self, obs: Array, mask: Array, affine: Affine, hidden: Maybe = None) -> Array:
        batch, num_nodes = mask.shape
        summaries, valid = self._buffers(batch, num_nodes)
        shift, scale = affine
        n = self.nodes_per_region
        critic = (self._params, self._critic, self._critic_inputs(batch, hidden))
        return kernels.values(obs, mask, shift, scale, n, *critic, summaries, valid)


class TorchActor(Actor):
    """Any network's acting path through its torch forward: the reference the compiled
    path is tested against, and the path of the networks that have no compiled one."""

    @torch.inference_mode()
    def _decide(self, request: Request, out: Decision | None = None) -> Decision:
        obs, mask, affine, noise, hidden, teacher = request
        x, m = torch.from_numpy(standardise(obs, affine)), torch.from_numpy(mask)
        forced = None if teacher is None else torch.from_numpy(teacher)
        step = self.network.sample(x, m, torch.from_numpy(noise), _tensor(hidden), forced)
        inputs = {key: value.numpy() for key, value in step.inputs.items()}
        decision = Decision(step.action.numpy(), step.logprob.numpy(), step.value.numpy(), inputs)
        if out is None:
            return decision
        for into, value in zip(out[:3], decision[:3], strict=True):
            into[...] = value
        for key, value in inputs.items():
            out.inputs[key][...] = value
        return out

    @torch.inference_mode()
    def greedy(self, obs: Array, mask: Array, affine: Affine) -> Array:
        x = torch.from_numpy(standardise(obs, affine))
        return self.network.greedy(x, torch.from_numpy(mask)).numpy()

    @torch.inference_mode()
    def value(self, obs: Array, mask: Array, affine: Affine, hidden: Maybe = None) -> Array:
        x = torch.from_numpy(standardise(obs, affine))
        return self.network.value(x, torch.from_numpy(mask), _tensor(hidden)).numpy()


def _tensor(array: np.ndarray | None) -> torch.Tensor | None:
    return None if array is None else torch.from_numpy(np.asarray(array, dtype=np.float32))


def actor_of(network: ActorCritic) -> Actor:
    """The fastest acting path of `network`: compiled for the two-tier network, torch's
    forward for the others."""
    return TwoTierActor(network) if isinstance(network, TwoTier) else TorchActor(network)


def uniforms(shape: tuple[int, ...], generator: torch.Generator) -> np.ndarray:
    """The uniforms of one decision (`[B, noise_width]`), or of a rollout's decisions
    (`[T, B, noise_width]`), from the learner's torch generator (its saved state covers
    them, so a resumed learner draws the same). torch fills them one after another from
    the generator's stream, so a rollout's draw holds each step's draw in turn, bit for
    bit, and leaves the generator where the steps' draws would have."""
    return torch.rand(shape, generator=generator).numpy()
