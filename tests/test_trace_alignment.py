"""Every region of a series file keeps the file's clock: a region that starts after the
file's first row or ends before its last is aligned by its timestamps within a step, and
refused in one line beyond a step; every region's series has the file's length, so they
wrap around together."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import TINY

from fedmc_flwr.cli import main
from fedmc_flwr.config import WorldConfig
from fedmc_flwr.sim import sources, traces

TWO = ["us-east1", "europe-west9"]


def carbon_world(path: Path, step_s: float) -> WorldConfig:
    return WorldConfig(regions=2, carbon_file=str(path), trace_step_s=step_s)


def test_a_region_that_starts_a_step_late_keeps_the_files_clock(tmp_path: Path) -> None:
    """europe-west9's rows start at 600 s: its 600 s value belongs to segment 1, not 0."""
    path = tmp_path / "carbon.csv"
    path.write_text(
        "timestamp,region,value\n"
        "0,us-east1,100\n600,us-east1,110\n1200,us-east1,120\n1800,us-east1,130\n"
        "600,europe-west9,50\n1200,europe-west9,60\n1800,europe-west9,70\n",
        encoding="utf-8",
    )
    signals = sources.FileSource().signals(carbon_world(path, 600.0), TWO)
    assert signals is not None and signals.carbon is not None
    np.testing.assert_array_equal(signals.carbon.values[0, :4], [100, 110, 120, 130])
    # segment 0 has no row of its own: it takes the first row's value; 60 stays at 1200 s
    np.testing.assert_array_equal(signals.carbon.values[1, :4], [50, 50, 60, 70])


def test_on_grid_counts_segments_from_the_files_first_row() -> None:
    grid = traces.on_grid(np.array([3600.0, 7200.0]), np.array([1.0, 2.0]), 3600.0, 4)
    np.testing.assert_array_equal(grid, [1.0, 1.0, 2.0, 2.0])


def test_a_region_that_ends_within_a_step_of_the_file_holds_its_last_value(
    tmp_path: Path,
) -> None:
    """europe-west9's last row is at 1200 s, the file's at 1800 s: both series are four
    segments long, the short one holding its last value, so they wrap around together."""
    path = tmp_path / "carbon.csv"
    path.write_text(
        "timestamp,region,value\n"
        "0,us-east1,100\n600,us-east1,110\n1200,us-east1,120\n1800,us-east1,130\n"
        "0,europe-west9,50\n600,europe-west9,60\n1200,europe-west9,70\n",
        encoding="utf-8",
    )
    signals = sources.FileSource().signals(carbon_world(path, 600.0), TWO)
    assert signals is not None and signals.carbon is not None
    np.testing.assert_array_equal(signals.carbon.lengths, [4, 4])
    np.testing.assert_array_equal(signals.carbon.values[1], [50, 60, 70, 70])


@pytest.mark.parametrize(
    "europe, words",
    [
        (range(3600, 7201, 600), "its first row is 3600 s after"),
        (range(0, 3601, 600), "its last row is 3600 s before the file's last row"),
    ],
    ids=["starts-late", "ends-early"],
)
def test_a_region_whose_series_starts_or_ends_over_a_step_apart_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], europe: range, words: str
) -> None:
    """europe-west9's rows start or end an hour apart from us-east1's: replayed, each would
    wrap around at its own length and their clocks would drift apart."""
    path = tmp_path / "carbon.csv"
    path.write_text(
        "timestamp,region,value\n"
        + "".join(f"{t},us-east1,100\n" for t in range(0, 7201, 600))
        + "".join(f"{t},europe-west9,50\n" for t in europe),
        encoding="utf-8",
    )
    argv = ["baselines", "--config", str(TINY), "--set", f"world.carbon_file={path}"]
    argv += ["--set", "world.trace_step_s=600"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(path) in err and f"region 'europe-west9': {words}" in err
