"""The worlds' state as a file keeps it: each node's live completions, not its whole ring.

A node's ring has room for C predicted completions but holds `count` of them, from
`head` on. The kernels never read a slot outside that window (`advance` pops from the
head, `admit` writes just past the last), so a file that keeps only the live slots
resumes the worlds bit for bit. Why it matters: a learner saves its worlds every round,
and on a 10,000-node estate with 8 worlds the ring is 25.6 MB of a 32 MB file, almost all
of it empty slots, written and read again by every region in every round.

`compact` and `expand` work on the `get_state()` dict (`MultiCloudSim`'s or `MixedSim`'s,
laid out alike). A state saved whole (files from before the compaction) expands to itself.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numba import njit

from fedmc_flwr.sim import compile_cache

compile_cache.install()  # before the @njit below (see kernel.py)

LIVE = "ring_live"
"""The live completions, env by env, node by node, oldest first."""
SHAPE = "ring_shape"
"""The ring's shape [B, N, C], which the live completions do not tell."""


@njit(cache=True)
def _copy_live(ring, head, count, live, into_ring):
    """Each node's live slots, oldest first, from the ring into `live` (the compact
    order) or, `into_ring`, back from `live` into their slots."""
    capacity = ring.shape[2]
    k = 0
    for b in range(ring.shape[0]):
        for n in range(ring.shape[1]):
            slot = head[b, n]
            for _ in range(count[b, n]):
                if into_ring:
                    ring[b, n, slot] = live[k]
                else:
                    live[k] = ring[b, n, slot]
                k += 1
                slot = slot + 1 if slot + 1 < capacity else 0


def compact(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`state` with its ring replaced by the live completions and the ring's shape."""
    ring, head, count = state["ring"], state["head"], state["count"]
    live = np.empty(int(count.sum()), dtype=ring.dtype)
    _copy_live(ring, head, count, live, False)
    kept = {name: value for name, value in state.items() if name != "ring"}
    return kept | {LIVE: live, SHAPE: np.array(ring.shape, dtype=np.int64)}


def expand(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The state `compact` was given, but for the ring's free slots, which are zero (no
    kernel reads them). A state that holds its whole ring is returned as it is."""
    if LIVE not in state:
        return dict(state)
    shape, live = tuple(int(s) for s in state[SHAPE]), np.asarray(state[LIVE])
    head, count = np.asarray(state["head"]), np.asarray(state["count"])
    capacity = shape[2] if len(shape) == 3 else 0
    fits = len(shape) == 3 and head.shape == count.shape == shape[:2]
    if not fits or int(count.sum()) != live.size or (count < 0).any() or (count > capacity).any():
        raise ValueError(
            f"saved queues do not match: ring {shape}, head {head.shape}, count "
            f"{count.shape} holding {int(count.sum())} jobs, {live.size} completions saved"
        )
    if (head < 0).any() or (head >= capacity).any():
        raise ValueError(f"saved queue heads outside a ring of {capacity} slots")
    ring = np.zeros(shape, dtype=live.dtype)
    _copy_live(ring, head.astype(np.int64), count.astype(np.int64), live, True)
    kept = {name: value for name, value in state.items() if name not in (LIVE, SHAPE)}
    return kept | {"ring": ring}
