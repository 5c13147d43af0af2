"""Where a command may write: an output file or folder checked before any work is done.

Every command that writes (`export --out`, `hooks --log`, `plot --out`, `credentials
--out`, an experiment's `results_dir`) asks here first, so a path it cannot use (under a
regular file, at a folder where a file is wanted, on a read-only or virtual file system
such as /sys or /proc) is one `OutputError` line naming the option, the path and the
reason, and never a traceback from deep inside a writer after minutes of work.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fedmc_flwr.errors import InputError


class OutputError(InputError, ValueError):
    """A path a command was told to write to and cannot, in one line."""


def _refusal(what: str, path: Path, doing: str, about: Path, exc: Exception) -> OutputError:
    """One line: the option, the path, what could not be done and why (a file in the way
    is named; anything else is the system's short reason)."""
    reason = (exc.strerror if isinstance(exc, OSError) else None) or type(exc).__name__
    if isinstance(exc, FileExistsError | NotADirectoryError):
        blocking = next((p for p in (about, *about.parents) if p.exists() and not p.is_dir()), None)
        reason = f"{blocking} is a file, not a folder" if blocking else reason
    return OutputError(f"{what} {path}: cannot {doing} ({reason})")


def resolved(path: str | Path, what: str) -> Path:
    """`path` absolute, `~` and `~user` expanded. Refused in one line: a user with no home
    (pathlib raises a bare RuntimeError) and a name no system call takes (a NUL byte)."""
    try:
        return Path(path).expanduser().resolve()
    except RuntimeError:
        raise OutputError(f"{what} {path}: names the home folder of no user here") from None
    except ValueError:
        raise OutputError(f"{what} {str(path)!r}: not a path (a NUL byte)") from None


def output_dir(path: str | Path, what: str) -> Path:
    """`path` as a folder the command can write files into, created with its parents.

    Why a probe file: permission bits say little to root, and /proc or /sys accept a
    folder's name but no file in it; creating (and removing) one is the only sure test."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte or an unencodable name
        raise _refusal(what, path, "create this folder", path, exc) from None
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except (OSError, ValueError) as exc:
        raise _refusal(what, path, "write into this folder", path, exc) from None
    return path


def output_file(path: str | Path, what: str) -> Path:
    """`path` as a file the command can write (or append to), its folder created.

    An existing file is opened for appending and left as it was; a new one is created and
    removed again, so a command that fails later leaves nothing behind."""
    path = Path(path)
    try:
        is_folder = path.is_dir()
    except OSError as exc:  # a name longer than the file system takes
        raise _refusal(what, path, "write this file", path, exc) from None
    if is_folder:
        raise OutputError(f"{what} {path}: is a folder, expected a file to write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as exc:
        raise _refusal(what, path, "create its folder", path.parent, exc) from None
    existed = path.exists()
    try:
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
    except (OSError, ValueError) as exc:
        raise _refusal(what, path, "write this file", path, exc) from None
    os.close(handle)
    if not existed:
        path.unlink(missing_ok=True)
    return path
