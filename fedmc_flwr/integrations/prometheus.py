"""Prometheus, both directions: a run's metrics out, a cluster's signals in.

Out: `RunExporter` serves the figures of a run as it goes (round, per-region held-out
reward, latency, SLO violations, cost, carbon, energy, steps per second). The rounds are
recorded inside Flower's ServerApp process, so the exporter follows the run's
`metrics.csv` and `timing.csv` from the `fedmc run` process instead of living in Flower's.

In: `PrometheusAdapter` asks a Prometheus server's HTTP API (instant and range queries,
PromQL from config) and turns per-region series into the arrays the world replays
(`RegionTrace`), so a policy can be judged on what a real cluster reported. Each request
has a timeout and bounded retries; a server that stays down raises `ServiceUnavailable`
after one log line, and the caller keeps the world's own signals.
"""

from __future__ import annotations

import csv
import ipaddress
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from fedmc_flwr.integrations.config import PrometheusHook
from fedmc_flwr.integrations.extras import require
from fedmc_flwr.integrations.retry import with_retries
from fedmc_flwr.metrics import METRICS

if TYPE_CHECKING:  # decisions imports the ONNX serving, which the exporter does not need
    from fedmc_flwr.integrations.decisions import Signals

log = logging.getLogger("fedmc.hooks")

EVAL_GAUGES = {metric.csv_column: metric.help for metric in METRICS}
"""metrics.csv eval columns exported as `fedmc_heldout_<column>{experiment,region,policy}`."""


LOOPBACK = "127.0.0.1"
"""Where the exporter listens unless asked otherwise: metrics name the experiment, its
regions and their results, which are nobody else's business by default."""


def is_loopback(addr: str) -> bool:
    """Whether `addr` (an IP address, IPv4-mapped IPv6 included, or 'localhost') reaches
    this machine only."""
    if addr == "localhost":
        return True
    try:
        address = ipaddress.ip_address(addr)
    except ValueError:
        return False  # a host name: whatever it resolves to is not held to loopback
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, as dual-stack reports
    return (mapped or address).is_loopback


def _number(text: str) -> float:
    return float(text) if text else float("nan")


def _read_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


class RunExporter:
    """The figures of one run's results directory, served at `/metrics` on `port`.

    `refresh()` reads the directory's CSVs again (they are small: tens of rows a round);
    `follow()` does so every `interval_s` in a daemon thread until `stop()`.
    """

    def __init__(self, run_dir: Path, port: int, addr: str = LOOPBACK) -> None:
        prometheus_client = require("prometheus_client", "--metrics-port")
        Gauge = prometheus_client.Gauge
        self.run_dir = Path(run_dir)
        self.registry = prometheus_client.CollectorRegistry()
        labels = ["experiment", "region", "policy"]
        self.round = Gauge(
            "fedmc_round",
            "Last round with a held-out evaluation",
            ["experiment"],
            registry=self.registry,
        )
        self.eval = {
            column: Gauge(f"fedmc_heldout_{column}", doc, labels, registry=self.registry)
            for column, doc in EVAL_GAUGES.items()
        }
        self.steps = Gauge(
            "fedmc_steps_per_second",
            "Environment steps per second of the last round",
            ["experiment", "phase"],
            registry=self.registry,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server, self._server_thread = prometheus_client.start_http_server(
            port, addr=addr, registry=self.registry
        )
        self.port = port

    def refresh(self) -> None:
        """Set every gauge from the last round of metrics.csv and timing.csv."""
        evals = [r for r in _read_rows(self.run_dir / "metrics.csv") if r["phase"] == "eval"]
        if evals:
            last = max(int(r["round"]) for r in evals)
            for row in (r for r in evals if int(r["round"]) == last):
                self.round.labels(row["experiment"]).set(last)
                for column, gauge in self.eval.items():
                    labels = (row["experiment"], row["client"], row["policy"])
                    gauge.labels(*labels).set(_number(row[column]))
        timing = [r for r in _read_rows(self.run_dir / "timing.csv") if r["client"] == "all"]
        for row in timing:  # in file order, so the last round's value stays
            self.steps.labels(row["experiment"], row["phase"]).set(_number(row["steps_per_second"]))

    def follow(self, interval_s: float = 1.0) -> None:
        """Refresh in the background; a malformed or half-written CSV is tried again later."""

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.refresh()
                except (OSError, ValueError, KeyError) as exc:
                    log.debug("metrics exporter: %s; retrying", exc)

        self._thread = threading.Thread(target=loop, name="fedmc-exporter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """One last refresh (the final round), then stop the thread and the HTTP server."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.refresh()
        except (OSError, ValueError, KeyError) as exc:
            log.warning("metrics exporter: last refresh failed: %s", exc)
        self._server.shutdown()
        self._server.server_close()
        self._server_thread.join()


@contextmanager
def exporting(
    run_dir: Path, port: int | None, addr: str = LOOPBACK
) -> Iterator[RunExporter | None]:
    """`start_exporter` for the duration of a block (nothing when `port` is None)."""
    exporter = start_exporter(run_dir, port, addr) if port else None
    try:
        yield exporter
    finally:
        if exporter is not None:
            exporter.stop()


def start_exporter(run_dir: Path, port: int, addr: str = LOOPBACK) -> RunExporter | None:
    """A following exporter on `addr`, or None and one log line when the port cannot be
    served: metrics are worth a warning, never a failed training run. An address beyond
    loopback is the user's request (`--metrics-addr`), said in one line when it is served."""
    try:
        exporter = RunExporter(run_dir, port, addr)
    except OSError as exc:
        log.warning(
            "metrics exporter: cannot serve %s port %d (%s); running without it", addr, port, exc
        )
        return None
    if not is_loopback(addr):
        log.warning(
            "metrics exporter: serving on %s:%d, open to the network as --metrics-addr asks",
            addr,
            port,
        )
    exporter.follow()
    return exporter


@dataclass(frozen=True)
class RegionTrace:
    """One signal per region over time, as the world replays it."""

    times: np.ndarray
    """[T] unix seconds of the samples."""
    values: np.ndarray
    """[T, R] value of each region at each time; NaN where the server had no sample."""


class PrometheusAdapter:
    """Instant and range queries against one Prometheus server's HTTP API."""

    def __init__(
        self, url: str, timeout_s: float = 2.0, attempts: int = 3, backoff_s: float = 0.2
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s

    def _get(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        def call() -> list[dict[str, Any]]:
            response = httpx.get(f"{self.url}{path}", params=params, timeout=self.timeout_s)
            response.raise_for_status()
            body = response.json()
            if body.get("status") != "success":
                raise ValueError(f"{body.get('errorType')}: {body.get('error')}")
            return body["data"]["result"]

        return with_retries(
            call,
            f"prometheus {self.url} {params.get('query')!r}",
            (httpx.HTTPError, ValueError),
            self.attempts,
            self.backoff_s,
        )

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """`/api/v1/query`: a list of `{"metric": labels, "value": [t, "v"]}`."""
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = at
        return self._get("/api/v1/query", params)

    def query_range(
        self, promql: str, start: float, end: float, step_s: float
    ) -> list[dict[str, Any]]:
        """`/api/v1/query_range`: a list of `{"metric": labels, "values": [[t, "v"], ...]}`."""
        params = {"query": promql, "start": start, "end": end, "step": step_s}
        return self._get("/api/v1/query_range", params)

    def region_trace(
        self,
        promql: str,
        regions: list[str],
        label: str,
        start: float,
        end: float,
        step_s: float,
    ) -> RegionTrace:
        """The range query's series, one column per world region (matched on `label`)."""
        times = np.arange(start, end + step_s / 2, step_s)
        values = np.full((len(times), len(regions)), np.nan)
        for series in self.query_range(promql, start, end, step_s):
            region = series["metric"].get(label)
            if region not in regions:
                continue
            for t, v in series["values"]:
                row = round((float(t) - start) / step_s)
                if 0 <= row < len(times):
                    values[row, regions.index(region)] = float(v)
        return RegionTrace(times, values)


def observed_signals(hook: PrometheusHook, regions: list[str], now: float) -> Signals:
    """The configured PromQL signals over the last `window_s`, ready for the world to
    replay. A region that reported no arrivals keeps the world's own rate (a world cannot
    run an ingress with none). Raises `ServiceUnavailable` when the server stays down."""
    from fedmc_flwr.integrations.decisions import Signals

    adapter = PrometheusAdapter(hook.url, hook.timeout_s, hook.attempts)
    traces = {}
    for name in ("arrival_rate", "carbon"):
        promql = getattr(hook, name)
        if promql:
            trace = adapter.region_trace(
                promql, regions, hook.region_label, now - hook.window_s, now, hook.step_s
            )
            traces[name] = trace.values
    if "arrival_rate" in traces:
        rates = traces["arrival_rate"]
        traces["arrival_rate"] = np.where(rates > 0, rates, np.nan)
    return Signals(**traces)
