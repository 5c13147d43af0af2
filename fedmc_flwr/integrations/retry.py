"""Bounded retries with exponential backoff around one call to a service.

A monitoring server or a cloud API that is down or slow must never take a training run or
a dispatcher with it: each call has its own timeout (set by the caller's client), is tried
a few times with growing pauses, and when it still fails the caller gets
`ServiceUnavailable` and one warning line, and decides what to fall back to.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from fedmc_flwr.errors import RunFailure

T = TypeVar("T")
log = logging.getLogger("fedmc.hooks")


class ServiceUnavailable(RunFailure, RuntimeError):
    """A service did not answer usefully after every retry (its one line is logged)."""

    logged = True


def with_retries(
    call: Callable[[], T],
    what: str,
    retry_on: tuple[type[BaseException], ...],
    attempts: int = 3,
    backoff_s: float = 0.2,
) -> T:
    """`call()`, retried on `retry_on` with pauses backoff_s, 2 backoff_s, ...; after the
    last failure, one warning line and `ServiceUnavailable`."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except retry_on as exc:
            if attempt < attempts:
                time.sleep(backoff_s * 2 ** (attempt - 1))
                continue
            message = f"{what}: unavailable after {attempts} tries ({type(exc).__name__}: {exc})"
            log.warning(message)
            raise ServiceUnavailable(message) from exc
    raise ValueError(f"attempts must be >= 1, got {attempts}")
