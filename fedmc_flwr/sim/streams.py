"""Each env's random stream: splitmix64 over a per-env state word, counter-based, so that
an env's trajectory depends only on its seed and its actions, never on the batch size or
the order of the loop. Side draws (salted, the state word unmoved) add randomness that
moves no later draw.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedmc_flwr.sim import compile_cache

# before the first @njit below: numba picks a function's cache locator when decorating it
compile_cache.install()

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


_MIX1 = np.uint64(0xBF58476D1CE4E5B9)


_MIX2 = np.uint64(0x94D049BB133111EB)


_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


_INV_2_53 = 1.0 / 9007199254740992.0


SALT_RADIUS = np.uint64(0xD1B54A32D192ED03)  # two odd words for the side draws


SALT_ANGLE = np.uint64(0x8CB92BA72F3D8DD7)


SALT_START = np.uint64(0x5851F42D4C957F2D)  # and one for a trace's start point


SALT_SIZE = np.uint64(0xC2B2AE3D27D4EB4F)  # and one for a log-normal size's angle


@njit(cache=True, inline="always")
def _mix(z):
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@njit(cache=True, inline="always")
def _unit(z):
    """A uniform in (0, 1) from one 64-bit state word (its mix's top 53 bits)."""
    return ((_mix(z) >> _S11) + 0.5) * _INV_2_53


@njit(cache=True, inline="always")
def uniform(rng, b):
    """Next uniform in (0, 1) of env b's stream."""
    z = rng[b] + _GOLDEN
    rng[b] = z
    return _unit(z)


@njit(cache=True)
def seed_streams(seeds, rng):
    """Derive every env's stream state from its seed (one splitmix round, twice mixed)."""
    for b in range(seeds.shape[0]):
        rng[b] = _mix(_mix(np.uint64(seeds[b]) + _GOLDEN) + _GOLDEN)


@njit(cache=True, inline="always")
def side_uniform(rng, b, salt):
    """A uniform in (0, 1) read beside env b's stream without advancing it: a function of
    the stream's state and `salt` alone, so drawing it changes no later draw."""
    return _unit(rng[b] ^ salt)
