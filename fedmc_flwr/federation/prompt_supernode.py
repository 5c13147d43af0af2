"""Flower's SuperNode with its waits cut to what a few nodes on one network need.

Three waits of Flower 1.42's SuperNode and its ClientApps cost seconds per message, twice
per round (train, then evaluate), on every node:

- **Pulls of arrays not there yet.** A SuperLink hands a SuperNode a message as soon as it
  holds the header, and the ServerApp pushes the arrays after it; a SuperNode offers its
  ClientApp the task as soon as it holds the header, and fetches the arrays after.
  Whoever asks for an array not there yet waits `PULL_INITIAL_BACKOFF`, 1 s, before
  asking again, doubling up to 10 s, though the array arrives milliseconds to a second
  later. Here the first retry comes after `FIRST_RETRY_S`, doubling up to `RETRY_CAP_S`
  (`retry_pulls_promptly`, also called by the ClientApp launcher `forking_exec` and by
  the ServerApp, which pulls each reply's arrays the same way).
- **The idle poll.** A SuperNode with no message asks the SuperLink again after 3 s
  (`flwr/supernode/start_client_internal.py`), so a round's message waits 1.5 s on
  average, up to 3 s, before a node even sees it. Here it asks every `IDLE_POLL_S`: the
  SuperLink answers `1 / IDLE_POLL_S` requests a second per idle node, which a federation
  of a few regions does not notice; Flower's 3 s suits thousands of nodes.
- **The reply wait.** While its ClientApp works, the SuperNode looks for the reply, and
  then for each of its arrays, every 0.5 s. Here every `REPLY_POLL_S`; these look into
  the node's own memory.

`fedmc-supernode` is Flower's `flower-supernode`, the same arguments, with these waits;
`fedmc deploy` starts it in place of Flower's.
"""

from __future__ import annotations

import sys
import time
from typing import Any

FIRST_RETRY_S = 0.05
"""Before the first retry of an array not there yet; Flower's default is 1 s."""
RETRY_CAP_S = 0.2
"""The longest wait between two retries of one array; Flower's is 10 s."""
IDLE_POLL_S = 0.2
"""Between a SuperNode's asks for a message while it has none; Flower's is 3 s."""
REPLY_POLL_S = 0.05
"""Between a SuperNode's looks for its ClientApp's reply and arrays; Flower's is 0.5 s."""
FLOWER_IDLE_S = 3.0
"""Flower's own idle poll, what `PromptClock.sleep` recognises as one."""


def retry_pulls_promptly() -> None:
    """In this process, Flower's array pulls retry first after `FIRST_RETRY_S`, then at
    most `RETRY_CAP_S` apart."""
    from flwr.supercore.inflatable import inflatable_utils

    for pull in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        defaults = pull.__kwdefaults__ or {}
        if not {"initial_backoff", "backoff_cap"} <= defaults.keys():  # another Flower
            raise RuntimeError(f"{pull.__qualname__} has no initial_backoff or backoff_cap")
        defaults["initial_backoff"] = FIRST_RETRY_S
        defaults["backoff_cap"] = RETRY_CAP_S


class PromptClock:
    """The `time` module as the SuperNode's loop sees it: the same, except that its idle
    sleep lasts `IDLE_POLL_S` and its shorter waits at most `REPLY_POLL_S`."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(IDLE_POLL_S if seconds >= FLOWER_IDLE_S else min(seconds, REPLY_POLL_S))


def poll_promptly() -> None:
    """In this process, the SuperNode's loop waits as `PromptClock` says."""
    from flwr.supernode import start_client_internal

    if start_client_internal.time is not time:  # a Flower other than the lock's
        raise RuntimeError("flwr.supernode.start_client_internal no longer imports time")
    start_client_internal.time = PromptClock()


def supernode() -> None:
    """`fedmc-supernode`: Flower's `flower-supernode` with the waits above."""
    from flwr.supernode.cli import flower_supernode

    retry_pulls_promptly()
    poll_promptly()
    sys.argv[0] = "fedmc-supernode"
    sys.exit(flower_supernode())
