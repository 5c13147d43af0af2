"""One recorder for every trainer: `fedmc train` and the federation's ServerApp write the
same tables and the same TensorBoard tags. The federation here is the ServerApp's recorder
fed by the clients' own functions through the wire (`client_app.train_region`,
`evaluate_region`, `aggregation.aggregate`), without starting Flower; the reference run
(tests/simulation/test_reference_run.py) checks the recorder under Flower."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import csv_rows
from test_tracking import read_board
from test_training import tiny

from fedmc_flwr.experiments.training import train
from fedmc_flwr.federation import wire
from fedmc_flwr.federation.aggregation import RegionUpdate, aggregate
from fedmc_flwr.federation.client_app import evaluate_region, train_region
from fedmc_flwr.federation.recorder import RunRecorder
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.policies.ppo import STATISTICS
from fedmc_flwr.results import PER_SEED_FILE
from fedmc_flwr.sim.signals import region_catalogue

TABLES = ("metrics.csv", "timing.csv", PER_SEED_FILE)


def federate(cfg, out: Path, state: Path) -> None:
    """A federated run of `cfg` into `out`: each round every region trains from the global
    weights and replies as a client would, the server aggregates and records, then every
    region evaluates the new global policy."""
    names = [region.name for region in region_catalogue(cfg.world.regions)]
    recorder = RunRecorder(cfg, out, names)
    weights = initial_weights(cfg)
    regions = range(cfg.world.regions)
    for rnd in range(1, cfg.train.rounds + 1):
        updates = []
        for region in regions:
            trained, stats = train_region(cfg, region, weights, rnd, state)
            reply = wire.unpack(wire.pack(region, stats), region)
            updates.append(RegionUpdate(region, trained, int(stats["env_steps"]), reply))
        weights = aggregate(updates, weights, cfg.federation, len(STATISTICS))
        recorder.on_fit(rnd, updates, weights, 1.0)
        results = [evaluate_region(cfg, region, weights)[0] for region in regions]
        recorder.on_evaluate(rnd, results, 1.0)


def filled(rows: list[dict[str, str]]) -> dict[str, set[str]]:
    """Per phase (per_seed.csv has none), the columns that hold a value in some row of it."""
    phases: dict[str, set[str]] = {}
    for row in rows:
        phase = row.get("phase", "")
        phases.setdefault(phase, set()).update(k for k, v in row.items() if v != "")
    return phases


def rows_of(rows: list[dict[str, str]]) -> set[tuple[str, str, str, str]]:
    """(round, phase, client, policy) of each row, any learner's name made `learner`."""
    return {
        (
            r["round"],
            r["phase"],
            r["client"],
            "learner" if r["policy"].startswith("ppo") else r["policy"],
        )
        for r in rows
    }


@pytest.mark.parametrize("mode", ["local", "centralised"])
def test_fedmc_train_and_the_federation_write_the_same_tables(tmp_path: Path, mode: str) -> None:
    cfg = tiny(tmp_path)
    folders = {"train": train(cfg, mode).parent, "fed": tmp_path / "federated"}
    folders["fed"].mkdir()
    federate(cfg, folders["fed"], tmp_path / "state")
    tables = {name: {k: csv_rows(f / name) for k, f in folders.items()} for name in TABLES}
    for name, rows in tables.items():
        assert list(rows["train"][0]) == list(rows["fed"][0]), name  # the same columns, in order
        assert filled(rows["train"]) == filled(rows["fed"]), name  # filled alike, per phase
    metrics = tables["metrics.csv"]
    # the same evaluation rows, round by round: every region and `all`, every dispatcher
    evals = {k: {r for r in rows_of(rows) if r[1] == "eval"} for k, rows in metrics.items()}
    assert evals["train"] == evals["fed"]
    # training rows: a row per learner; the federation's regions make one policy, so it
    # adds their pooled `all` row, which the centralised learner is on its own
    clients = {
        k: {r["client"] for r in rows if r["phase"] == "train"} for k, rows in metrics.items()
    }
    regions = {"us-east1", "europe-west9"}
    assert clients["fed"] == regions | {"all"}
    assert clients["train"] == (regions if mode == "local" else {"all"})
    keys = {
        k: {(r["round"], r["client"], r["eval_seed"], r["train_steps"]) for r in rows}
        for k, rows in tables[PER_SEED_FILE].items()
    }
    assert keys["train"] == keys["fed"]  # the same worlds, at the same budgets
    # TensorBoard: the same runs, and over them the same tags
    boards = {k: read_board(f / "tb") for k, f in folders.items()}
    assert set(boards["train"]) == set(boards["fed"])
    tags = {k: {tag for run in board.values() for tag in run} for k, board in boards.items()}
    assert tags["train"] == tags["fed"]
    for run in boards["fed"]:
        if run.startswith("dispatchers/"):
            assert boards["train"][run] == boards["fed"][run]  # same worlds, same steps
