"""`fedmc-supernode`'s shorter waits (`federation/prompt_supernode.py`): which of Flower's
sleeps become which, and that they reach the Flower functions and module they change."""

from __future__ import annotations

import time

import pytest
from flwr.supercore.inflatable import inflatable_utils
from flwr.supernode import start_client_internal

from fedmc_flwr.federation import prompt_supernode
from fedmc_flwr.federation.prompt_supernode import (
    FIRST_RETRY_S,
    IDLE_POLL_S,
    REPLY_POLL_S,
    RETRY_CAP_S,
    PromptClock,
)


@pytest.mark.parametrize(
    ("asked", "slept"),
    [(3.0, IDLE_POLL_S), (0.5, REPLY_POLL_S), (0.01, 0.01)],
)
def test_each_of_flowers_waits_becomes_its_shorter_one(
    monkeypatch: pytest.MonkeyPatch, asked: float, slept: float
) -> None:
    seen: list[float] = []
    monkeypatch.setattr(time, "sleep", seen.append)
    PromptClock.sleep(asked)
    assert seen == [slept]


def test_the_clock_is_the_time_module_for_everything_else() -> None:
    clock = PromptClock()
    assert clock.monotonic is time.monotonic and clock.time is time.time


def test_the_supernode_loop_and_the_pulls_get_the_shorter_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(start_client_internal, "time", time)
    for pull in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        monkeypatch.setattr(pull, "__kwdefaults__", dict(pull.__kwdefaults__))
    prompt_supernode.poll_promptly()
    prompt_supernode.retry_pulls_promptly()
    assert isinstance(start_client_internal.time, PromptClock)
    for pull in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        assert pull.__kwdefaults__["initial_backoff"] == FIRST_RETRY_S
        assert pull.__kwdefaults__["backoff_cap"] == RETRY_CAP_S


def test_a_flower_without_the_loops_time_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start_client_internal, "time", PromptClock())
    with pytest.raises(RuntimeError, match="no longer imports time"):
        prompt_supernode.poll_promptly()
