"""A process is known by its PID and its start time, read the same way whatever the clock does."""

from __future__ import annotations

import sys

import psutil
import pytest

from fedmc_flwr.federation.processes import owner_token, record_pid, recorded_alive, token_alive

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="psutil's boot time is read from /proc/stat"
)


@pytest.mark.parametrize("adjustment_s", [1.0, -1.0, 3600.0])
def test_a_clock_adjustment_leaves_a_live_owner_alive(tmp_path, monkeypatch, adjustment_s) -> None:
    """psutil derives start times from the boot time, which the kernel derives from the
    wall clock: an NTP step moves every start time it reports."""
    token = owner_token()
    pid_file = tmp_path / "me.pid"
    record_pid(pid_file, psutil.Process().pid)
    boot = psutil._psplatform.boot_time()
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: boot + adjustment_s)
    assert token_alive(token)
    assert recorded_alive(pid_file) == [psutil.Process().pid]


def test_another_start_time_is_another_process() -> None:
    pid, _, started = owner_token().partition(":")
    assert token_alive(f"{pid}:{float(started) + 0.5!r}")
    assert not token_alive(f"{pid}:{float(started) - 5.0!r}")
    assert not token_alive(f"{pid}:{float(started) + 5.0!r}")
