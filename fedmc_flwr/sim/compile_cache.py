"""Numba's compiled kernels, cached by the content of their source rather than its path.

Why: `fedmc run` goes through Flower's simulation engine, which installs this project
into a fresh `$FLWR_HOME/apps/<hash>/` for every run, and every Ray actor imports the
kernels from there. Numba's own locators put the cache next to the source file (or under
a hash of its directory), so each run, and each actor in it, starts with an empty cache
and compiles every kernel again: seconds of round 1 spent in LLVM.

`install()` puts a locator in front of numba's that files the compiled code of this
package's modules under `<cache root>/<digest>`, where the digest covers the source
file's bytes, numba's version and Python's. The same source at any path, with any mtime,
therefore finds the same entries; an edited file, or another numba or Python, gets a
directory of its own. The cache root is `$FEDMC_CACHE_DIR` if set, else
`$XDG_CACHE_HOME/fedmc-flwr/numba` (XDG's default: `~/.cache`). Where the root cannot be
written the locator steps aside and numba's usual locators apply, as before.

Concurrent writers (the actors of one run compile together on a cold cache) are safe as
far as numba's files go: numba writes every index and data file under a temporary name
and renames it into place, and a kernel here is compiled for one signature only, so
racing writers write the same entry to the same file name.

`sim.world.warm_cache()` compiles (or loads) the kernels in the calling process, so a
driver that calls it before starting the actors leaves them a full cache even on a fresh
machine. It lives beside the world it builds: this module is imported by the kernel, so
it imports nothing of the simulator.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numba
from numba.core.caching import CacheImpl, _CacheLocator

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""Only this package's modules are cached by content; other libraries keep numba's rules."""


def cache_root() -> Path:
    """The directory the compiled kernels are kept in, shared by every run of the user."""
    explicit = os.environ.get("FEDMC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fedmc-flwr" / "numba"


@functools.cache
def _digest(path: str, mtime_ns: int, size: int) -> str:
    # mtime and size are part of the memo key only, so that a file rewritten while the
    # process runs is hashed again; the digest itself depends on the content alone.
    hasher = hashlib.sha256(Path(path).read_bytes())
    hasher.update(f"\0numba {numba.__version__}\0python {sys.version}".encode())
    return hasher.hexdigest()[:32]


class ContentKeyedLocator(_CacheLocator):
    """Numba cache locator: `<cache root>/<digest of source + numba + Python>`.

    The digest is also the source stamp numba checks its index against, in place of the
    stamp of the file it was loaded from.
    """

    def __init__(self, py_func: Callable[..., object], py_file: str) -> None:
        st = os.stat(py_file)
        self._lineno = py_func.__code__.co_firstlineno
        self._stamp = _digest(py_file, st.st_mtime_ns, st.st_size)
        self._cache_path = str(cache_root() / self._stamp)

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        return self._stamp

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(
        cls, py_func: Callable[..., object], py_file: str
    ) -> ContentKeyedLocator | None:
        """This locator for a function of this package, or None to let numba's decide."""
        if not Path(py_file).resolve().is_relative_to(_PACKAGE_DIR):
            return None
        try:
            locator = cls(py_func, py_file)
            locator.ensure_cache_path()
        except OSError:
            return None
        return locator


def install() -> None:
    """Make numba look for this package's compiled code in the content-keyed cache first.

    Must run before the first `@njit(cache=True)` of the package is applied, since numba
    picks a function's locator when it is decorated. Calling it again changes nothing.
    """
    if ContentKeyedLocator not in CacheImpl._locator_classes:
        CacheImpl._locator_classes.insert(0, ContentKeyedLocator)
