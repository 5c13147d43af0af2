"""The ServerApp's grid, asking for replies every 0.1 s instead of every 3 s.

Flower's grid for the deployment engine (`HttpGrid.send_and_receive`) pushes a message,
then asks the SuperLink for its reply every 3 s, and Flower's legacy round loop sends
each region its own message through it. A reply that lands just after an ask waits out
the rest of the 3 s, in both phases of every round. The simulation engine's grid asks
every 0.1 s. This wrapper gives the deployment engine the same: it passes everything to
the grid Flower handed the ServerApp and only waits for replies itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.proto.node_pb2 import NodeInfo
from flwr.server import Grid
from flwr.supercore.run import Run

REPLY_POLL_S = 0.1
"""Between two asks for the replies still due; the simulation engine's grid's interval."""


class PromptGrid(Grid):
    """`grid` with `send_and_receive` asking every `poll_s` seconds."""

    def __init__(self, grid: Grid, poll_s: float = REPLY_POLL_S) -> None:
        self.grid = grid
        self.poll_s = poll_s

    def set_run(self, run: Run) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        return self.grid.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def get_nodes(self) -> Iterable[NodeInfo]:
        return self.grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push `messages`, then collect their replies until all are in or `timeout`
        seconds have passed (no timeout: wait for all), as Flower's grids do."""
        due = set(self.push_messages(messages))
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while due and (deadline is None or time.monotonic() < deadline):
            arrived = list(self.pull_messages(due))
            replies.extend(arrived)
            due -= {reply.metadata.reply_to_message_id for reply in arrived}
            if due:
                time.sleep(self.poll_s)
        return replies
