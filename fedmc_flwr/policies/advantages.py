"""Generalised advantage estimation (GAE) of a learner's rollout, compiled.

A module of its own, without torch, so that a process that only prepares a run can
compile it into the shared cache with the acting path's kernels
(`two_tier_kernels.warm_cache`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedmc_flwr.sim import compile_cache

compile_cache.install()  # before the first @njit: numba picks the cache locator then


@njit(cache=True)
def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    cut: np.ndarray,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """Advantages of a [T, B] rollout of a continuing task (float32 arrays).

    `next_values[t]` is the value of the state step t led to (for a truncated env, the
    state before its restart); `cut[t]` marks those restarts, where the GAE sum stops. An
    episode's end is a truncation, never a terminal state: it always bootstraps.

    Compiled: as a loop of torch ops over the [B] rows it cost some 2 ms a rollout of
    128 steps, a percent of training. The arithmetic is that loop's, op for op in float32
    (torch rounds a Python scalar to float32 before it multiplies a float32 tensor, and
    `gamma * lam` is taken in float64 first; no fused multiply-adds), so the numbers are
    those of the torch loop bit for bit.
    """
    steps, batch = rewards.shape
    discount = np.float32(gamma)
    trace = np.float32(gamma * lam)
    advantages = np.empty_like(rewards)
    running = np.zeros(batch, dtype=rewards.dtype)
    for t in range(steps - 1, -1, -1):
        for b in range(batch):
            keep = np.float32(0.0) if cut[t, b] else np.float32(1.0)
            delta = rewards[t, b] + discount * next_values[t, b] - values[t, b]
            running[b] = delta + trace * keep * running[b]
            advantages[t, b] = running[b]
    return advantages
