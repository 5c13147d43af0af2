"""What the console says while a federated run goes: a line as each client's reply comes
in, and one line per round with its held-out reward and the time left.

Large experiments spend minutes in a round, and Flower hands the strategy a round's
replies only once all of them are in, so the strategy reports each reply as it arrives
(`strategy.RegionStrategy`) and the recorder closes each round (`recorder.RunRecorder`).
The lines go through Flower's logger, so they reach `fedmc run`'s console and `flwr run
--stream` alike. The time left is the last round's duration times the rounds left: the
first round also holds the start of Ray and of the clients, so its estimate is the
pessimistic one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from logging import INFO

from flwr.common.logger import log

from fedmc_flwr.analysis.tables import duration

DONE = "round %d/%d done"
"""How each round's line starts, before its details."""


class RoundProgress:
    """The console's account of one run's rounds (see the module docstring)."""

    def __init__(
        self,
        rounds: int,
        region_names: list[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rounds = rounds
        self.region_names = region_names
        self._clock = clock
        self._round_start = clock()
        self._reported: Counter[tuple[int, str]] = Counter()
        self._lock = threading.Lock()  # Flower asks the clients from a thread pool

    def reply(self, server_round: int, phase: str, regions: list[int], wall_s: float) -> None:
        """One client's reply of `phase` ('trained' or 'evaluated') for `regions` came in
        after `wall_s` seconds."""
        named = [self.region_names[r] for r in regions if 0 <= r < len(self.region_names)]
        if not named:
            return
        with self._lock:
            self._reported[(server_round, phase)] += len(named)
            done = self._reported[(server_round, phase)]
        log(
            INFO,
            "round %d/%d: %s %s in %s (%d of %d regions)",
            server_round,
            self.rounds,
            ", ".join(named),
            phase,
            duration(wall_s),
            done,
            len(self.region_names),
        )

    def round_done(self, server_round: int, reward: float, regions: int) -> None:
        """The round's line: its held-out reward (mean over `regions` regions), how long it
        took and about how long the rest will take."""
        now = self._clock()
        took, self._round_start = now - self._round_start, now
        left = self.rounds - server_round
        log(
            INFO,
            DONE + " in %s: held-out reward %.4f (mean over %d regions)%s",
            server_round,
            self.rounds,
            duration(took),
            reward,
            regions,
            f", about {duration(took * left)} left" if left else "",
        )
