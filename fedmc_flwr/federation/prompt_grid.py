"""The ServerApp's grid, asking for replies every 0.1 s instead of every 3 s, in one ask.

Flower's grid for the deployment engine (`HttpGrid.send_and_receive`) pushes a message,
then asks the SuperLink for its reply every 3 s, and Flower's legacy round loop sends
each region its own message through it. A reply that lands just after an ask waits out
the rest of the 3 s, in both phases of every round. The simulation engine's grid asks
every 0.1 s. This wrapper gives the deployment engine the same: it passes everything to
the grid Flower handed the ServerApp and only waits for replies itself.

The round loop waits for each region in a thread of its own. Were each thread to ask for
its own reply every 0.1 s, the SuperLink would answer `10 * regions` requests a second,
each one through its HTTP and TLS layers, on the cores the regions train on (a sixth of
two cores for three regions). The threads share one ask instead: whichever thread finds
no ask under way asks for every reply still due, at most once per `poll_s`, and hands
each waiting thread its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.proto.node_pb2 import NodeInfo
from flwr.server import Grid
from flwr.supercore.run import Run

REPLY_POLL_S = 0.1
"""Between two asks for the replies still due; the simulation engine's grid's interval."""


class PromptGrid(Grid):
    """`grid` with `send_and_receive` asking every `poll_s` seconds, one ask for all the
    threads waiting on it."""

    def __init__(self, grid: Grid, poll_s: float = REPLY_POLL_S) -> None:
        self.grid = grid
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._ask_landed = threading.Condition(self._lock)
        self._due: set[str] = set()  # messages whose replies a thread waits for
        self._arrived: dict[str, Message] = {}  # replies pulled, not yet taken, by message
        self._asking = False
        self._next_ask = 0.0  # monotonic time before which no ask starts

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
        waiting = set(self.push_messages(messages))
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        with self._lock:
            self._due |= waiting
        try:
            while True:
                with self._lock:
                    for message_id in waiting & self._arrived.keys():
                        replies.append(self._arrived.pop(message_id))
                        waiting.discard(message_id)
                if not waiting or (deadline is not None and time.monotonic() >= deadline):
                    return replies
                self._ask_or_wait()
        finally:
            with self._lock:  # past the timeout: what is still due is no one's
                self._due -= waiting
                for message_id in waiting:
                    self._arrived.pop(message_id, None)

    def _ask_or_wait(self) -> None:
        """Ask for every reply due, unless another thread is asking: then wait until its
        ask lands (or `poll_s`, whichever comes first)."""
        with self._lock:
            if self._asking:
                self._ask_landed.wait(self.poll_s)
                return
            self._asking = True
            due = set(self._due)
            pause = self._next_ask - time.monotonic()
        arrived: list[Message] = []
        try:
            if pause > 0:
                time.sleep(pause)
            arrived = list(self.pull_messages(due))
        finally:
            with self._lock:
                for reply in arrived:
                    if reply.metadata.reply_to_message_id in self._due:  # its thread still waits
                        self._arrived[reply.metadata.reply_to_message_id] = reply
                self._due -= {reply.metadata.reply_to_message_id for reply in arrived}
                self._asking = False
                self._next_ask = time.monotonic() + self.poll_s
                self._ask_landed.notify_all()
