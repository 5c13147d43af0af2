"""Where a run starts: afresh, over an earlier run, or where a killed run stopped.

`prepare_experiment` decides, before round 1, from the run's `on-existing` choice:

- `refuse` (the default): an experiment directory that already holds results is an error;
- `overwrite`: the files an earlier run wrote are removed first;
- `resume`: continue after the last completed round (`progress.json`): the global weights
  and the server optimiser's state of that round's checkpoint, the tables cut back to that
  round (rows of a round that was under way are dropped, so none is duplicated), and the
  round count; each region's learner resumes from its own state file of that round. The
  experiment's saved config must equal this run's, so a resumed run is the same run. With
  nothing completed yet, or nothing there at all, `resume` simply starts the run.

Every problem (a different config, a corrupt or mismatched checkpoint, an unreadable
progress file) is a `ResumeError` with one line that names the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from fedmc_flwr.errors import InputError
from fedmc_flwr.federation.aggregation import Weights, check_update
from fedmc_flwr.federation.drift import DRIFT_FILE
from fedmc_flwr.federation.run_files import PROGRESS_FILE
from fedmc_flwr.federation.server_optimizers import ServerState
from fedmc_flwr.policies.checkpoints import (
    CheckpointError,
    checkpoint_arrays,
    read_checkpoint,
    round_checkpoint,
)
from fedmc_flwr.results import PER_SEED_FILE, experiment_dir, holds_results, keep_rows

ON_EXISTING = ("refuse", "overwrite", "resume")
TABLES = ("metrics.csv", "timing.csv", PER_SEED_FILE, DRIFT_FILE)


class ResumeError(InputError, ValueError):
    """A run cannot continue from what its experiment directory holds."""

    label = "cannot resume: "


@dataclass
class StartPoint:
    """Where a run starts."""

    completed_round: int
    """Rounds already done (0 for a fresh run)."""
    train_steps: int
    """Environment steps trained so far, over all regions."""
    weights: Weights
    """The global weights the next round starts from."""
    server_state: ServerState = field(default_factory=ServerState)
    """The server optimiser's state after the last completed round."""


def resume_weights(path: Path, reference: Weights) -> Weights:
    """A checkpoint's arrays, checked against the network's shapes and dtypes."""
    try:
        weights = read_checkpoint(path)
    except CheckpointError as exc:
        raise ResumeError(str(exc)) from None
    problem = check_update(weights, reference)
    if problem is not None:
        raise ResumeError(f"{path}: does not fit this experiment's network ({problem})")
    return weights


WHEREVER = {"results_dir"}
"""Keys that say where an experiment lives, not what it is: a moved one still resumes."""


def _differing_key(saved: str, resolved: str) -> str | None:
    """The first dotted key (not in WHEREVER) whose value differs between two configs."""
    flat = [
        dict(_flatten(OmegaConf.to_container(OmegaConf.create(text)), ""))
        for text in (saved, resolved)
    ]
    for key in sorted((set(flat[0]) | set(flat[1])) - WHEREVER):
        if flat[0].get(key) != flat[1].get(key):
            return key
    return None


def _flatten(value: object, prefix: str) -> list[tuple[str, object]]:
    if isinstance(value, dict):
        return [pair for key, item in value.items() for pair in _flatten(item, f"{prefix}{key}.")]
    return [(prefix.rstrip("."), value)]


def _progress(out: Path) -> tuple[int, int]:
    path = out / PROGRESS_FILE
    if not path.exists():
        return 0, 0
    try:
        progress = json.loads(path.read_text())
        return int(progress["completed_round"]), int(progress["train_steps"])
    except (ValueError, KeyError, TypeError):
        raise ResumeError(f"{path}: not a readable progress file") from None


def resume_point(out: Path, resolved: str, initial: Weights, rounds: int) -> StartPoint:
    """Where a run over `out` continues (see the module docstring); `out` is not changed."""
    if not holds_results(out):
        return StartPoint(0, 0, initial)
    saved = out / "config.yaml"
    try:
        differs = _differing_key(saved.read_text(), resolved)
    except OSError:
        raise ResumeError(f"{saved}: missing; the experiment cannot be resumed") from None
    except Exception:  # a damaged YAML file
        raise ResumeError(f"{saved}: not a readable config") from None
    if differs is not None:
        raise ResumeError(
            f"{out}: this run's config differs from the experiment's own at {differs!r}; "
            "resume with the same config and overrides, or pass --overwrite"
        )
    completed, steps = _progress(out)
    if completed > rounds:
        raise ResumeError(f"{out / PROGRESS_FILE}: round {completed} is past train.rounds")
    if completed == 0:
        return StartPoint(0, 0, initial)
    checkpoint = round_checkpoint(out, completed)
    weights = resume_weights(checkpoint, initial)
    state = ServerState.from_arrays(checkpoint_arrays(checkpoint))
    return StartPoint(completed, steps, weights, state)


def prepare_experiment(
    results_dir: str, name: str, on_existing: str, resolved: str, initial: Weights, rounds: int
) -> tuple[Path, StartPoint]:
    """The experiment directory, made ready for this run, and where the run starts."""
    if on_existing not in ON_EXISTING:
        raise ResumeError(f"on-existing = {on_existing!r}; expected one of {ON_EXISTING}")
    out = Path(results_dir).expanduser().resolve() / name
    start = StartPoint(0, 0, initial)
    if on_existing == "resume":
        start = resume_point(out, resolved, initial, rounds)
    if start.completed_round == 0:
        out = experiment_dir(results_dir, name, overwrite=on_existing != "refuse")
        (out / "config.yaml").write_text(resolved)
        return out, start
    for table in TABLES:
        path = out / table
        if path.exists():
            try:
                keep_rows(path, lambda row: int(row["round"]) <= start.completed_round)
            except (ValueError, KeyError, TypeError):
                raise ResumeError(f"{path}: not a readable results table") from None
    return out, start
