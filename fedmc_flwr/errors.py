"""The two kinds of failure the `fedmc` command reports in one line.

Every module raises its own exception class, each a subclass of one of these, so the
command line sorts them without importing the modules that raise them: `InputError` is a
problem with what the user gave (a config, a file to read or a path to write, an existing
experiment) and exits with 2; `RunFailure` is a run that could not be carried out and exits
with 1. Either is one line that starts with the failed command (`fedmc export: ...`).
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input: one line naming what is wrong, exit code 2."""

    label = ""
    """The kind of problem, put before the message (`config error: `); the command's own
    name (`fedmc export: `) comes first, from `cli.main`."""


class RunFailure(Exception):
    """A run that could not be carried out: one line, exit code 1."""

    logged = False
    """True when the raiser has already logged the failure's line (the command then adds
    none, so the failure stays one line)."""
