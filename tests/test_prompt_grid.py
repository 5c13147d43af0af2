"""The ServerApp's grid waits for replies by asking every 0.1 s, one ask for all the
threads that wait, and gives up at the timeout as Flower's grids do."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from itertools import pairwise
from types import SimpleNamespace

import pytest

from fedmc_flwr.federation.prompt_grid import PromptGrid


class ScriptedGrid:
    """A grid whose replies arrive `late_by[id]` asks after their message was pushed."""

    def __init__(self, late_by: dict[str, int], pushers: int = 1) -> None:
        self.late_by = dict(late_by)
        self.asks: list[float] = []
        self.all_pushed = threading.Barrier(pushers)

    def push_messages(self, messages: Iterable[str]) -> list[str]:
        self.all_pushed.wait(timeout=10)  # the threads' messages go out together
        return list(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> list[SimpleNamespace]:
        self.asks.append(time.monotonic())
        arrived = []
        for message_id in message_ids:
            self.late_by[message_id] -= 1
            if self.late_by[message_id] < 0:
                arrived.append(
                    SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=message_id))
                )
        return arrived


def replies_to(replies: Iterable[SimpleNamespace]) -> list[str]:
    return sorted(reply.metadata.reply_to_message_id for reply in replies)


def test_every_reply_is_collected_once_asking_every_poll() -> None:
    scripted = ScriptedGrid({"a": 0, "b": 3, "c": 1})
    grid = PromptGrid(scripted, poll_s=0.05)  # type: ignore[arg-type]
    assert replies_to(grid.send_and_receive(["a", "b", "c"])) == ["a", "b", "c"]
    assert len(scripted.asks) == 4  # the last reply comes on the fourth ask, then it stops
    gaps = [later - earlier for earlier, later in pairwise(scripted.asks)]
    assert all(0.04 <= gap < 2.5 for gap in gaps), gaps  # not Flower's 3 s


def test_a_timeout_returns_what_arrived() -> None:
    scripted = ScriptedGrid({"a": 0, "never": 10**6})
    grid = PromptGrid(scripted, poll_s=0.05)  # type: ignore[arg-type]
    started = time.monotonic()
    assert replies_to(grid.send_and_receive(["a", "never"], timeout=0.3)) == ["a"]
    assert 0.3 <= time.monotonic() - started < 2.0


def test_threads_share_one_ask_and_each_gets_its_own_replies() -> None:
    scripted = ScriptedGrid({"a": 0, "b": 2, "c": 5, "d": 5}, pushers=3)
    grid = PromptGrid(scripted, poll_s=0.05)  # type: ignore[arg-type]
    got: dict[str, list[str]] = {}

    def wait_for(ids: list[str]) -> None:
        got[ids[0]] = replies_to(grid.send_and_receive(ids))

    threads = [threading.Thread(target=wait_for, args=(ids,)) for ids in (["a"], ["b"], ["c", "d"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert got == {"a": ["a"], "b": ["b"], "c": ["c", "d"]}
    # each thread asking on its own would make 1 + 3 + 6 asks; shared, the asks are as many
    # as the latest reply needs (6), one more if the first ask left before a thread's ids
    assert len(scripted.asks) <= 7, len(scripted.asks)
    gaps = [later - earlier for earlier, later in pairwise(scripted.asks)]
    assert all(gap >= 0.04 for gap in gaps), gaps  # never faster than poll_s, however many wait


def test_a_reply_after_its_thread_gave_up_is_dropped() -> None:
    scripted = ScriptedGrid({"late": 3, "b": 6})
    grid = PromptGrid(scripted, poll_s=0.05)  # type: ignore[arg-type]
    gave_up = threading.Thread(target=lambda: grid.send_and_receive(["late"], timeout=0.01))
    gave_up.start()
    gave_up.join()
    assert replies_to(grid.send_and_receive(["b"])) == ["b"]
    assert grid._arrived == {} and grid._due == set()  # nothing kept for a thread that left


class StrayGrid(ScriptedGrid):
    """A grid that also hands back the reply to a message no thread waits for any more (an
    ask that left while that thread gave up)."""

    def pull_messages(self, message_ids: Iterable[str]) -> list[SimpleNamespace]:
        stray = SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id="left"))
        return [*super().pull_messages(message_ids), stray]


def test_a_reply_whose_thread_left_is_not_kept() -> None:
    grid = PromptGrid(StrayGrid({"a": 0}), poll_s=0.05)  # type: ignore[arg-type]
    assert replies_to(grid.send_and_receive(["a"])) == ["a"]
    assert grid._arrived == {}


@pytest.mark.parametrize("method", ["get_node_ids", "get_nodes", "run"])
def test_the_rest_is_the_wrapped_grids(method: str) -> None:
    wrapped = SimpleNamespace(get_node_ids=lambda: [7], get_nodes=lambda: ["node"], run="run")

    def called(value: object) -> object:
        return value() if callable(value) else value

    assert called(getattr(PromptGrid(wrapped), method)) == called(getattr(wrapped, method))  # type: ignore[arg-type]
