"""notebooks/explore.ipynb runs top to bottom in a fresh kernel, its federation through
Flower included (FedAvg over 2 regions, 2 training seeds), and its learner beats random."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from conftest import REPO
from flower_runs import RAY_LOCK
from nbclient import NotebookClient

NOTEBOOK = REPO / "notebooks" / "explore.ipynb"


def test_the_notebook_is_committed_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.flower
@pytest.mark.slow
def test_the_notebook_runs_and_its_learner_beats_random(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDMC_RESULTS_DIR", str(tmp_path))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    with RAY_LOCK:  # its federation runs through Flower's simulation engine
        client.execute()
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]
    assert errors == []
    sweep = tmp_path / "sweeps" / "notebook"
    summary = pd.read_csv(sweep / "summary.csv").set_index("policy")
    assert summary.loc["ppo-fedavg", "train_seeds"] == 2
    assert {"sed", "random", "myopic-oracle"} <= set(summary.index)
    federated = pd.read_csv(sweep / "ppo-fedavg-s1" / "per_seed.csv")
    assert federated["round"].max() == 3 and (federated["train_seed"] == 1).all()
    # each training seed's policy beats random, paired per held-out world (95% CI above 0)
    versus = json.loads((sweep / "learner_vs_random.json").read_text())
    assert [row["train_seed"] for row in versus] == [0, 1]
    assert all(row["low"] > 0 and row["verdict"] == "better" for row in versus)
    assert (sweep / "ppo-fedavg-s0" / "policy.onnx").is_file()
    assert len(list((sweep / "plots").glob("*.png"))) == 5
    images = [
        o for c in notebook.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert len(images) >= 6  # the day's signals and the five sweep plots
