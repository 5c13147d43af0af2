"""Numba's compiled kernels, cached by the content of their source rather than its path.

Why: `fedmc run` goes through Flower's simulation engine, which installs this project
into a fresh `$FLWR_HOME/apps/<hash>/` for every run, and every Ray actor imports the
kernels from there. Numba's own locators put the cache next to the source file (or under
a hash of its directory), so each run, and each actor in it, starts with an empty cache
and compiles every kernel again: seconds of round 1 spent in LLVM.

`install()` puts a locator in front of numba's that files the compiled code of this
package's modules under `<cache root>/<digest>`, where the digest covers the source
file's bytes, those of the package's modules it imports (transitively: a kernel compiles
in the constants it imports, such as the observation's columns from `layout.py`), numba's
version and Python's. The same sources at any path, with any mtime, therefore find the
same entries; an edited file, or another numba or Python, gets a directory of its own.
The cache root is `$FEDMC_CACHE_DIR` if set, else `$XDG_CACHE_HOME/fedmc-flwr/numba`
(XDG's default: `~/.cache`). Where the root cannot be written the locator steps aside and
numba's usual locators apply, as before.

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

import ast
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


def _stamp(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path), st.st_mtime_ns, st.st_size


def _package_file(module: str) -> Path | None:
    """The source file of one of this package's modules, None for any other module (or a
    name imported from a module, which is no module itself)."""
    parts = module.split(".")
    if parts[0] != _PACKAGE_DIR.name:
        return None
    base = _PACKAGE_DIR.parent.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _imports(stamp: tuple[str, int, int]) -> tuple[Path, ...]:
    """The package's modules that a source file imports by absolute name."""
    tree = ast.parse(Path(stamp[0]).read_bytes())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return tuple(f for f in map(_package_file, names) if f is not None)


def _sources(path: Path) -> list[Path]:
    """`path` and the package's modules it imports, transitively, in a fixed order."""
    found, todo = set(), [path.resolve()]
    while todo:
        file = todo.pop()
        if file not in found:
            found.add(file)
            todo += [f.resolve() for f in _imports(_stamp(file))]
    return sorted(found)


@functools.cache
def _digest_of(stamps: tuple[tuple[str, int, int], ...]) -> str:
    # mtimes and sizes are part of the memo key only, so that a file rewritten while the
    # process runs is hashed again; the digest depends on the names within the package
    # and the contents alone.
    hasher = hashlib.sha256()
    for name, _, _ in stamps:
        hasher.update(Path(name).relative_to(_PACKAGE_DIR).as_posix().encode() + b"\0")
        hasher.update(Path(name).read_bytes())
    hasher.update(f"\0numba {numba.__version__}\0python {sys.version}".encode())
    return hasher.hexdigest()[:32]


def _digest(path: str) -> str:
    """The digest of a source file with the package's modules it imports."""
    return _digest_of(tuple(_stamp(f) for f in _sources(Path(path))))


class ContentKeyedLocator(_CacheLocator):
    """Numba cache locator: `<cache root>/<digest of sources + numba + Python>`.

    The digest is also the source stamp numba checks its index against, in place of the
    stamp of the file it was loaded from.
    """

    def __init__(self, py_func: Callable[..., object], py_file: str) -> None:
        self._py_file = py_file  # numba names it in its warning about an uncachable kernel
        self._lineno = py_func.__code__.co_firstlineno
        self._stamp = _digest(py_file)
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
