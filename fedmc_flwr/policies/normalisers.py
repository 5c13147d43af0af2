"""Running normalisers of a learner's inputs and returns, federation-ready.

Observation statistics are kept per feature, pooled over the nodes (`sim/layout.py`): one
mean and variance of "queue" for every node, not one per node index. So they have the same
size on every estate (regions with different estates pool them, and a policy read on a
bigger estate uses them as they are), and a static fact such as a node's speed, constant
per index, is standardised over the estate rather than divided by a variance of 0.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedmc_flwr.policies.moments import Moments, block_moments
from fedmc_flwr.sim import compile_cache
from fedmc_flwr.sim.layout import GLOBAL_FEATURES, NODE_FEATURES, NODE_WIDTH, ObsLayout

compile_cache.install()  # before the first @njit: numba picks the cache locator then

OBS_CLIP = 10.0
"""Normalised observations are clipped to +-OBS_CLIP (a node coming back from an outage
would otherwise be hundreds of standard deviations away)."""


class RunningNorm:
    """Running moments of a stream (here: discounted returns), federation-ready.

    `total` is what the learner normalises with: the moments the federation pooled so far
    plus what this learner saw since. `fresh` is only the latter, what a region sends back
    after a round: the server adds every region's fresh moments to the pooled ones, so no
    sample is ever counted twice (see `moments.py`).
    """

    def __init__(self, dim: int) -> None:
        self.total = Moments.empty(dim)
        self.fresh = Moments.empty(dim)

    def update(self, batch: np.ndarray) -> None:
        self.add(Moments.of(batch))

    def add(self, seen: Moments) -> None:
        """Count moments seen (those of a batch) in both `total` and `fresh`."""
        self.total = self.total.merge(seen)
        self.fresh = self.fresh.merge(seen)

    def start_from(self, pooled: Moments) -> None:
        """Adopt the federation's pooled moments; nothing seen since."""
        self.total = pooled
        self.fresh = Moments.empty(len(pooled.mean))

    def state(self, prefix: str) -> dict[str, np.ndarray]:
        out = {}
        for part, moments in (("total", self.total), ("fresh", self.fresh)):
            for key, array in zip(("count", "mean", "var"), moments.arrays(), strict=True):
                out[f"{prefix}.{part}.{key}"] = array
        return out

    def load(self, prefix: str, state: dict[str, np.ndarray]) -> None:
        def read(part: str) -> Moments:
            keys = (f"{prefix}.{part}.{key}" for key in ("count", "mean", "var"))
            return Moments.from_arrays([state[key] for key in keys])

        self.total, self.fresh = read("total"), read("fresh")


FEATURES = (*NODE_FEATURES, *GLOBAL_FEATURES)
Affine = tuple[np.ndarray, np.ndarray]
"""A normaliser's `(shift, scale)`: per feature, or spread over a flat observation."""
STANDARDISED = np.array([f.standardised for f in FEATURES])
"""Flags, the local flag and the clock's sin and cos pass through unchanged, so a feature
that is constant inside a region can never be blown up to +-OBS_CLIP."""


class ObservationNorm(RunningNorm):
    """Per-feature moments of observations, each node's row counted as one sample (its
    global features repeated beside it, which leaves their mean and variance unchanged).
    The number of nodes is read from each batch's width, so it normalises any estate."""

    def __init__(self) -> None:
        super().__init__(len(FEATURES))

    def update(self, batch: np.ndarray) -> None:
        num_nodes = ObsLayout.of_width(batch.shape[-1]).num_nodes
        mean, var = _observation_moments(batch, num_nodes)
        self.add(Moments(float(batch.shape[0] * num_nodes), mean, var))

    def feature_affine(self) -> Affine:
        """`(shift, scale)` per feature (`FEATURES` order, float64): the standardised
        features' moments, the others 0 and 1."""
        shift = np.where(STANDARDISED, self.total.mean, 0.0)
        scale = np.where(STANDARDISED, 1.0 / np.sqrt(self.total.var + 1e-8), 1.0)
        return shift, scale

    def affine(self, num_nodes: int) -> Affine:
        """`feature_affine` over the flat observation of an estate of `num_nodes` nodes.
        The ONNX export bakes the same two arrays in, so a served policy reads
        bit-identical inputs."""
        return per_column(self.feature_affine(), num_nodes)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """(obs - mean) / std on the standardised features, clipped; the rest unchanged."""
        return standardise(obs, self.feature_affine())


@njit(cache=True)
def _observation_moments(batch: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and variance of a `[B, width]` batch of observations (`FEATURES`
    order, float64): the node features over every node row, the global features over
    the batch's rows (their moments over each node's copy of them are the same:
    repeating a row n times changes neither its mean nor its variance). One compiled
    call a step, reading the observations in place (`moments.block_moments`)."""
    flat = num_nodes * NODE_WIDTH
    shared = batch.shape[1] - flat
    mean = np.zeros(NODE_WIDTH + shared)
    var = np.zeros(NODE_WIDTH + shared)
    block_moments(batch, 0, num_nodes, NODE_WIDTH, mean[:NODE_WIDTH], var[:NODE_WIDTH])
    block_moments(batch, flat, 1, shared, mean[NODE_WIDTH:], var[NODE_WIDTH:])
    return mean, var


def per_column(affine: Affine, num_nodes: int) -> Affine:
    """A per-feature `(shift, scale)` spread over the flat observation of `num_nodes` nodes."""

    def spread(per_feature: np.ndarray) -> np.ndarray:
        node, shared = per_feature[:NODE_WIDTH], per_feature[NODE_WIDTH:]
        return np.concatenate([np.tile(node, num_nodes), shared])

    return spread(affine[0]), spread(affine[1])


def standardise(obs: np.ndarray, affine: Affine) -> np.ndarray:
    """`ObservationNorm`'s input to a network: `(obs - shift) * scale` in float64 with a
    per-feature `affine`, clipped to +-OBS_CLIP, as float32."""
    shift, scale = per_column(affine, ObsLayout.of_width(obs.shape[-1]).num_nodes)
    return np.clip((obs - shift) * scale, -OBS_CLIP, OBS_CLIP).astype(np.float32)
