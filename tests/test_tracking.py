"""TensorBoard: the event files of a run parse, with TensorBoard's own reader, and hold the
held-out metrics per region and CleanRL's PPO diagnostics; a resumed run hides what its
interrupted round had logged; the PPO updates survive the wire. A real run's board is checked
on the reference run (tests/simulation/test_reference_run.py)."""

from __future__ import annotations

import numpy as np
from test_evaluation import tiny

from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.federation import wire
from fedmc_flwr.federation.aggregation import RegionUpdate
from fedmc_flwr.federation.recorder import RunRecorder
from fedmc_flwr.federation.runner import run_completed
from fedmc_flwr.metrics import METRICS
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import ROUND_METRICS, UPDATE_METRICS
from fedmc_flwr.results import read_per_seed
from fedmc_flwr.tracking import PPO_TAGS, Board, update_steps

HELD_OUT_TAGS = {f"heldout/{m.name}" for m in METRICS}
CLEANRL_TAGS = {
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
    "charts/learning_rate",
    "charts/SPS",
}

Scalars = dict[str, dict[str, list[tuple[int, float]]]]


def read_board(tb) -> Scalars:
    """run -> tag -> [(step, value)], as TensorBoard itself reads the event files."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    multiplexer = EventMultiplexer().AddRunsFromDirectory(str(tb))
    multiplexer.Reload()
    return {
        run: {
            tag: [(e.step, e.value) for e in multiplexer.Scalars(run, tag)]
            for tag in tags["scalars"]
        }
        for run, tags in multiplexer.Runs().items()
    }


def _update(value: float, steps: float = 64.0) -> dict[str, float]:
    return {name: value for name in UPDATE_METRICS} | {"env_steps": steps}


def test_cleanrl_names_cover_every_update_diagnostic() -> None:
    assert set(PPO_TAGS.values()) == CLEANRL_TAGS
    assert set(PPO_TAGS) == set(UPDATE_METRICS) - {"env_steps"}


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
    metrics = {name: 0.0 for name in ROUND_METRICS} | {"steps_per_second": 1.0}
    updates = [
        RegionUpdate(
            r,
            [np.zeros(2)],
            128,
            metrics | {"wall_time_s": 1.0} | wire.updates_metrics([_update(value)] * 2),
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
    assert set(read_board(tmp_path / "tb")) == {"a", "b", "all"}  # written and closed


def test_the_recorder_logs_what_the_regions_report_and_a_resume_replaces_a_lost_round(
    tmp_path,
) -> None:
    cfg = tiny("eval.seeds=2", "eval.steps=10", "train.rounds=2")
    recorder = RunRecorder(cfg, tmp_path, ["a", "b"])
    _round(recorder, cfg, 1, 1.0, evaluate_too=True)
    _round(recorder, cfg, 2, 9.0, evaluate_too=False)  # the run dies in round 2
    recorder.board.flush()
    resumed = RunRecorder(cfg, tmp_path, ["a", "b"], resume_steps=256)
    _round(resumed, cfg, 2, 2.0, evaluate_too=True)
    board = read_board(tmp_path / "tb")
    assert set(board) == {"a", "b", "all"}
    for region in ("a", "b"):
        assert set(board[region]) == HELD_OUT_TAGS | CLEANRL_TAGS
        # two updates per region and round, at their share of the round's 256 steps
        assert board[region]["losses/entropy"] == [(128, 1.0), (256, 1.0), (384, 2.0), (512, 2.0)]
    assert set(board["all"]) == HELD_OUT_TAGS
    per_seed = read_per_seed(tmp_path / "per_seed.csv")
    steps = sorted(set(per_seed.loc[per_seed["round"] > 0, "train_steps"]))
    assert [s for s, _ in board["all"]["heldout/reward"]] == steps == [256, 512]
