"""A message's arrays travel as one: the network, its statistics and any control variate.

Flower moves each array of a message as objects of its own (the array and its chunks),
and every hop fetches or sends them one request at a time, two at once: the ServerApp
to the SuperLink, the SuperLink to a SuperNode, the SuperNode to its ClientApp, and the
reply back the same way. small_demo's network and statistics are 24 arrays (19,708
bytes), so a message was some fifty requests a hop; on machines whose cores are busy
training, each request waits to be scheduled, and a deployment round spent seconds on
them. One bundle makes a message a few objects whatever the network's shape, under both
engines, and carries the same bytes: every array comes back with its dtype, shape and
values bit for bit.

A bundle is one 1-D uint8 array: `MAGIC`, the header's length (8 bytes, little-endian),
the header (JSON: each array's dtype and shape), then each array's bytes in order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

MAGIC = b"fedmc-arrays-1\n"
LENGTH_BYTES = 8
KINDS = "biuf"
"""The dtype kinds a bundle may hold (bool, signed, unsigned, float): never objects."""


def bundle(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """`arrays` as the one-array list a Flower message carries."""
    arrays = [np.asarray(a, order="C") for a in arrays]  # (ascontiguousarray makes 0-d 1-d)
    for a in arrays:
        if a.dtype.kind not in KINDS:
            raise ValueError(f"cannot bundle an array of dtype {a.dtype}")
    header = json.dumps([[a.dtype.str, list(a.shape)] for a in arrays]).encode()
    head = MAGIC + len(header).to_bytes(LENGTH_BYTES, "little") + header
    parts = [np.frombuffer(head, dtype=np.uint8)]
    parts += [a.reshape(-1).view(np.uint8) for a in arrays]
    return [np.concatenate(parts)]


def unbundle(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The arrays of a bundle (fresh, writable); ValueError, saying what is wrong, for
    anything that is not one."""
    if len(arrays) != 1:
        raise ValueError(f"{len(arrays)} arrays where one bundle was expected")
    raw = np.asarray(arrays[0])
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ValueError(f"a bundle is 1-D uint8, got {raw.dtype} of shape {raw.shape}")
    start = len(MAGIC) + LENGTH_BYTES
    if len(raw) < start or raw[: len(MAGIC)].tobytes() != MAGIC:
        raise ValueError("not a bundle of arrays (no header)")
    length = int.from_bytes(raw[len(MAGIC) : start].tobytes(), "little")
    try:
        header = json.loads(raw[start : start + length].tobytes())
        layout = [(np.dtype(dtype), tuple(int(n) for n in shape)) for dtype, shape in header]
    except (ValueError, TypeError) as exc:
        raise ValueError(f"a bundle's header is unreadable: {exc}") from None
    offset, out = start + length, []
    for dtype, shape in layout:
        if dtype.kind not in KINDS or any(n < 0 for n in shape):
            raise ValueError(f"a bundle may not hold an array of {dtype} and shape {shape}")
        size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if offset + size > len(raw):
            raise ValueError("a bundle ends before its arrays do")
        # one copy, which also aligns the array wherever its bytes sat in the bundle
        out.append(raw[offset : offset + size].copy().view(dtype).reshape(shape))
        offset += size
    if offset != len(raw):
        raise ValueError(f"a bundle holds {len(raw) - offset} bytes beyond its arrays")
    return out
