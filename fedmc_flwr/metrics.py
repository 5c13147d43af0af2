"""The held-out metrics, one row each: the one list the tables, plots, CSVs and gauges read.

Every figure a policy is judged on is a mean per job over one held-out world (the
reward, latency, SLO violations, cost, carbon, energy), except `latency_p95_ms`, the 95th
percentile of one world's job latencies. Aggregates over several worlds are means of
these per-world values, so "p95" is always the mean over worlds of each world's p95 and
the run's table, metrics.csv, the report and the sweeps agree on it.

One metric has two CSV names: per_seed.csv calls the share of jobs over the SLO
`slo_violation` (the simulator's name), metrics.csv `slo_violation_rate`. Both files are a
public schema, so the two names stay; `Metric.column` says which one metrics.csv uses.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """How one metric is named, scaled and printed."""

    name: str
    """Its per_seed.csv column (and the simulator's metric name, but for the p95)."""
    title: str
    """Column title in printed tables, with the unit after scaling."""
    label: str
    """Axis label of plots, with the unit after scaling."""
    scale: float
    """Factor from the CSV's unit (USD, g, kWh, ms, share) to the title's."""
    fmt: str
    """Number format of a scaled value."""
    higher_is_better: bool
    """The direction a reader should want it to move."""
    help: str
    """One sentence for the Prometheus gauge of its metrics.csv column."""
    column: str = ""
    """Its metrics.csv column, when that differs from `name`."""
    board: str = ""
    """Its TensorBoard name, when the title's unit differs from the CSV's (`scale` != 1):
    TensorBoard shows the scaled value, so the name says the unit it is in."""

    @property
    def csv_column(self) -> str:
        """The metrics.csv column of this metric."""
        return self.column or self.name

    @property
    def board_name(self) -> str:
        """The name of this metric in TensorBoard, in the title's unit."""
        return self.board or self.name

    def cell(self, value: float) -> str:
        """A value in the CSV's unit, scaled and formatted for a table."""
        return format(value * self.scale, self.fmt)


METRICS: tuple[Metric, ...] = (
    Metric(
        "reward",
        "reward",
        "reward per job",
        1.0,
        ".4f",
        True,
        "Mean held-out reward per job",
    ),
    Metric(
        "latency_ms",
        "latency ms",
        "mean latency (ms)",
        1.0,
        ".1f",
        False,
        "Mean held-out latency per job, in milliseconds",
    ),
    Metric(
        "latency_p95_ms",
        "per-world p95 ms",
        "per-world p95 latency (ms)",
        1.0,
        ".1f",
        False,
        "Mean over held-out worlds of each world's 95th percentile latency, in milliseconds",
    ),
    Metric(
        "slo_violation",
        "SLO viol.",
        "SLO-violation rate",
        1.0,
        ".3f",
        False,
        "Share of held-out jobs that violated the SLO",
        column="slo_violation_rate",
    ),
    Metric(
        "cost_usd",
        "cost µUSD/job",
        "cost per job (µUSD)",
        1e6,
        ".3f",
        False,
        "Mean held-out cost per job, in USD",
        board="cost_µUSD",
    ),
    Metric(
        "carbon_g",
        "carbon mg/job",
        "carbon per job (mg CO2eq)",
        1e3,
        ".3f",
        False,
        "Mean held-out carbon per job, in gCO2eq",
        board="carbon_mg",
    ),
    Metric(
        "energy_kwh",
        "energy mWh/job",
        "energy per job (mWh)",
        1e6,
        ".3f",
        False,
        "Mean held-out energy per job, in kWh",
        board="energy_mWh",
    ),
)
"""In the order of the CSVs' columns."""

BY_NAME: dict[str, Metric] = {metric.name: metric for metric in METRICS}

POINT_METRICS: tuple[Metric, ...] = METRICS[1:]
"""Everything but the reward: the figures a table shows beside the reward's interval."""
