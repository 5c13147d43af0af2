"""The one aligned table of policies that `fedmc run`, `baselines`, `train` and `transfer` print.

Each column's title names its statistic, so that the table and the report (`fedmc report`)
can be read side by side: cost, carbon and energy are means per job, and "p95" is the mean
over regions of each region's percentile of pooled job latencies.
"""

from __future__ import annotations

_HEADERS = (
    "policy",
    "reward ± ci95",
    "latency ms",
    "p95 ms",
    "SLO viol.",
    "cost µUSD",
    "carbon mg",
    "energy mWh",
)


def _cells(row: dict) -> list[str]:
    return [
        row["policy"],
        f"{row['reward']:.4f} ± {row['reward_ci95']:.4f}",
        f"{row['latency_ms']:.1f}",
        f"{row['latency_p95_ms']:.1f}",
        f"{row['slo_violation_rate']:.3f}",
        f"{row['cost_usd'] * 1e6:.3f}",
        f"{row['carbon_g'] * 1e3:.3f}",
        f"{row['energy_kwh'] * 1e6:.3f}",
    ]


def format_table(rows: list[dict]) -> str:
    """The `client="all"` rows, aligned; cost, carbon and energy are means per job."""
    body = [_cells(row) for row in rows if row["client"] == "all"]
    widths = [max(map(len, column)) for column in zip(_HEADERS, *body, strict=True)]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if k == 0 else cell.rjust(width)
            for k, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in [list(_HEADERS), *body]
    )
