"""Progress off a terminal is a line every few seconds, not a bar redrawn with `\\r`."""

from __future__ import annotations

import io

from tqdm import tqdm

from fedmc_flwr.progress_bars import LINE_INTERVAL_S, LineProgress, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_progress_is_whole_lines_at_most_one_per_interval() -> None:
    log = io.StringIO()
    now = [0.0]
    with LineProgress(5, "eval", log, clock=lambda: now[0]) as bar:
        for k, t in enumerate([1.0, 2.0, LINE_INTERVAL_S + 1.0, LINE_INTERVAL_S + 2.0, 60.0]):
            now[0] = t
            bar.set_description(f"sed @ region {k}")
            bar.update()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and log.getvalue().endswith("\n")
    # the 3rd step is the first past the interval, the 5th is the last
    assert lines == ["sed @ region 2: 3/5 evals, 00:06", "sed @ region 4: 5/5 evals, 01:00"]


def test_a_terminal_gets_tqdms_bar_and_a_log_file_or_pipe_the_lines() -> None:
    bar = progress_bar(3, "cell", file=_Terminal())
    assert isinstance(bar, tqdm)
    bar.close()
    piped = progress_bar(3, "cell", file=io.StringIO())
    assert isinstance(piped, LineProgress) and not isinstance(piped, tqdm)
    silent, log = progress_bar(1, "cell", file=io.StringIO(), disable=True), io.StringIO()
    silent.file = log
    silent.update()
    assert log.getvalue() == ""
