"""The process's freed memory kept for the learner's next minibatch, not handed back.

Why: glibc's malloc serves an allocation above its mmap threshold with a fresh mmap, and
hands the top of its heap back to the system once more than its trim threshold lies free
there; both thresholds move with what the process has freed so far. Every minibatch of an
update allocates and frees the same tensors, a dozen of 0.4 to 2.5 MB on small_demo, so
whether their pages stay mapped from one minibatch to the next depends on how the heap
happens to lie. When it lies badly, each minibatch faults its pages in again, zeroed: on
small_demo 28,000 page faults an update of 32 minibatches (some 110 MB), against 1,400
when a long-lived tensor happened to pin the heap's top; the node scorer, trained third
in one process, ran 20% slower from the faults alone. Fixed thresholds end the lottery:
an allocation up to 32 MiB comes from the heap, and up to 256 MiB of freed memory stays
mapped, so an update faults a few hundred pages at most.

Process-wide, as the torch thread count the learner sets beside it (`PPOLearner`), and
once per process. It changes where memory comes from, never a number computed. Where the
C library has no `mallopt` (not glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import functools

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameters (malloc.h)."""
MMAP_THRESHOLD = 32 * 2**20
"""The largest allocation served from the heap: glibc's own ceiling on 64-bit systems."""
TRIM_THRESHOLD = 256 * 2**20
"""Freed memory at the heap's top kept mapped, beyond any update's working set here."""


@functools.cache
def keep_freed_memory() -> bool:
    """Fix the allocator's thresholds (see the module); True where glibc took them."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # the mmap threshold first: setting either stops glibc moving both
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
