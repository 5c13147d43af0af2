"""TensorBoard: the event files of a run parse, with TensorBoard's own reader, and hold the
held-out metrics per region in the console table's units, each dispatcher's beside them,
CleanRL's PPO diagnostics and training return, and the run's config and hyperparameters; a
resumed run hides what its interrupted round had logged; the PPO updates survive the wire.
A real run's board is checked on the reference run (tests/simulation/test_reference_run.py)."""

from __future__ import annotations

import numpy as np
import pytest
from test_evaluation import tiny

from fedmc_flwr.config import to_yaml
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.federation import wire
from fedmc_flwr.federation.aggregation import RegionUpdate
from fedmc_flwr.federation.recorder import RunRecorder
from fedmc_flwr.federation.runner import run_completed
from fedmc_flwr.metrics import BY_NAME, METRICS
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import ROUND_METRICS, UPDATE_METRICS
from fedmc_flwr.results import read_per_seed
from fedmc_flwr.tracking import PPO_TAGS, Board, heldout_scalars, update_steps

HELD_OUT_TAGS = {
    "heldout/reward",
    "heldout/latency_ms",
    "heldout/latency_p95_ms",
    "heldout/slo_violation",
    "heldout/cost_µUSD",
    "heldout/carbon_mg",
    "heldout/energy_mWh",
}
UPDATE_TAGS = {
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
    "charts/learning_rate",
    "charts/SPS",
}
RETURN_TAG = "charts/episodic_return"
CLEANRL_TAGS = UPDATE_TAGS | {RETURN_TAG}
"""What a learner's run holds besides its held-out metrics."""
DISPATCHER_RUNS = {f"dispatchers/{name}" for name in DISPATCHERS}

Scalars = dict[str, dict[str, list[tuple[int, float]]]]


def _multiplexer(tb):
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    multiplexer = EventMultiplexer().AddRunsFromDirectory(str(tb))
    multiplexer.Reload()
    return multiplexer


def read_board(tb) -> Scalars:
    """run -> tag -> [(step, value)], as TensorBoard itself reads the event files."""
    multiplexer = _multiplexer(tb)
    return {
        run: {
            tag: [(e.step, e.value) for e in multiplexer.Scalars(run, tag)]
            for tag in tags["scalars"]
        }
        for run, tags in multiplexer.Runs().items()
    }


def _update(value: float, steps: float = 64.0) -> dict[str, float]:
    return {name: value for name in UPDATE_METRICS} | {"env_steps": steps}


def read_settings(tb, run: str = "all") -> tuple[str, dict[str, object]]:
    """The config text and the hyperparameters of `run`, as TensorBoard reads them."""
    from tensorboard.plugins.hparams import plugin_data_pb2
    from tensorboard.util import tensor_util

    multiplexer = _multiplexer(tb)
    (event,) = multiplexer.Tensors(run, "config/text_summary")
    text = tensor_util.make_ndarray(event.tensor_proto).item().decode()
    content = multiplexer.PluginRunToTagToContent("hparams")[run]["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    values = {
        name: getattr(value, value.WhichOneof("kind")) for name, value in start.hparams.items()
    }
    return text, values


def test_cleanrl_names_cover_every_update_diagnostic() -> None:
    assert set(PPO_TAGS.values()) == UPDATE_TAGS
    assert set(PPO_TAGS) == set(UPDATE_METRICS) - {"env_steps"}


def test_held_out_metrics_are_in_the_units_of_the_console_table() -> None:
    """TensorBoard shows what the table prints (µUSD, mg, mWh per job), not metrics.csv's
    USD, g and kWh (values near 1e-6, whose tick labels read "5e-6" as "…5"), and each
    scaled metric's tag names its unit."""
    row = {"reward": -0.5, "reward_ci95": 0.1, "latency_ms": 120.0, "latency_p95_ms": 300.0}
    row |= {"slo_violation_rate": 0.25, "cost_usd": 2.5e-6, "carbon_g": 4e-4, "energy_kwh": 3e-6}
    scalars = heldout_scalars(row)
    assert set(scalars) == HELD_OUT_TAGS
    assert scalars["heldout/cost_µUSD"] == pytest.approx(2.5)
    assert scalars["heldout/carbon_mg"] == pytest.approx(0.4)
    assert scalars["heldout/energy_mWh"] == pytest.approx(3.0)
    assert scalars["heldout/latency_ms"] == 120.0 and scalars["heldout/reward"] == -0.5
    for metric in METRICS:  # the number the table prints, to its last printed digit
        value = scalars[f"heldout/{metric.board_name}"]
        assert format(value, metric.fmt) == metric.cell(float(row[metric.csv_column]))
        assert (metric.board_name == metric.name) == (metric.scale == 1.0)


def test_updates_sit_at_their_share_of_the_round() -> None:
    # two updates of 64 and one of 32 env steps; the round took 320 steps over all learners
    updates = [_update(0.0, 64), _update(0.0, 64), _update(0.0, 32)]
    assert update_steps(1000, 320, updates) == [1128, 1256, 1320]


def test_the_updates_survive_the_wire_and_a_malformed_reply_is_ignored() -> None:
    updates = [_update(0.5), _update(float("nan"))]
    values = wire.unpack(wire.pack(1, wire.updates_metrics(updates)), 1)
    back = wire.updates_of(values)
    assert back[0] == updates[0] and np.isnan(back[1]["entropy"])
    assert wire.updates_of({}) == []
    broken = values | {"updates.entropy": b"\x00" * 8}  # one value where two are due
    assert wire.updates_of(broken) == []
    assert wire.updates_of(values | {"updates.entropy": 1.0}) == []


def test_a_resumed_board_hides_what_the_interrupted_round_logged(tmp_path) -> None:
    first = Board(tmp_path)
    first.scalars("all", {"heldout/reward": -1.0}, 100)
    first.scalars("all", {"heldout/reward": -9.0, "losses/entropy": float("nan")}, 200)
    first.close()
    resumed = Board(tmp_path, purge_from=100)
    resumed.scalars("all", {"heldout/reward": -0.5}, 200)
    resumed.close()
    board = read_board(tmp_path / "tb")
    assert board["all"]["heldout/reward"] == [(100, -1.0), (200, -0.5)]
    assert "losses/entropy" not in board["all"]  # NaN is left out
    assert len(list((tmp_path / "tb" / "all").glob("events.out.tfevents.*"))) == 2


def _round(recorder: RunRecorder, cfg, server_round: int, value: float, evaluate_too: bool):
    """Both regions train 128 steps in two updates; region r's training reward per job is
    -(value + r)."""
    metrics = {name: 0.0 for name in ROUND_METRICS} | {"steps_per_second": 1.0}
    updates = [
        RegionUpdate(
            r,
            [np.zeros(2)],
            128,
            metrics
            | {"reward": -(value + r), "wall_time_s": 1.0}
            | wire.updates_metrics([_update(value)] * 2),
        )
        for r in (0, 1)
    ]
    recorder.on_fit(server_round, updates, [np.zeros(2)], 1.0)
    if evaluate_too:
        results = [evaluate(DISPATCHERS["sed"], cfg, r) for r in (0, 1)]
        for result in results:
            result.policy = "ppo-fedavg"
        recorder.on_evaluate(server_round, results, 1.0)


def test_the_status_says_completed_after_the_last_round_and_names_its_run(tmp_path) -> None:
    """What lets `fedmc run` end a run without waiting for Flower's teardown: status.json
    says `completed` once everything of the last round is written, the board included, and
    names the Flower run, so that an earlier run's file (which a resumed or overwritten run
    replaces only once its ServerApp starts) never ends a run early."""
    cfg = tiny("eval.seeds=2", "eval.steps=10", "train.rounds=2")
    recorder = RunRecorder(cfg, tmp_path, ["a", "b"], run_id="42")
    _round(recorder, cfg, 1, 1.0, evaluate_too=True)
    assert not run_completed(tmp_path, "42")  # a round to go
    _round(recorder, cfg, 2, 2.0, evaluate_too=True)
    assert run_completed(tmp_path, "42") and not run_completed(tmp_path, "7")
    assert set(read_board(tmp_path / "tb")) == {"a", "b", "all"} | DISPATCHER_RUNS  # and closed


def test_the_recorder_logs_what_the_regions_report_and_a_resume_replaces_a_lost_round(
    tmp_path,
) -> None:
    cfg = tiny("eval.seeds=2", "eval.steps=10", "train.rounds=2")
    recorder = RunRecorder(cfg, tmp_path, ["a", "b"])
    _round(recorder, cfg, 1, 1.0, evaluate_too=True)
    _round(recorder, cfg, 2, 9.0, evaluate_too=False)  # the run dies in round 2
    recorder.tables.board.flush()
    resumed = RunRecorder(cfg, tmp_path, ["a", "b"], resume_steps=256)
    _round(resumed, cfg, 2, 2.0, evaluate_too=True)
    board = read_board(tmp_path / "tb")
    assert set(board) == {"a", "b", "all"} | DISPATCHER_RUNS
    for region in ("a", "b"):
        assert set(board[region]) == HELD_OUT_TAGS | CLEANRL_TAGS
        # two updates per region and round, at their share of the round's 256 steps
        assert board[region]["losses/entropy"] == [(128, 1.0), (256, 1.0), (384, 2.0), (512, 2.0)]
    # the training return once a round, at its end: the round's reward per job, and over
    # the regions their mean weighted by steps; the lost round 2 (value 9) is hidden
    assert board["a"][RETURN_TAG] == [(256, -1.0), (512, -2.0)]
    assert board["b"][RETURN_TAG] == [(256, -2.0), (512, -3.0)]
    assert board["all"][RETURN_TAG] == [(256, -1.5), (512, -2.5)]
    assert set(board["all"]) == HELD_OUT_TAGS | {RETURN_TAG}
    per_seed = read_per_seed(tmp_path / "per_seed.csv")
    steps = sorted(set(per_seed.loc[per_seed["round"] > 0, "train_steps"]))
    assert [s for s, _ in board["all"]["heldout/reward"]] == steps == [256, 512]
    # each dispatcher is a flat line beside the learner, in the table's units
    sed = next(
        r for r in resumed.tables.dispatcher_rows if r["policy"] == "sed" and r["client"] == "all"
    )
    carbon = BY_NAME["carbon_g"]
    for run in DISPATCHER_RUNS:
        assert set(board[run]) == HELD_OUT_TAGS
        assert [s for s, _ in board[run]["heldout/reward"]] == steps
    assert board["dispatchers/sed"]["heldout/carbon_mg"] == [
        (step, pytest.approx(sed["carbon_g"] * carbon.scale, rel=1e-6)) for step in steps
    ]
    # the config and hyperparameters, written once by the fresh run
    text, values = read_settings(tmp_path / "tb")
    assert to_yaml(cfg) in text
    assert values["ppo.learning_rate"] == pytest.approx(cfg.ppo.learning_rate)
    assert values["train.rounds"] == 2 and values["world.declared_size"] is False
    assert values["federation.strategy"] == "fedavg" and "results_dir" not in values
