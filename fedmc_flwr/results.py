"""The results directory and its tidy metrics table.

`results/<experiment>/metrics.csv` has one row per (round, phase, client, policy) with a
fixed set of columns, so every producer (baselines, centralised or local training, the
federation) writes rows that one plotting and analysis path can read. It holds only what
the config and seed determine, so a rerun reproduces it bit for bit; wall-clock figures
(steps per second, wall time) go to `timing.csv` next to it, keyed the same way.

A batch of rows (say, one round's training rows) is appended with one `write` call on a
file opened for appending and synced to disk, so a process killed at any moment leaves
either all of the batch or none of it; `keep_rows` (used to resume a run) drops anything
after the last complete line as well.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedmc_flwr.errors import InputError
from fedmc_flwr.metrics import METRICS, POINT_METRICS
from fedmc_flwr.outputs import output_dir, resolved

COLUMNS: tuple[str, ...] = (
    "experiment",
    "round",
    "phase",
    "client",
    "policy",
    "seeds",
    "steps",
    "reward",
    "reward_ci95",
    *(metric.csv_column for metric in POINT_METRICS),
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clipfrac",
    "explained_variance",
    "reason",
)
"""Column order of metrics.csv. cost_usd, carbon_g and energy_kwh are means per job;
`reason` says why a region failed (phase `failed`) and is empty otherwise."""

TIMING_COLUMNS: tuple[str, ...] = (
    "experiment",
    "round",
    "phase",
    "client",
    "policy",
    "steps",
    "steps_per_second",
    "wall_time_s",
)
"""Column order of timing.csv (machine-dependent, so kept out of metrics.csv)."""

PER_SEED_COLUMNS: tuple[str, ...] = (
    "experiment",
    "train_seed",
    "round",
    "split",
    "client",
    "policy",
    "eval_seed",
    "start_phase",
    "train_steps",
    "jobs",
    *(metric.name for metric in METRICS),
)
"""Column order of per_seed.csv: one row per (experiment, train_seed, round, split, client,
policy, eval_seed), the held-out values of one world, so any two policies can be compared
paired per evaluation seed afterwards (`fedmc report`). `train_seed` is the experiment's
`seed`; `round` 0 holds the dispatchers (they do not train, so they are written once);
`train_steps` is how many environment steps the policy was trained on so far, summed over
its learners (0 for a dispatcher), which makes matched budgets visible; `jobs` is the
number of jobs per held-out world; the metrics are means per job of that world, and
`latency_p95_ms` is the 95th percentile over its jobs."""

PER_SEED_KEY: tuple[str, ...] = PER_SEED_COLUMNS[:7]
"""The columns that identify a per_seed.csv row."""

PER_SEED_VALUES: tuple[str, ...] = PER_SEED_COLUMNS[10:]
"""The per-seed values of a per_seed.csv row (reward first)."""

PER_SEED_FILE = "per_seed.csv"

CHECKPOINTS = "checkpoints"
"""The folder of a run's saved policies (`fedmc_flwr.policies.checkpoints`)."""
BOARD_DIR = "tb"
"""The folder of a run's TensorBoard event files (`fedmc_flwr.tracking`)."""

PHASES = ("train", "eval", "failed")
"""`failed` rows name a region that was left out of a round's training or evaluation."""

RUN_LOG = "run.log"
"""A federated run's whole log stream, its failures' details included (the console has
them without). `fedmc run` and `fedmc deploy` write it, afresh unless they resume.
Not among EXPERIMENT_FILES: the run writes it while the ServerApp clears those."""

EXPERIMENT_FILES = (
    "metrics.csv",
    "timing.csv",
    "drift.csv",
    PER_SEED_FILE,
    "config.yaml",
    "progress.json",
    "status.json",
    CHECKPOINTS,
    "clients",
    "plots",
    BOARD_DIR,
)
"""What a run writes into its experiment directory (and `--overwrite` removes)."""


class ExperimentExists(InputError, FileExistsError):
    """An experiment directory already holds results and nobody said what to do with them."""


def experiment_path(results_dir: str | Path, experiment: str) -> Path:
    """`<results_dir>/<experiment>/` as an absolute path (not created)."""
    return resolved(results_dir, "results_dir") / experiment


def holds_results(path: Path) -> bool:
    """Whether an experiment directory already holds a run's results."""
    return (path / "metrics.csv").exists()


def experiment_dir(results_dir: str | Path, experiment: str, *, overwrite: bool = True) -> Path:
    """`<results_dir>/<experiment>/`, created, as an absolute path.

    With `overwrite=False`, a directory that already holds results is an `ExperimentExists`
    error; with `overwrite=True` the files a run writes there are removed first, so no row
    of the earlier run can mix with the new ones.
    """
    path = experiment_path(results_dir, experiment)
    if holds_results(path):
        if not overwrite:
            raise ExperimentExists(
                f"{path} already holds results; pass --overwrite to replace them"
                " (or --resume to continue a federated run)"
            )
        clear_experiment(path)
    return output_dir(path, "results_dir")


def clear_experiment(path: Path) -> None:
    """Remove what a run writes into `path` (EXPERIMENT_FILES), nothing else."""
    for name in EXPERIMENT_FILES:
        target = path / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()


def append_text(path: Path, text: str) -> None:
    """Append `text` with one write call and sync it (see the module docstring)."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:  # a regular file takes it all at once unless the disk is full
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def keep_rows(path: Path, keep: Callable[[dict[str, str]], bool]) -> int:
    """Rewrite the CSV at `path` (atomically) with only the rows `keep` accepts; a last
    line without its newline (a write cut short) is dropped too. Returns the rows kept."""
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    reader = csv.DictReader(io.StringIO(complete))
    header = reader.fieldnames or []
    kept = [row for row in reader if keep(row)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(kept)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(buffer.getvalue())
    os.replace(partial, path)
    return len(kept)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float | np.floating):
        value = float(value)
        return "" if math.isnan(value) else repr(value)
    return str(value)


class MetricsWriter:
    """Appends rows to a CSV with fixed columns (COLUMNS by default); unknown keys are an error."""

    def __init__(
        self, path: str | Path, *, columns: tuple[str, ...] = COLUMNS, append: bool = False
    ) -> None:
        self.path = Path(path)
        self.columns = columns
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not append or not self.path.exists():
            with self.path.open("w", newline="") as handle:
                csv.writer(handle).writerow(columns)
        else:
            with self.path.open(newline="") as handle:
                header = next(csv.reader(handle), [])
            if tuple(header) != columns:
                raise ValueError(f"{self.path}: its columns are not {columns[:3]}...")

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append `rows` (missing columns stay empty) as one batch (see the module docstring)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        for row in rows:
            unknown = set(row) - set(self.columns)
            if unknown:
                raise KeyError(f"unknown metrics columns: {sorted(unknown)}")
            if "phase" in self.columns and row.get("phase") not in PHASES:
                raise ValueError(f"phase must be one of {PHASES}, got {row.get('phase')!r}")
            writer.writerow([_cell(row.get(column)) for column in self.columns])
        append_text(self.path, buffer.getvalue())


def per_seed_writer(out_dir: str | Path) -> MetricsWriter:
    """A fresh `per_seed.csv` in `out_dir`."""
    return MetricsWriter(Path(out_dir) / PER_SEED_FILE, columns=PER_SEED_COLUMNS)


def read_per_seed(path: str | Path) -> Any:
    """A per_seed.csv as a pandas DataFrame (eval_seed as an unsigned 64-bit integer).

    FileNotFoundError when there is no file, ValueError when it lacks a column.
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    frame = pd.read_csv(path, dtype={"eval_seed": "uint64", "split": str, "client": str})
    missing = [column for column in PER_SEED_COLUMNS if column not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a per_seed.csv (no columns {missing})")
    return frame


PROVENANCE_FILE = "provenance.json"
"""Where a sweep records the code its cells ran and when (`record_provenance`)."""


def code_version(repo: Path | None = None) -> dict[str, str | bool]:
    """The git commit of the code in use and whether its tracked files differ from it;
    "unknown" outside a git checkout (an installed package)."""
    where = repo or Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "--short=12", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        }
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": False}


def record_provenance(out_dir: Path, command: str) -> None:
    """Write `provenance.json` beside a sweep's cells when it starts running them: the
    command, the code's version and the date, which the results docs name above a table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = {
        "command": command,
        **code_version(),
        "started": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    (out_dir / PROVENANCE_FILE).write_text(json.dumps(stamp, indent=1) + "\n")


def read_provenance(out_dir: Path) -> dict[str, Any] | None:
    """What `record_provenance` wrote, or None if the folder has none."""
    try:
        return json.loads((out_dir / PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        return None
