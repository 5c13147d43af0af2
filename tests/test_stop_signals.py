"""A run's stop signals: Ctrl-C and SIGTERM end it even when Python drops the exception
they raise, and a SIGINT ignored on entry (a shell's background job) stays ignored."""

from __future__ import annotations

import signal
import subprocess
import sys

from conftest import REPO

from fedmc_flwr.stop_signals import stop_requests

# A Ctrl-C that lands in logging's at-fork hook, as one can while a run starts its Flower
# processes: the hook's KeyboardInterrupt is printed as "Exception ignored" and dropped.
DROPPED_IN_A_FORK_HOOK = """
import os, signal, subprocess, time
from fedmc_flwr.stop_signals import stop_requests

signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal


def interrupted_hook():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs here, inside the hook

with stop_requests() as stop:
    os.register_at_fork(after_in_parent=interrupted_hook)
    subprocess.run(["true"], preexec_fn=lambda: None)  # as FlowerProcesses.start does
    try:
        stop.check()
        print("lost")
    except KeyboardInterrupt:
        print("stopped")
"""


def test_a_ctrl_c_python_drops_in_a_fork_hook_still_stops_the_run() -> None:
    done = subprocess.run(
        [sys.executable, "-c", DROPPED_IN_A_FORK_HOOK],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "KeyboardInterrupt" in done.stderr  # Python dropped it, as it does in a run
    assert done.stdout.split() == ["stopped"]


def test_no_signal_no_stop_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with stop_requests() as stop:
        assert signal.getsignal(signal.SIGTERM) == stop.handler
        stop.check()  # nothing was signalled
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_an_ignored_sigint_stays_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_requests():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
