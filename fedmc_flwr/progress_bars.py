"""Progress that suits where it is written: tqdm's bar, redrawn in place, on a terminal;
elsewhere (a log file, a pipe, a CI job) a plain line every few seconds, because a bar
redrawn with carriage returns becomes one long line there that no log viewer pages.

Used by what counts its work in steps a person waits on: the dispatchers' evaluation
(`evaluation.evaluate_dispatchers`) and a sweep's cells (`experiments.sweep`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from tqdm import tqdm

LINE_INTERVAL_S = 5.0
"""Seconds between two lines off a terminal (the last step's line is always written)."""


class LineProgress:
    """tqdm's interface as the package uses it (`set_description`, `update`, a context
    manager), written as whole lines: `desc: n/total units, elapsed`, at most one every
    `interval_s`, and always the line of the last step."""

    def __init__(
        self,
        total: int,
        unit: str,
        file: TextIO,
        interval_s: float = LINE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.unit, self.file = total, unit, file
        self.interval_s, self.clock = interval_s, clock
        self.n = 0
        self.desc = ""
        self.start = clock()
        self.last = self.start

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last < self.interval_s and self.n < self.total:
            return
        self.last = now
        elapsed = tqdm.format_interval(now - self.start)
        prefix = f"{self.desc}: " if self.desc else ""
        print(f"{prefix}{self.n}/{self.total} {self.unit}s, {elapsed}", file=self.file, flush=True)

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        return None


class _Silent(LineProgress):
    """Progress that writes nothing (`disable`)."""

    def update(self, n: int = 1) -> None:
        self.n += n


def progress_bar(
    total: int, unit: str, *, file: TextIO | None = None, disable: bool = False
) -> tqdm | LineProgress:
    """A tqdm bar on a terminal, else `LineProgress` (nothing with `disable`), writing to
    `file` (standard error by default)."""
    out = sys.stderr if file is None else file
    if disable:
        return _Silent(total, unit, out)
    isatty = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        return tqdm(total=total, file=out, unit=unit)
    return LineProgress(total, unit, out)
