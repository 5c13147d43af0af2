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
import zipfile
from collections.abc import Mapping, Sequence
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


def write_weights(
    path: Path, weights: Sequence[np.ndarray], extra: Mapping[str, np.ndarray] | None = None
) -> None:
    """Weights as `w000, w001, ...` in one .npz (no pickle), with `extra` arrays beside them
    under their own names (the server optimiser's state: one file, so a round's weights and
    state are never out of step), written atomically: a run killed mid-write leaves the
    previous file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    arrays = {f"w{k:03d}": np.asarray(a) for k, a in enumerate(weights)}
    with partial.open("wb") as handle:
        np.savez(handle, **arrays, **(extra or {}))
    os.replace(partial, path)


def _why_unreadable(exc: Exception) -> str:
    """What a reader's error means for a checkpoint file, in words the user can act on
    (never the error's own text, which may quote names stored in the file)."""
    if isinstance(exc, EOFError):
        return "empty"
    if isinstance(exc, zipfile.BadZipFile):
        return "not a complete .npz archive"
    if isinstance(exc, IsADirectoryError):
        return "a folder"
    if isinstance(exc, ValueError) and "Object arrays" in str(exc):
        return "holds object arrays, which would need pickle: refused"
    if isinstance(exc, ValueError) and "pickled" in str(exc):
        return "neither .npz nor .npy: numpy would unpickle it, refused"
    return type(exc).__name__


def checkpoint_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz file by name, read without pickle."""
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise CheckpointError(f"{path}: one bare .npy array, not an .npz checkpoint")
        with data:
            return {key: data[key] for key in data.files}
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except Exception as exc:  # zip, npy and pickle-refusal errors come as several types
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({_why_unreadable(exc)})"
        ) from None


def _policy_arrays(path: Path, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The weight list of either kind of file; a file of neither kind is refused."""
    keys = sorted(k for k in arrays if k.startswith("w") and k[1:].isdigit())
    if keys:
        return [arrays[k] for k in keys]
    if "param.0" not in arrays:
        raise CheckpointError(
            f"{path}: not a checkpoint (neither w000, w001, ... arrays nor a saved learner)"
        )
    try:
        return weights_of_state(arrays)
    except (KeyError, ValueError) as exc:
        raise CheckpointError(
            f"{path}: an incomplete saved learner ({type(exc).__name__})"
        ) from None


def read_checkpoint(path: Path) -> list[np.ndarray]:
    """The policy's arrays (`PPOLearner.get_weights` order) from either kind of file.

    Never unpickles: `allow_pickle=False` refuses object arrays, and every other problem
    (a missing, empty, truncated or foreign file, arrays of text) is a `CheckpointError`."""
    weights = _policy_arrays(path, checkpoint_arrays(path))
    for k, array in enumerate(weights):
        if array.dtype.kind not in "biuf":
            raise CheckpointError(f"{path}: array {k} holds {array.dtype}, not numbers")
    return weights
