"""World seeds in three disjoint spaces: training, validation and test.

A world seed is a uint64 whose top two bits name its space, so a training episode can
never meet a held-out world and tuning never touches the seeds that report results: by
construction, not by luck. Held-out seeds depend only on the split, the region and their
index, never on the experiment seed, so every policy, every learner and every training
seed meets the same held-out worlds. That is what makes paired comparisons possible: the
world's arrivals, job sizes and outages do not depend on the actions taken.
"""

from __future__ import annotations

import numpy as np

TRAIN, VALIDATION, TEST = 0, 1, 2
SPLITS = {"validation": VALIDATION, "test": TEST}
"""Held-out splits by name (the values of `eval.split`)."""
_SPACE_SHIFT = 62
_REGION_SHIFT = 32
_LOW_BITS = (1 << _SPACE_SHIFT) - 1


def space_of(seed: int | np.integer) -> int:
    """TRAIN, VALIDATION or TEST: the space a world seed belongs to."""
    return int(seed) >> _SPACE_SHIFT


def training_seed(*keys: int) -> int:
    """A training world's seed: a hash of `keys` (e.g. learner seed, env, episode)."""
    digest = int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1, np.uint64)[0])
    return (TRAIN << _SPACE_SHIFT) | (digest & _LOW_BITS)


def heldout_seeds(split: str, region: int, count: int) -> np.ndarray:
    """The `count` held-out seeds of `region` in `split` ('validation' or 'test')."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(SPLITS)}")
    if not 0 <= region < 1 << (_SPACE_SHIFT - _REGION_SHIFT):
        raise ValueError(f"region {region} out of range")
    if not 0 < count <= 1 << _REGION_SHIFT:
        raise ValueError(f"count {count} out of range")
    base = (SPLITS[split] << _SPACE_SHIFT) | (region << _REGION_SHIFT)
    return np.uint64(base) + np.arange(count, dtype=np.uint64)


ARENA_SLOT = (1 << (_SPACE_SHIFT - _REGION_SHIFT)) - 1
"""The region field of arena worlds' seeds: one that no region's index reaches."""


def arena_seeds(split: str, count: int) -> np.ndarray:
    """The `count` joint-arena worlds of `split` (`fedmc_flwr.experiments.arena`): held-out like a
    region's, and disjoint from every region's."""
    return heldout_seeds(split, ARENA_SLOT, count)


def heldout_phases(count: int) -> np.ndarray:
    """Where in the day each of `count` held-out episodes starts (fraction of the day):
    the midpoints of `count` equal strata, so every part of the day is judged equally."""
    return (np.arange(count) + 0.5) / count


def learner_seed(experiment_seed: int, region: int | None = None) -> int:
    """A learner's own seed (its network's initialisation, its sampling, its training
    worlds): one per experiment seed and region. `region=None` is the learner of all
    regions: the federation's initial global weights and centralised PPO."""
    key = [int(experiment_seed), 0] if region is None else [int(experiment_seed), 1, int(region)]
    return int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0] >> 1)
