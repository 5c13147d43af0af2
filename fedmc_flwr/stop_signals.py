"""Ctrl-C and SIGTERM as one stop request, which a process's cleanup can honour whichever
arrived: `fedmc run`'s runner stops the Flower processes it started, and `fedmc sweep`
stops the cells its workers run."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class StopRequest:
    """Ctrl-C or SIGTERM, raised as KeyboardInterrupt and also remembered.

    Why remembered: Python drops an exception raised while it runs some callbacks, and
    logging's at-fork hook, which runs at every subprocess start, is one of them. A Ctrl-C
    that lands there would be lost, and the run would go on to its end. A wait loop that
    calls `check` at each poll raises it again, so every stop is honoured within one poll.
    """

    def __init__(self) -> None:
        self.signalled = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.signalled = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.signalled:
            raise KeyboardInterrupt


@contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """SIGTERM unwinds like Ctrl-C, so the block's cleanup runs for both. A SIGINT ignored
    on entry (a shell's background job, a sweep's worker) stays ignored."""
    request = StopRequest()
    signals = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signals.append(signal.SIGINT)
    previous = {sig: signal.signal(sig, request.handler) for sig in signals}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
