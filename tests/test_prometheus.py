"""Prometheus both ways, against a real server: the run exporter is scraped, and the
adapter reads a cluster's series back through the server into signals the world replays."""

from __future__ import annotations

import importlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from services import Service, free_port, require_binary

from fedmc_flwr.cli import main
from fedmc_flwr.config import ExperimentConfig, WorldConfig
from fedmc_flwr.integrations.config import PrometheusHook
from fedmc_flwr.integrations.prometheus import (
    PrometheusAdapter,
    RunExporter,
    exporting,
    is_loopback,
    observed_signals,
    start_exporter,
)
from fedmc_flwr.integrations.retry import ServiceUnavailable
from fedmc_flwr.results import TIMING_COLUMNS, MetricsWriter
from fedmc_flwr.sim.world import MultiCloudSim

REGIONS = ["us-east1", "europe-west9", "northamerica-northeast1"]
CARBON = {"us-east1": 410.0, "europe-west9": 55.0, "northamerica-northeast1": 3.0}


def write_run(run_dir: Path, rounds: int) -> None:
    """metrics.csv and timing.csv as a federated run writes them, `rounds` rounds long."""
    metrics = MetricsWriter(run_dir / "metrics.csv")
    timing = MetricsWriter(run_dir / "timing.csv", columns=TIMING_COLUMNS)
    for r in range(1, rounds + 1):
        metrics.write(
            {
                "experiment": "demo",
                "round": r,
                "phase": "eval",
                "client": region,
                "policy": "ppo-fedavg",
                "reward": -1.0 / r - k,
                "latency_ms": 100.0 + k,
                "slo_violation_rate": 0.1,
                "cost_usd": 1e-6,
                "carbon_g": 2e-4,
                "energy_kwh": 1e-6,
            }
            for k, region in enumerate(REGIONS)
        )
        timing.write(
            [
                {
                    "experiment": "demo",
                    "round": r,
                    "phase": "train",
                    "client": "all",
                    "policy": "ppo-fedavg",
                    "steps": 100,
                    "steps_per_second": 1000.0 * r,
                }
            ]
        )


@pytest.fixture
def cluster() -> Iterator[int]:
    """A stand-in for a cluster's own exporters: per-region job counters and carbon."""
    registry = CollectorRegistry()
    jobs = Counter("cluster_jobs", "Jobs that entered at a region", ["region"], registry=registry)
    carbon = Gauge("grid_carbon_intensity", "gCO2eq/kWh", ["region"], registry=registry)
    for region, value in CARBON.items():
        carbon.labels(region).set(value)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    stop = threading.Event()

    def arrivals() -> None:
        """30, 20 and 10 jobs per second of wall clock, however late a tick runs (a
        loaded machine delays the thread, not the count)."""
        started, sent = time.monotonic(), dict.fromkeys(REGIONS, 0)
        while not stop.wait(0.1):
            elapsed = time.monotonic() - started
            for region, per_second in zip(REGIONS, (30, 20, 10), strict=True):
                due = int(elapsed * per_second)
                jobs.labels(region).inc(due - sent[region])
                sent[region] = due

    ticker = threading.Thread(target=arrivals, daemon=True)
    ticker.start()
    try:
        yield port
    finally:
        stop.set()
        ticker.join()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, list[int], Callable[[], None]]]:
    """(url, targets, start): a real Prometheus on 127.0.0.1, started by `start()` once
    the test has appended the ports it should scrape to `targets`."""
    binary = require_binary("prometheus", "apt-get install -y --no-install-recommends prometheus")
    port = free_port()
    targets: list[int] = []
    services: list[Service] = []

    def start() -> None:
        config = tmp_path / "prometheus.yml"
        listed = ", ".join(f'"127.0.0.1:{t}"' for t in targets)
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: fedmc\n    static_configs: [{{targets: [{listed}]}}]\n"
        )
        service = Service(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            tmp_path / "prometheus.log",
        )
        services.append(service)
        url = f"http://127.0.0.1:{port}"
        service.wait_until(lambda: httpx.get(f"{url}/-/ready").is_success, 15, "prometheus")

    url = f"http://127.0.0.1:{port}"
    try:
        yield url, targets, start
    finally:
        for service in services:
            service.stop()


def poll(adapter: PrometheusAdapter, promql: str, count: int, timeout_s: float = 30) -> list:
    """The query's result once it has `count` series (the first scrape takes ~5 s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = adapter.query(promql)
        if len(result) >= count:
            return result
        time.sleep(0.5)
    raise TimeoutError(f"{promql}: fewer than {count} series after {timeout_s} s")


@pytest.mark.slow
def test_exporter_and_adapter_through_a_real_prometheus(prometheus, cluster, tmp_path) -> None:
    url, targets, start = prometheus
    write_run(tmp_path, rounds=2)
    exporter = RunExporter(tmp_path, free_port())
    exporter.refresh()
    targets += [exporter.port, cluster]
    start()
    adapter = PrometheusAdapter(url)
    try:
        rewards = poll(adapter, 'fedmc_heldout_reward{policy="ppo-fedavg"}', len(REGIONS))
        assert {s["metric"]["region"]: float(s["value"][1]) for s in rewards} == {
            region: -0.5 - k for k, region in enumerate(REGIONS)
        }
        assert float(poll(adapter, "fedmc_round", 1)[0]["value"][1]) == 2
        assert float(poll(adapter, "fedmc_steps_per_second", 1)[0]["value"][1]) == 2000.0
        rate = "sum by (region) (rate(cluster_jobs_total[3s]))"
        poll(adapter, rate, len(REGIONS))
        # A rate over a window the series only partly covers is extrapolated short (seen:
        # 0.55 of the true rate right after the first scrapes), so wait until every sample
        # the hook's 4 s of 3 s rates reads is there.
        poll(adapter, "count_over_time(cluster_jobs_total[8s]) >= 7", len(REGIONS))
    finally:
        exporter.stop()
    now = time.time()
    hook = PrometheusHook(
        url=url,
        arrival_rate=rate,
        carbon="avg by (region) (grid_carbon_intensity)",
        window_s=4.0,
        step_s=1.0,
    )
    signals = observed_signals(hook, REGIONS, now)
    last = signals.carbon[-1]
    np.testing.assert_array_equal(last, [CARBON[r] for r in REGIONS])
    rates = signals.arrival_rate[~np.isnan(signals.arrival_rate).any(axis=1)][-1]
    np.testing.assert_allclose(rates, [30.0, 20.0, 10.0], rtol=0.35)
    # The world replays what the server reported: its observation shows the carbon read.
    cfg = ExperimentConfig(world=WorldConfig(regions=3, nodes_per_region=2))
    sim = MultiCloudSim(cfg.world, cfg.reward, [0, 1, 2])
    sim.reset(np.arange(3, dtype=np.uint64))
    sim.replay_signals(arrival_rate=rates, carbon=last)
    obs = sim.step(np.zeros(3, dtype=np.int64)).obs
    np.testing.assert_allclose(
        obs[:, sim.layout.region("carbon")], np.tile(last, (3, 1)), rtol=1e-6
    )


def test_exporter_follows_a_growing_metrics_csv(tmp_path) -> None:
    write_run(tmp_path, rounds=1)
    exporter = RunExporter(tmp_path, free_port())
    exporter.follow(interval_s=0.05)
    try:
        write_run(tmp_path, rounds=3)
        deadline = time.monotonic() + 5
        while exporter.round.labels("demo")._value.get() != 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        body = httpx.get(f"http://127.0.0.1:{exporter.port}/metrics").text
    finally:
        exporter.stop()
    assert 'fedmc_round{experiment="demo"} 3.0' in body
    labels = 'experiment="demo",policy="ppo-fedavg",region="europe-west9"'
    assert f"fedmc_heldout_latency_ms{{{labels}}} 101.0" in body


def test_exporter_on_a_taken_port_logs_one_line_and_the_run_goes_on(tmp_path, caplog) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with caplog.at_level(logging.WARNING, logger="fedmc.hooks"):
            assert start_exporter(tmp_path, taken.getsockname()[1]) is None
    assert len(caplog.records) == 1 and "running without it" in caplog.text


def test_adapter_gives_up_on_a_down_server_after_retries_in_one_line(caplog, monkeypatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr("fedmc_flwr.integrations.retry.time.sleep", pauses.append)
    adapter = PrometheusAdapter(f"http://127.0.0.1:{free_port()}", attempts=3, backoff_s=0.05)
    with caplog.at_level(logging.WARNING, logger="fedmc.hooks"), pytest.raises(ServiceUnavailable):
        adapter.query("up")
    assert pauses == [0.05, 0.1], "three tries, with a doubling pause between them"
    assert len(caplog.records) == 1 and "after 3 tries" in caplog.text


def test_adapter_times_out_on_a_server_that_never_answers(caplog) -> None:
    with socket.socket() as silent:  # accepts connections, never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        adapter = PrometheusAdapter(
            f"http://127.0.0.1:{silent.getsockname()[1]}",
            timeout_s=0.2,
            attempts=2,
            backoff_s=0.01,
        )
        start = time.monotonic()
        with (
            caplog.at_level(logging.WARNING, logger="fedmc.hooks"),
            pytest.raises(ServiceUnavailable, match="Timeout"),
        ):
            adapter.query_range("up", 0, 10, 1)
    assert time.monotonic() - start < 2.0
    assert len(caplog.records) == 1


def test_fedmc_run_serves_the_run_while_it_goes(tmp_path, monkeypatch) -> None:
    """`fedmc run --metrics-port`: the exporter is up while the federation runs, reading the
    run's directory (the federation itself is replaced by one that writes two rounds)."""
    port, seen = free_port(), []

    def federation(config: Path, overrides: list[str], on_existing: str, engine: None) -> int:
        write_run(tmp_path / "demo", rounds=2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and 'fedmc_round{experiment="demo"} 2.0' not in (
            body := httpx.get(f"http://127.0.0.1:{port}/metrics").text
        ):
            time.sleep(0.1)
        seen.append(body)
        return 0

    monkeypatch.setattr("fedmc_flwr.federation.runner.run_federation", federation)
    argv = ["run", "--set", f"results_dir={tmp_path}", "--set", "name=demo"]
    assert main([*argv, "--metrics-port", str(port)]) == 0
    assert 'fedmc_round{experiment="demo"} 2.0' in seen[0]
    with pytest.raises(httpx.ConnectError):  # stopped with the run
        httpx.get(f"http://127.0.0.1:{port}/metrics")


def _listening_on(port: int) -> set[str]:
    """The addresses this process listens on at `port`."""
    return {
        c.laddr.ip
        for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


def test_exporter_listens_on_loopback_unless_asked_and_says_so(tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="fedmc.hooks"):
        port = free_port()
        with exporting(tmp_path, port) as exporter:
            assert exporter is not None and _listening_on(port) == {"127.0.0.1"}
        assert not caplog.records
        port = free_port()
        with exporting(tmp_path, port, "0.0.0.0") as exporter:
            assert exporter is not None and _listening_on(port) == {"0.0.0.0"}
    assert len(caplog.records) == 1 and "open to the network" in caplog.text
    assert is_loopback("::ffff:127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("example")


def test_fedmc_run_passes_metrics_addr_to_the_exporter(tmp_path, monkeypatch) -> None:
    seen: list[tuple[int | None, str]] = []

    @contextmanager
    def exporting_spy(run_dir: Path, port: int | None, addr: str) -> Iterator[None]:
        seen.append((port, addr))
        yield None

    # the modules `fedmc run` imports (sys.modules'), even if a test re-imported them
    prometheus = importlib.import_module("fedmc_flwr.integrations.prometheus")
    runner = importlib.import_module("fedmc_flwr.federation.runner")
    monkeypatch.setattr(prometheus, "exporting", exporting_spy)
    monkeypatch.setattr(runner, "run_federation", lambda *a, **k: 0)
    argv = ["run", "--set", f"results_dir={tmp_path}", "--metrics-port", "9"]
    assert main(argv) == 0 and main([*argv, "--metrics-addr", "0.0.0.0"]) == 0
    assert seen == [(9, "127.0.0.1"), (9, "0.0.0.0")]
