"""The files beside an experiment's results that say where its run stands: how far it got
(`progress.json`), how it ended (`status.json`) and which processes it started (the
registry), each replaced atomically; and whether a given run completed.

Why a module of its own: the run's guard process writes nothing but reads the registry,
and starts while the machine is busy starting Flower and Ray. Importing the recorder,
which fills the other two, would cost it seconds of torch and scipy there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PROGRESS_FILE = "progress.json"
STATUS_FILE = "status.json"
REGISTRY = ".fedmc-run.json"
"""The run's process family, in its experiment directory while it runs."""


def write_json(path: Path, value: object) -> None:
    """`value` as JSON at `path`, replaced atomically (a reader never sees half a file)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value, sort_keys=True) + "\n")
    os.replace(partial, path)


def run_completed(out: Path, run_id: str) -> bool:
    """Whether run `run_id`'s ServerApp recorded its last round: status.json says so and
    names this run (not an earlier run of the experiment, whose file a resumed or
    overwritten run replaces only once its ServerApp starts)."""
    try:
        status = json.loads((out / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return False
    return status.get("state") == "completed" and status.get("run_id") == run_id
