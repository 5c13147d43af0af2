"""The ServerApp's grid waits for replies by asking every 0.1 s, and gives up at the
timeout as Flower's grids do."""

from __future__ import annotations

import time
from collections.abc import Iterable
from itertools import pairwise
from types import SimpleNamespace

import pytest

from fedmc_flwr.federation.prompt_grid import PromptGrid


class ScriptedGrid:
    """A grid whose replies arrive `late_by[id]` asks after their message was pushed."""

    def __init__(self, late_by: dict[str, int]) -> None:
        self.late_by = dict(late_by)
        self.asks: list[float] = []

    def push_messages(self, messages: Iterable[str]) -> list[str]:
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


@pytest.mark.parametrize("method", ["get_node_ids", "get_nodes", "run"])
def test_the_rest_is_the_wrapped_grids(method: str) -> None:
    wrapped = SimpleNamespace(get_node_ids=lambda: [7], get_nodes=lambda: ["node"], run="run")

    def called(value: object) -> object:
        return value() if callable(value) else value

    assert called(getattr(PromptGrid(wrapped), method)) == called(getattr(wrapped, method))  # type: ignore[arg-type]
