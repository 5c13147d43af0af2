"""A policy's saved weights: where each kind of run files them, and one way to read them.

Two kinds of file hold a policy. A federated run writes the global weights of every
round as `<experiment>/checkpoints/round_NNN.npz` (arrays `w000, w001, ...`, in
`PPOLearner.get_weights` order); `fedmc train` saves whole learners as
`<experiment>/checkpoints/<policy>.npz` (`PPOLearner.save`), and so does every region's
ClientApp, one `round_NNN.npz` per round in its own state folder. `read_checkpoint`
takes either kind, so `export`, `transfer`, the arena and a resumed run read a file the
same way and refuse a bad one with the same line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedmc_flwr.errors import InputError
from fedmc_flwr.policies.ppo import weights_of_state
from fedmc_flwr.results import CHECKPOINTS

_PREFIX = "round_"


class CheckpointError(InputError, ValueError):
    """A checkpoint that is missing, unreadable or of neither kind, in one line."""


def round_file(folder: Path, server_round: int) -> Path:
    """`<folder>/round_NNN.npz`: a round's file, the global weights' or a region's learner."""
    return folder / f"{_PREFIX}{server_round:03d}.npz"


def round_checkpoint(out: Path, server_round: int) -> Path:
    """The global weights a federated run wrote after `server_round`."""
    return round_file(out / CHECKPOINTS, server_round)


def learner_checkpoint(out: Path, policy: str) -> Path:
    """A learner `fedmc train` saved under its policy name (e.g. `ppo-local-eu-west`)."""
    return out / CHECKPOINTS / f"{policy}.npz"


def round_of(path: Path) -> int | None:
    """The round a `round_NNN.npz` file is of, or None for any other name."""
    suffix = path.stem.removeprefix(_PREFIX)
    return (
        int(suffix) if path.suffix == ".npz" and suffix != path.stem and suffix.isdigit() else None
    )


def saved_rounds(folder: Path) -> list[int]:
    """The rounds of the `round_NNN.npz` files in `folder`, in order."""
    return sorted(r for r in map(round_of, folder.glob(f"{_PREFIX}*.npz")) if r is not None)


def run_config(checkpoint: Path) -> Path:
    """`<experiment>/config.yaml` of a checkpoint in `<experiment>/checkpoints/`."""
    return checkpoint.resolve().parent.parent / "config.yaml"


def write_weights(path: Path, weights: Sequence[np.ndarray]) -> None:
    """Weights as `w000, w001, ...` in one .npz (no pickle), written atomically: a run
    killed mid-write leaves the previous file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as handle:
        np.savez(handle, **{f"w{k:03d}": np.asarray(a) for k, a in enumerate(weights)})
    os.replace(partial, path)


def read_checkpoint(path: Path) -> list[np.ndarray]:
    """The policy's arrays (`PPOLearner.get_weights` order) from either kind of file."""
    try:
        with np.load(path, allow_pickle=False) as data:
            keys = sorted(k for k in data.files if k.startswith("w") and k[1:].isdigit())
            if keys:
                return [data[k] for k in keys]
            if "param.0" in data.files:
                return weights_of_state({k: data[k] for k in data.files})
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except Exception as exc:  # zip, npy and pickle-refusal errors come as several types
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__})") from None
    raise CheckpointError(
        f"{path}: not a checkpoint (neither w000, w001, ... arrays nor a saved learner)"
    )
