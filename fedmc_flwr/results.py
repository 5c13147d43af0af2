"""The results directory and its tidy metrics table.

`results/<experiment>/metrics.csv` has one row per (round, phase, client, policy) with a
fixed set of columns, so every producer (baselines, centralised or local training, the
federation) writes rows that one plotting and analysis path can read. It holds only what
the config and seed determine, so a rerun reproduces it bit for bit; wall-clock figures
(steps per second, wall time) go to `timing.csv` next to it, keyed the same way. Rows are
flushed as they are written: a crash loses at most the row being written.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

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
    "latency_ms",
    "latency_p95_ms",
    "slo_violation_rate",
    "cost_usd",
    "carbon_g",
    "energy_kwh",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clipfrac",
    "explained_variance",
)
"""Column order of metrics.csv. cost_usd, carbon_g and energy_kwh are means per job."""

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

PHASES = ("train", "eval")


def experiment_dir(results_dir: str | Path, experiment: str) -> Path:
    """`<results_dir>/<experiment>/`, created, as an absolute path."""
    path = Path(results_dir).expanduser().resolve() / experiment
    path.mkdir(parents=True, exist_ok=True)
    return path


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

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append `rows` (missing columns stay empty) and flush them to disk."""
        lines = []
        for row in rows:
            unknown = set(row) - set(self.columns)
            if unknown:
                raise KeyError(f"unknown metrics columns: {sorted(unknown)}")
            if row.get("phase") not in PHASES:
                raise ValueError(f"phase must be one of {PHASES}, got {row.get('phase')!r}")
            lines.append([_cell(row.get(column)) for column in self.columns])
        with self.path.open("a", newline="") as handle:
            csv.writer(handle).writerows(lines)
