"""Regions that join late and regions that gather little experience: the config keys, the
federation's accounting and clients, local training and "What federating buys". The
suite's reference Flower run has a late region, on both engines: its second SuperNode
starts mid-run (test_deployment)."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from conftest import SMALL_DEMO
from flwr.common import Code, EvaluateRes, Status
from test_faults import _fit_res, _net, _Recorder, _reply, _strategy
from test_training import SHORT_TRAINING

from fedmc_flwr.analysis.federating import federating_gains, gains_table, watched_region
from fedmc_flwr.config import (
    ConfigError,
    active_regions,
    join_round,
    learner_plan,
    load_config,
    planned_steps,
    region_steps,
    to_yaml,
)
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.experiments.sweep import run_sweep
from fedmc_flwr.experiments.training import train
from fedmc_flwr.federation import wire
from fedmc_flwr.federation.accounting import sort_out
from fedmc_flwr.federation.bundle import bundle, unbundle
from fedmc_flwr.federation.client_app import RegionClient
from fedmc_flwr.federation.runner import node_joins
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import read_per_seed
from fedmc_flwr.sweeps import load_sweep


def _tiny(tmp_path, *extra: str):
    return load_config(SMALL_DEMO, [*SHORT_TRAINING, f"results_dir={tmp_path}", *extra])


def test_join_rounds_and_step_shares_say_who_trains_when_and_how_much(tmp_path) -> None:
    cfg = _tiny(
        tmp_path, "train.rounds=4", "federation.join_rounds=[1,3]", "train.step_share=[1,0.25]"
    )
    assert [join_round(cfg, r) for r in (0, 1)] == [1, 3]
    assert active_regions(cfg, 2) == [0] and active_regions(cfg, 3) == [0, 1]
    assert region_steps(cfg, 0) == 32 and region_steps(cfg, 1) == 8
    assert planned_steps(cfg, 0) == 4 * 32 and planned_steps(cfg, 1) == 2 * 8
    plain = _tiny(tmp_path)
    assert active_regions(plain, 1) == [0, 1] and planned_steps(plain, 1) == 2 * 32
    assert (
        node_joins(cfg, 2) == [1, 3]
        and node_joins(cfg, 1) == [1]
        and node_joins(cfg, 3) == [1, 3, 1]
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["federation.join_rounds=[1]"], "expected 2 rounds from 1 to train.rounds"),
        (["federation.join_rounds=[1,3]"], "expected 2 rounds from 1 to train.rounds"),
        (["federation.join_rounds=[2,2]"], "lets 0 region"),
        (["federation.join_rounds=[1,2]", "federation.min_regions=2"], "lets 1 region"),
        (["train.step_share=[1,0]"], r"numbers in \(0, 1\]"),
        (["train.step_share=[1]"], r"numbers in \(0, 1\]"),
    ],
)
def test_bad_join_rounds_and_step_shares_are_config_errors(tmp_path, overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        _tiny(tmp_path, *overrides)


def test_a_late_region_is_missing_from_no_round_before_it_joins() -> None:
    late = _reply([0], [_net(1.0)]), _reply([2], [_net(5.0)])
    outcome = sort_out([0, 1], list(late), [], _net(0.0), 100)
    assert [u.region for u in outcome.updates] == [0]  # region 2's early update is ignored
    assert outcome.failed == {1: "no reply covered this region"}
    recorder = _Recorder()
    strategy = _strategy(recorder, min_regions=1, join_rounds=[1, 1, 3])
    fit = [(None, res) for res in (_fit_res(0, 1.0), _fit_res(1, 3.0))]
    strategy.aggregate_fit(2, fit, [])
    assert recorder.fits == [(2, [0, 1])] and recorder.failures == []
    strategy.aggregate_fit(3, fit, [])
    assert recorder.failures == [(3, "training", {2: "no reply covered this region"})]


def test_a_late_region_is_judged_from_its_join_round_on(tmp_path) -> None:
    cfg = _tiny(tmp_path, "federation.join_rounds=[1,2]")
    result = evaluate(DISPATCHERS["random"], cfg, 0)
    reply = EvaluateRes(
        Status(Code.OK, ""), 0.0, 1, wire.covering([0]) | wire.pack(0, wire.eval_metrics(result))
    )
    recorder = _Recorder()
    strategy = _strategy(recorder, min_regions=1, join_rounds=[1, 2, 2])
    strategy.aggregate_evaluate(1, [(None, reply)], [])
    assert recorder.failures == []
    strategy.aggregate_evaluate(2, [(None, reply)], [])
    assert set(recorder.failures[0][2]) == {1, 2}


def test_a_client_leaves_its_late_region_out_until_it_joins_then_starts_it_from_the_global(
    tmp_path,
) -> None:
    cfg = _tiny(tmp_path, "federation.join_rounds=[1,2]", "train.step_share=[1,0.5]")
    config = {"experiment": to_yaml(cfg), "server-round": 1}
    client = RegionClient(0, 1, tmp_path / "state")
    start = initial_weights(cfg)
    weights, steps, metrics = client.fit(bundle(start), config)  # as a message carries them
    assert wire.regions(metrics) == [0] and steps == cfg.ppo.num_envs * 32
    _, _, evaluated = client.evaluate(bundle(start), config)
    assert wire.regions(evaluated) == [0]
    global_weights = weights  # region 0's round stands in for the aggregate
    _, steps, metrics = client.fit(global_weights, {**config, "server-round": 2})
    assert wire.regions(metrics) == [0, 1]
    assert wire.unpack(metrics, 1)["env_steps"] == cfg.ppo.num_envs * 16
    joined = PPOLearner(learner_plan(cfg, [1]), seed=0)
    joined.load(tmp_path / "state" / cfg.name / "europe-west9" / "round_002.npz")
    assert joined.global_step == cfg.ppo.num_envs * 16  # a fresh learner, one round old
    pooled = unbundle(global_weights)[len(joined.params)]  # the observation count the global held
    assert pooled[0] > 0 and joined.norm.total.count == pooled[0] + joined.norm.fresh.count


def test_local_learners_keep_their_regions_join_round_and_share(tmp_path) -> None:
    cfg = _tiny(tmp_path, "federation.join_rounds=[1,2]", "train.step_share=[1,0.5]")
    out = train(cfg, "local").parent
    timing = pd.read_csv(out / "timing.csv")
    trained = timing[timing["phase"] == "train"]
    assert list(zip(trained["round"], trained["client"], trained["steps"], strict=True)) == [
        (1, "us-east1", 4 * 32),
        (2, "us-east1", 4 * 32),
        (2, "europe-west9", 4 * 16),
    ]
    judged = read_per_seed(out / "per_seed.csv").query("policy == 'ppo-local'")
    assert set(judged[judged["round"] == 1]["client"]) == {"us-east1"}
    assert set(judged[judged["round"] == 2]["client"]) == {"us-east1", "europe-west9"}
    with pytest.raises(ConfigError, match="centralised PPO pools every region"):
        train(cfg, "centralised")


def test_what_federating_buys_races_a_late_region_to_sed(tmp_path) -> None:
    """An in-process learner named as a federated variant stands in for it beside the
    local one (the analysis reads names), so the sweep machinery runs without Flower."""
    sweep_file = tmp_path / "late.yaml"
    sweep_file.write_text(
        yaml.safe_dump(
            {
                "name": "late",
                "experiment": str(SMALL_DEMO),
                "seeds": [0, 1],
                "set": [*SHORT_TRAINING, "train.rounds=3", "federation.join_rounds=[1,2]"],
                "results_dir": str(tmp_path / "sweeps"),
                "variants": {
                    "ppo-fedavg": {"kind": "local", "set": ["ppo.learning_rate=0.01"]},
                    "ppo-local": {"kind": "local"},
                },
            }
        )
    )
    sweep = load_sweep(sweep_file)
    assert watched_region(sweep.cells[0].cfg) == 1
    run_sweep(sweep, progress=False)
    assert federating_gains(sweep) == []  # no federated variant: no row
    (gain,) = federating_gains(sweep, federated=["ppo-fedavg"])
    assert gain.scope == "europe-west9" and gain.seeds == [0, 1]
    assert gain.versus_centralised is None and gain.first_versus_local is not None
    assert set(gain.race) == {"ppo-fedavg", "ppo-local"}
    for race in gain.race.values():
        assert race.rounds is None or (1 <= race.rounds <= 2 and race.seconds > 0)
    table = gains_table([gain, ("other", "not measured yet")])
    assert "| `late` | `ppo-fedavg` | europe-west9 | 2 |" in table
    assert "| `other` | | not measured yet |" in table
