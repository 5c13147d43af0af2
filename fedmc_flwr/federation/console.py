"""A quiet console: Flower's and Ray's output without the lines that do not apply here,
and without colour codes where the output is not a terminal.

Two places, because Flower prints from processes that load this package and from
processes that never do:

- In the processes that load the ServerApp or the ClientApp module (the simulation
  process loads both, before it starts Ray), `quiet_flower` runs when the module is
  imported: Flower's console handler drops the records in `DROPPED`, and colours nothing
  under `NO_COLOR` (no-color.org), which `fedmc run` sets for Flower's processes when its
  own output is not a terminal (`plain_env`, with Ray's `RAY_COLOR_PREFIX=0` for the
  prefix of the actors' lines); Ray's accelerator `FutureWarning` is ignored there too.
- In `fedmc run`'s copy of the run's log stream (`relay`): the lines in `RELAY_DROPPED`,
  which Flower logs before the app is loaded or from Ray actors that may never load it,
  and the colour codes of the processes that never load it (the simulation's first
  lines, the `flwr` CLI's own).

docs/design.md ("Console") says why dropping each of them is safe.

A resumed run's ServerApp runs its remaining rounds through Flower's loop, which counts
from 1 whatever round the run is at; `number_rounds_from` renumbers Flower's round
banner (and its end-of-run summary) in that process to the run's own rounds.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Iterable
from typing import IO

from flwr.common.logger import FLOWER_LOGGER, ConsoleHandler

from fedmc_flwr.federation.ray_pool import ACTOR_LOST

DROPPED = (
    "Starting evaluation of initial global parameters",
    "Evaluation returned no results (`None`)",
)
"""Flower's log messages (their templates) that `quiet_flower` drops."""
RELAY_DROPPED = (
    "Since flwr 1.32, default simulated SuperNodes changed from 10 to 2.",
    "To change federation size, use the following command:",
    "flwr federation simulation-config ",
    "Manually terminating ClientAppActor",
)
"""How the lines start (after the level and an actor's prefix) that `relay` drops."""
TRACEBACK = "Traceback (most recent call last):"
FAILED_MESSAGE = "An exception was raised when processing a message by"
"""Flower's note that a message failed in the simulation engine (`raybackend.py`)."""
DETAILS = (TRACEBACK, FAILED_MESSAGE, ACTOR_LOST)
"""How the records start whose lines `relay` keeps off the console when it has a log."""
RAY_FUTURE_WARNING = "Tip: In future versions of Ray, Ray will no longer override accelerator"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
LEVEL = re.compile(r"^(?:\([^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*:\s*")
"""The level (and a Ray actor's prefix) before a Flower log line's message."""


def plain_env(tty: bool) -> dict[str, str]:
    """What Flower's processes need in their environment to print no colour codes, when
    the console they end up on is not a terminal (`tty` False); nothing otherwise."""
    return {} if tty else {"NO_COLOR": "1", "RAY_COLOR_PREFIX": "0"}


class _Dropped(logging.Filter):
    """Refuses the records whose message template is in `DROPPED`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg not in DROPPED


def quiet_flower() -> None:
    """Quiet Flower's console in this process (see the module docstring); idempotent."""
    plain = bool(os.environ.get("NO_COLOR"))
    for handler in FLOWER_LOGGER.handlers:
        if isinstance(handler, ConsoleHandler):
            handler.colored = handler.colored and not plain
            if not any(isinstance(f, _Dropped) for f in handler.filters):
                handler.addFilter(_Dropped())
    warnings.filterwarnings("ignore", message=re.escape(RAY_FUTURE_WARNING), category=FutureWarning)


ROUND_BANNER = "[ROUND %s]"
"""Flower's banner at the start of each round (`flwr/server/server.py`, `Server.fit`)."""
RUN_FINISHED = "Run finished %s round(s) in %.2fs"
"""Flower's summary line when its round loop ends (`flwr/server/server.py`, `run_fl`)."""


class RunRounds(logging.Filter):
    """Renumbers Flower's round records from the run's own first round (`first`): the
    banner of Flower's round n says round `first + n - 1`, and the summary names the
    rounds it ran. A logger filter: it changes the record before any handler formats it,
    the console's and the log stream's alike."""

    def __init__(self) -> None:
        super().__init__()
        self.first = 1

    def filter(self, record: logging.LogRecord) -> bool:
        offset = self.first - 1
        if offset and record.msg == ROUND_BANNER and isinstance(record.args, tuple):
            record.args = (int(record.args[0]) + offset,)
        elif offset and record.msg == RUN_FINISHED and isinstance(record.args, tuple):
            count, seconds = record.args
            record.msg = "Run finished %s round(s), rounds %s to %s, in %.2fs"
            record.args = (count, self.first, offset + int(count), seconds)
        return True


_RUN_ROUNDS = RunRounds()


def number_rounds_from(first: int) -> None:
    """Flower's round records in this process name the run's own rounds from `first` on
    (see `RunRounds`); idempotent, the last call's `first` applies."""
    _RUN_ROUNDS.first = first
    if _RUN_ROUNDS not in FLOWER_LOGGER.filters:
        FLOWER_LOGGER.addFilter(_RUN_ROUNDS)


def keep(line: str) -> bool:
    """Whether `relay` passes a log-stream line on."""
    message = LEVEL.sub("", ANSI.sub("", line)).strip()
    return not message.startswith(RELAY_DROPPED)


class Details:
    """Tells the lines of a failure's details (`DETAILS`, the exception text and traceback
    that follow Flower's note of a failed message, any traceback) from the lines around
    them, one line at a time. A record's further lines carry no level; a failed message's
    note is followed by ERROR records of its exception, then its traceback."""

    def __init__(self) -> None:
        self.inside = False
        self.before_traceback = False

    def __call__(self, line: str) -> bool:
        """Whether `line` belongs to a failure's details."""
        plain = ANSI.sub("", line)
        level = LEVEL.match(plain)
        if level is None:  # a further line of the record before
            return self.inside
        message = plain[level.end() :].strip()
        if message.startswith(TRACEBACK):
            self.inside, self.before_traceback = True, False
        elif message.startswith(DETAILS):
            self.inside, self.before_traceback = True, message.startswith(FAILED_MESSAGE)
        else:
            self.inside = self.before_traceback and "ERROR" in level.group()
        return self.inside


def relay(lines: Iterable[str], out: IO[str], tty: bool, log: IO[str] | None = None) -> None:
    """Copy a run's log stream to `out` as it comes, without `RELAY_DROPPED`'s lines, and
    without colour codes unless `out` is a terminal (`tty`). With a `log`, every line goes
    there (without colour codes), and a failure's details (`Details`) only there: the
    console says once where they are."""
    details = Details()
    pointed = False
    for line in lines:
        if log is not None:
            log.write(ANSI.sub("", line))
            log.flush()
            if details(line):
                if not pointed:
                    out.write(
                        f"fedmc: a failure's details (tracebacks, Ray's words) are in {log.name}\n"
                    )
                    pointed = True
                continue
        if keep(line):
            out.write(line if tty else ANSI.sub("", line))
            out.flush()
