"""The one aligned table of policies that `fedmc run`, `baselines`, `train` and `transfer` print.

Its columns are `fedmc_flwr.metrics`' titles, so the table and `fedmc report` name each
statistic alike: cost, carbon and energy are means per job, and "per-world p95" is the
mean over held-out worlds of each world's 95th percentile of latency, as in the report.
"""

from __future__ import annotations

import math

from fedmc_flwr.metrics import BY_NAME, POINT_METRICS, Metric

REWARD = BY_NAME["reward"]

_HEADERS = ("policy", "reward ± ci95", *(metric.title for metric in POINT_METRICS))


def with_ci(value: float, half_width: float, metric: Metric = REWARD, sign: str = "") -> str:
    """`value ± half_width` in the metric's table unit, the one way every table writes an
    interval: "n/a" without a value, the value alone without an interval; `sign="+"`
    marks a difference."""
    if math.isnan(value):
        return "n/a"
    text = format(value * metric.scale, sign + metric.fmt)
    if math.isnan(half_width):
        return text
    return f"{text} ± {metric.cell(half_width)}"


def _cells(row: dict) -> list[str]:
    return [
        row["policy"],
        with_ci(row["reward"], row["reward_ci95"]),
        *(metric.cell(row[metric.csv_column]) for metric in POINT_METRICS),
    ]


def format_table(rows: list[dict]) -> str:
    """The `client="all"` rows (metrics.csv's columns), aligned."""
    body = [_cells(row) for row in rows if row["client"] == "all"]
    widths = [max(map(len, column)) for column in zip(_HEADERS, *body, strict=True)]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if k == 0 else cell.rjust(width)
            for k, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in [list(_HEADERS), *body]
    )
