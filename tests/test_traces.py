"""Trace-driven worlds: each reader on a small file of its format, each bad file through the
command line (one line naming the file and the column, exit 2), the synthetic world
unchanged, a trace world's rate following its series. The suite's reference Flower run
replays traces in a federated run (conftest's `tiny_run`, tests/conf/tiny_traced.yaml)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, TINY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedmc_flwr.cli import main
from fedmc_flwr.config import PACKAGED_TRACES, WorldConfig, load_config
from fedmc_flwr.sim import sources, traces
from fedmc_flwr.sim.cloud_carbon import CLOUD_CARBON
from fedmc_flwr.sim.regions import NAMED_REGIONS

DATA = REPO / "tests" / "data"
TWO = ["us-east1", "europe-west9"]
"""TINY's estate: its two regions' names."""


def test_rate_series_reader_keeps_each_regions_rows_in_order() -> None:
    series = traces.read_series(DATA / "rates.csv", "rate")
    assert list(series.times) == TWO
    np.testing.assert_array_equal(series.times["us-east1"], [0, 300, 600, 900])
    np.testing.assert_array_equal(series.values["europe-west9"], [5, 5, 15, 5])


def test_electricity_maps_export_is_read_as_it_comes() -> None:
    series = traces.read_series(DATA / "em_carbon.csv", "carbon")
    assert series.column == "Carbon Intensity gCO₂eq/kWh (LCA)"  # life cycle before direct
    np.testing.assert_array_equal(series.times["FR"], [0, 3600, 7200, 10800])
    np.testing.assert_array_equal(series.values["US-CAR-SCEG"], [410, 415, 420, 425])


def test_newer_electricity_maps_columns_are_read_too(tmp_path: Path) -> None:
    path = tmp_path / "new.csv"
    path.write_text(
        "Datetime (UTC),Zone Id,Carbon intensity gCO₂eq/kWh (direct),"
        "Carbon intensity gCO₂eq/kWh (Life cycle),Carbon-free energy percentage (CFE%)\n"
        "2024-03-01T00:00:00Z,FR,20,30,90\n2024-03-01T01:00:00Z,FR,22,33,91\n",
        encoding="utf-8",
    )
    series = traces.read_series(path, "carbon")
    assert series.column == "Carbon intensity gCO₂eq/kWh (Life cycle)"
    np.testing.assert_array_equal(series.values["FR"], [30, 33])


def test_job_log_reader_reads_arrivals_durations_and_regions() -> None:
    log = traces.read_job_log(DATA / "jobs.csv")
    assert log.arrival[0] == 0 and (np.diff(log.arrival) >= 0).all()
    assert log.size[:3].tolist() == [12.0, 3.0, 30.0]
    assert set(log.region) == set(TWO)


def test_swf_reader_takes_submit_and_run_time_and_skips_unknown_run_times() -> None:
    log = traces.read_job_log(DATA / "jobs.swf")
    assert log.arrival.tolist() == [0, 60, 250, 400, 700]  # job 3's run time is -1
    assert log.size.tolist() == [120, 30, 600, 45, 90]
    assert log.region is None


def test_packaged_series_are_the_real_machine_usage_at_300_s() -> None:
    lengths = {name: len(traces.read_packaged(name)) for name in traces.PACKAGED}
    assert lengths == {"alibaba2018": 2243, "google2019": 8064, "azure_v2": 8640}
    assert tuple(traces.PACKAGED) == PACKAGED_TRACES  # what the config allows, all readable


def test_file_source_puts_every_signal_on_the_worlds_step() -> None:
    world = WorldConfig(
        regions=2,
        arrivals="trace",
        rate_file=str(DATA / "rates.csv"),
        carbon_file=str(DATA / "em_carbon.csv"),
        trace_regions=["US-CAR-SCEG", "FR"],
        trace_step_s=3600.0,
    )
    with pytest.raises(traces.TraceError, match="region 'us-east1' is not in the estate"):
        sources.FileSource().signals(world, TWO)  # the rate file names cloud regions
    world.trace_regions = []
    world.carbon_file = ""
    world.trace_step_s = 600.0
    signals = sources.FileSource().signals(world, TWO)
    assert signals.rate is not None and signals.speedup == 86400 / world.diurnal_period_s
    np.testing.assert_allclose(signals.rate.values[0, :2], np.array([15, 25]) / 20)
    np.testing.assert_allclose(signals.rate_level, [1.0, 7.5 / 20])


def test_job_log_sizes_are_grouped_by_region_and_step_with_mean_one() -> None:
    world = WorldConfig(regions=2, arrivals="trace", job_log=str(DATA / "jobs.csv"))
    signals = sources.FileSource().signals(world, TWO)
    jobs = signals.jobs
    assert jobs is not None and jobs.sizes.mean() == pytest.approx(1.0)
    assert jobs.starts[0, 0] == 0 and jobs.starts[-1, -1] == len(jobs.sizes)
    counts = np.diff(jobs.starts, axis=1)
    np.testing.assert_array_equal(counts, [[4, 2, 3], [2, 2, 2]])  # jobs per 300 s
    np.testing.assert_allclose(signals.rate.values, counts / counts.mean(axis=1, keepdims=True))
    np.testing.assert_allclose(signals.rate_level, [1.0, 2 / 3])


def test_codecarbon_table_feeds_the_named_regions() -> None:
    for region in NAMED_REGIONS:
        assert region.carbon_g_per_kwh == CLOUD_CARBON[region.name]
    assert len(CLOUD_CARBON) == 40 and CLOUD_CARBON["northamerica-northeast1"] == 2.0


GOOD_RATES = "timestamp,region,rate\n0,us-east1,1\n300,us-east1,2\n0,europe-west9,1\n"
BAD_FILES = {
    "missing column": (
        "rate_file",
        "timestamp,region,jobs\n0,us-east1,1\n",
        "column 'rate': missing",
    ),
    "backwards": (
        "rate_file",
        "timestamp,region,rate\n300,us-east1,1\n0,us-east1,2\n0,europe-west9,1\n",
        "column 'timestamp': row 3: time goes backwards",
    ),
    "negative": (
        "carbon_file",
        "timestamp,region,value\n0,us-east1,-5\n0,europe-west9,1\n",
        "column 'value': row 2: '-5' is not a number >= 0",
    ),
    "nan": (
        "price_file",
        "timestamp,region,value\n0,us-east1,0.04\n0,europe-west9,nan\n",
        "column 'value': row 3: 'nan' is not a number >= 0",
    ),
    "gap": (
        "rate_file",
        "timestamp,region,rate\n0,us-east1,1\n900,us-east1,2\n0,europe-west9,1\n",
        "column 'rate': region 'us-east1': a gap of 900 s",
    ),
    "empty": ("rate_file", "", "empty file (expected CSV of (timestamp, region, rate))"),
    "json": (
        "carbon_file",
        '{"timestamp": [0], "region": ["us-east1"]}\n',
        "not a CSV file with a header row (expected CSV of (timestamp, region, value))",
    ),
    "zero rate": (
        "rate_file",
        "timestamp,region,rate\n0,us-east1,1\n0,europe-west9,0\n",
        "column 'rate': region 'europe-west9': the rate is 0 throughout",
    ),
    "unknown region": (
        "rate_file",
        GOOD_RATES + "0,mars-north1,3\n",
        "column 'region': region 'mars-north1' is not in the estate",
    ),
    "job log missing column": (
        "job_log",
        "arrival,cpus\n0,4\n",
        "column 'size': missing",
    ),
    "job log backwards": (
        "job_log",
        "arrival,duration\n10,1\n5,1\n",
        "column 'arrival': row 3: time goes backwards",
    ),
    "swf of the wrong shape": (
        "job_log",
        "; SWF header\n1 0 5 120\n",
        "line 2: 4 fields, expected 18",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_trace_file_is_one_line_naming_file_and_column_and_exit_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, text, message = BAD_FILES[case]
    path = tmp_path / ("trace.swf" if "swf" in case else "trace.csv")
    path.write_text(text, encoding="utf-8")
    overrides = [f"world.{key}={path}"]
    if key in ("rate_file", "job_log"):
        overrides.append("world.arrivals=trace")
    argv = ["baselines", "--config", str(TINY)] + [a for o in overrides for a in ("--set", o)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fedmc baselines: trace error: ")
    assert str(path) in err and message in err, err


def test_a_binary_file_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "rates.parquet"
    path.write_bytes(b"PAR1\x00\x01\x02")
    cfg = load_config(TINY, ["world.arrivals=trace", f"world.rate_file={path}"])
    with pytest.raises(traces.TraceError, match="not a text file"):
        sources.check_files(cfg.world)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["world.arrivals=trace"], "needs exactly one of"),
        (["world.rate_trace=[alibaba2018]"], "not allowed with world.arrivals = 'synthetic'"),
        (["world.arrivals=trace", "world.rate_trace=[borg]"], "world.rate_trace"),
        (["world.trace_time=weekly"], "world.trace_time"),
        (["world.trace_regions=[FR]"], "world.trace_regions"),
        (
            [f"world.carbon_file={DATA / 'em_carbon.csv'}", "world.region_estates=[[2,3],[3,3]]"],
            "not allowed with world.region_estates",
        ),
    ],
)
def test_trace_keys_that_disagree_are_config_errors(overrides: list[str], message: str) -> None:
    from fedmc_flwr.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(TINY, overrides)


def test_packaged_series_cannot_be_stepped_finer_than_they_were_recorded() -> None:
    overrides = ["world.arrivals=trace", "world.rate_trace=[google2019]", "world.trace_step_s=60"]
    from fedmc_flwr.config import ConfigError

    with pytest.raises(ConfigError, match="expected at least the packaged series' 300 s"):
        load_config(TINY, overrides)


def test_relative_trace_paths_are_taken_from_the_config_files_directory() -> None:
    cfg = load_config(REPO / "conf" / "trace_jobs.yaml")
    assert Path(cfg.world.job_log) == DATA / "jobs.csv"


def _two_regime_rates(path: Path, low: float, high: float, segments: int = 40) -> Path:
    rows = ["timestamp,region,rate"]
    for region in TWO:
        rows += [f"{k * 300},{region},{low if k % 2 == 0 else high}" for k in range(segments)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("joint", [False, True])
def test_a_trace_worlds_arrivals_follow_its_rate_series(tmp_path: Path, joint: bool) -> None:
    """Rates alternating 1 and 4 per step: four times the arrivals in the busy steps, for
    one ingress and for every region's workload at once (the joint arena)."""
    from fedmc_flwr.config import RewardWeights
    from fedmc_flwr.sim.world import MultiCloudSim

    world = WorldConfig(
        regions=2,
        nodes_per_region=3,
        arrivals="trace",
        rate_file=str(_two_regime_rates(tmp_path / "rates.csv", 1.0, 4.0)),
        trace_time="real",
        trace_speedup=300.0,  # one step of the trace per world second
        burstiness=0.0,
        outage_rate=0.0,
    )
    sim = MultiCloudSim(world, RewardWeights(), np.zeros(64, dtype=np.int64), joint=joint)
    sim.reset(np.arange(64))
    busy = np.zeros(2)
    for _ in range(400):
        busy += np.bincount(sim.state.segment % 2, minlength=2)  # each waiting job's step
        sim.step(sim.mask.argmax(axis=1))
    assert busy[1] / busy[0] == pytest.approx(4.0, rel=0.1)


def test_a_trace_worlds_mean_rate_keeps_world_load(tmp_path: Path) -> None:
    from fedmc_flwr.config import RewardWeights
    from fedmc_flwr.sim.signals import build_spec

    synthetic = build_spec(WorldConfig(regions=2), RewardWeights())
    traced = build_spec(
        WorldConfig(regions=2, arrivals="trace", rate_trace=["alibaba2018", "azure_v2"]),
        RewardWeights(),
    )
    np.testing.assert_allclose(traced.arrival_rate, synthetic.arrival_rate)
    assert traced.trace is not None and traced.arrival_swing == 0.0
    np.testing.assert_allclose(traced.trace.rate.means(), 1.0)


def test_the_synthetic_source_ignores_the_configs_traces() -> None:
    from fedmc_flwr.config import RewardWeights
    from fedmc_flwr.sim.signals import build_spec

    world = WorldConfig(regions=2, arrivals="trace", rate_trace=["alibaba2018"])
    assert build_spec(world, RewardWeights()).trace is not None
    spec = build_spec(world, RewardWeights(), sources.SyntheticSource())
    plain = build_spec(WorldConfig(regions=2), RewardWeights())
    assert spec.trace is None and spec.arrival_swing == plain.arrival_swing > 0


def test_held_out_start_points_are_drawn_reproducibly_from_the_seeds() -> None:
    from fedmc_flwr.config import RewardWeights
    from fedmc_flwr.sim.world import MultiCloudSim

    world = WorldConfig(regions=2, arrivals="trace", rate_trace=["google2019"])
    starts = []
    for _ in range(2):
        sim = MultiCloudSim(world, RewardWeights(), np.zeros(16, dtype=np.int64))
        sim.reset(np.arange(16), np.zeros(16))
        starts.append(sim.state.origin.copy())
    np.testing.assert_array_equal(starts[0], starts[1])
    days = starts[0] / 86400.0
    assert (days == np.floor(days)).all() and len(np.unique(days)) > 4  # 28 days to start on


def test_job_log_sizes_replace_the_drawn_ones() -> None:
    from fedmc_flwr.config import RewardWeights
    from fedmc_flwr.sim.world import MultiCloudSim

    cfg = load_config(REPO / "conf" / "trace_jobs.yaml")
    sim = MultiCloudSim(cfg.world, RewardWeights(), np.zeros(8, dtype=np.int64))
    sim.reset(np.arange(8))
    log = traces.read_job_log(DATA / "jobs.csv")
    allowed = log.size / log.size.mean() * cfg.world.mean_service_ms / 1000.0
    for _ in range(50):
        assert np.isin(np.round(sim.state.size, 12), np.round(allowed, 12)).all()
        np.testing.assert_array_equal(sim.state.declared, sim.state.size)  # declared exactly
        sim.step(sim.mask.argmax(axis=1))


def test_reported_signals_are_a_source_the_world_replays() -> None:
    """A cluster's samples (Prometheus, through `fedmc hooks`) as a signal source: each
    sample in turn, NaN keeping the region's own value."""
    from fedmc_flwr.config import RewardWeights
    from fedmc_flwr.integrations.decisions import ReplayedSignals, Signals
    from fedmc_flwr.sim.world import MultiCloudSim

    carbon = np.array([[100.0, np.nan], [300.0, 50.0]])  # two samples of two regions
    source = ReplayedSignals(Signals(carbon=carbon), sample_s=0.5)
    world = WorldConfig(regions=2, nodes_per_region=2)
    sim = MultiCloudSim(world, RewardWeights(), np.zeros(4, dtype=np.int64), source=source)
    sim.reset(np.arange(4))
    own = CLOUD_CARBON["europe-west9"]  # the region's own (annual) mean
    seen = set()
    for _ in range(100):
        sample = sim.state.segment % 2
        observed = sim.obs[:, sim.layout.region("carbon")]
        np.testing.assert_allclose(observed[:, 0], np.where(sample == 0, 100.0, 300.0))
        np.testing.assert_allclose(observed[:, 1], np.where(sample == 0, own, 50.0), rtol=1e-6)
        seen.update(sample.tolist())
        sim.step(sim.mask.argmax(axis=1))
    assert seen == {0, 1}


def test_every_signal_source_gives_the_kernels_one_argument_type() -> None:
    """Synthetic, trace-file and replayed worlds hand the kernels statics of one numba type
    (dtypes and memory layouts alike), so that the kernels compile once for all of them
    rather than once more, for some 40 s, per kind of world."""
    import numba

    from fedmc_flwr.config import RewardWeights
    from fedmc_flwr.integrations.decisions import ReplayedSignals, Signals
    from fedmc_flwr.sim.world import MultiCloudSim

    replayed = ReplayedSignals(Signals(carbon=np.array([[100.0, 90.0], [300.0, 50.0]])), 0.5)
    traced = load_config(REPO / "conf" / "trace_jobs.yaml")
    worlds = [
        MultiCloudSim(WorldConfig(regions=2), RewardWeights(), [0]),
        MultiCloudSim(traced.world, traced.reward, [0]),
        MultiCloudSim(WorldConfig(regions=2), RewardWeights(), [0], source=replayed),
    ]
    kinds = {str(numba.typeof(world._statics)) for world in worlds}
    assert len(kinds) == 1, kinds


def test_the_trace_dc_world_and_its_sweep_load() -> None:
    from fedmc_flwr.sweeps import load_sweep

    cfg = load_config(REPO / "conf" / "trace_dc.yaml")
    assert cfg.world.rate_trace == ["alibaba2018", "google2019", "azure_v2"]
    sweep = load_sweep(REPO / "conf" / "sweeps" / "trace_dc.yaml", REPO / "results")
    assert {c.variant for c in sweep.cells} == {"ppo-fedavg", "ppo-centralised"}
    assert {c.seed for c in sweep.cells} == {0, 1, 2, 3, 4}


TEXTS = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.lists(
        st.tuples(
            st.sampled_from(["0", "300", "-5", "nan", "x", "", "2024-01-01", "1e400", "inf"]),
            st.sampled_from(["us-east1", "europe-west9", "", "mars", "a,b"]),
            st.sampled_from(["1", "0", "-1", "nan", "", "1e308", "x"]),
        ),
        max_size=8,
    ).map(
        lambda rows: (
            "timestamp,region,rate,value,arrival,size\n"
            + "".join(f"{t},{r},{v},{v},{t},{v}\n" for t, r, v in rows)
        ).encode()
    ),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=TEXTS, kind=st.sampled_from(["rate", "carbon", "job log", "swf"]))
def test_any_bytes_as_a_trace_file_read_or_are_one_trace_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, kind: str
) -> None:
    """Whatever a file holds, a reader returns its rows or raises `TraceError`, never
    another exception (which the command would show as a traceback)."""
    path = tmp_path_factory.mktemp("any") / ("trace.swf" if kind == "swf" else "trace.csv")
    path.write_bytes(data)
    try:
        if kind in ("rate", "carbon"):
            series = traces.read_series(path, kind)
            for region, times in series.times.items():
                assert (np.diff(times) > 0).all() and (series.values[region] >= 0).all()
        else:
            log = traces.read_job_log(path)
            assert (np.diff(log.arrival) >= 0).all() and (log.size > 0).all()
    except traces.TraceError as exc:
        assert len(str(exc).splitlines()) == 1 and str(path) in str(exc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=TEXTS, key=st.sampled_from(["rate_file", "job_log", "carbon_file"]))
def test_any_bytes_as_a_worlds_trace_file_give_its_signals_or_one_trace_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, key: str
) -> None:
    """The same through the whole file source: on the world's grid, regions matched."""
    path = tmp_path_factory.mktemp("any") / "trace.csv"
    path.write_bytes(data)
    world = WorldConfig(regions=2, arrivals="synthetic" if key == "carbon_file" else "trace")
    setattr(world, key, str(path))
    try:
        signals = sources.FileSource().signals(world, TWO)
    except traces.TraceError as exc:
        assert len(str(exc).splitlines()) == 1 and str(path) in str(exc)
    else:
        assert signals is not None
        grids = [g for g in (signals.rate, signals.carbon) if g is not None]
        assert all(np.isfinite(g.values).all() and (g.values >= 0).all() for g in grids)


def test_a_job_log_spanning_too_many_steps_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("arrival,size,region\n0,1,us-east1\n1e300,1,europe-west9\n")
    world = WorldConfig(regions=2, arrivals="trace", job_log=str(path))
    with pytest.raises(traces.TraceError, match="column 'arrival': the jobs span"):
        sources.FileSource().signals(world, TWO)
