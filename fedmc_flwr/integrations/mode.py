"""Dry-run or live, and the one place that decides it.

Acting on a real estate is opt-in twice over: `INTEGRATION_MODE=live` must be set and the
hook's credentials must be present. Live mode without them is a mistake worth stopping
for (a half-configured deployment), so it refuses in one line instead of quietly falling
back to a dry run the operator did not ask for.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from fedmc_flwr.errors import InputError

ENV_VAR = "INTEGRATION_MODE"
DRY_RUN, LIVE = "dry-run", "live"


class LiveRefused(InputError, RuntimeError):
    """Live mode was asked for without what it needs; the message is one line."""


def current_mode(env: Mapping[str, str] | None = None) -> str:
    """`live` only when INTEGRATION_MODE says exactly that; unset or empty is a dry run."""
    value = (os.environ if env is None else env).get(ENV_VAR, "") or DRY_RUN
    if value not in (DRY_RUN, LIVE):
        raise LiveRefused(f"{ENV_VAR}={value!r}: expected {DRY_RUN!r} or {LIVE!r}")
    return value


def require_credentials(hook: str, credentials: Mapping[str, str | None]) -> None:
    """Refuse live mode when any named credential is missing or empty."""
    missing = [name for name, value in credentials.items() if not value]
    if missing:
        raise LiveRefused(f"{hook}: {ENV_VAR}={LIVE} needs {', '.join(missing)}; refusing to act")


class ActionLog:
    """Prints each planned or applied action as one JSON line, and appends it to `path`.

    The same line serves the operator reading the terminal and the audit trail, so what a
    dry run said it would do can be diffed against what a live run did.
    """

    def __init__(self, hook: str, mode: str, path: Path | None = None, out: TextIO | None = None):
        self.hook, self.mode, self.path = hook, mode, path
        self.out = out or sys.stdout
        self.records: list[dict[str, Any]] = []

    def emit(self, action: str, **fields: Any) -> dict[str, Any]:
        record = {"hook": self.hook, "mode": self.mode, "action": action, **fields}
        line = json.dumps(record, sort_keys=True, default=str)
        print(line, file=self.out, flush=True)
        if self.path is not None:
            with self.path.open("a") as handle:
                handle.write(line + "\n")
        self.records.append(record)
        return record
