"""Real services for the integration tests: started on 127.0.0.1, stopped by their PID.

Each service runs as a child process of the test session on a free port; `Service.stop`
kills it and waits for it, and the fixtures call it in a `finally`, so a failing test
leaves nothing running.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_binary(name: str, install: str) -> str:
    """The path of `name`; in CI a missing binary fails the test, elsewhere it skips."""
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} not found; install it with: {install}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (.ci/run should have)")
    pytest.skip(message)


class Service:
    """One server process, its log file, and how to tell it is up."""

    def __init__(self, command: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with log.open("wb") as handle:
            self.process = subprocess.Popen(
                command, stdout=handle, stderr=subprocess.STDOUT, env=env
            )

    def wait_until(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{what} exited with {self.process.returncode}: {self.tail()}")
            try:
                if ready():
                    return
            except (OSError, httpx.HTTPError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{what} not ready within {timeout_s:.0f} s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        """Kill the process by its PID and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
