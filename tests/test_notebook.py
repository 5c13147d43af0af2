"""notebooks/explore.ipynb runs top to bottom in a fresh kernel, tiny sweep through Flower
included (conf/sweeps/tiny.yaml: FedAvg and centralised PPO, 2 training seeds each)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest
from conftest import REPO
from nbclient import NotebookClient

NOTEBOOK = REPO / "notebooks" / "explore.ipynb"


def test_the_notebook_is_committed_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.flower
@pytest.mark.slow
def test_the_notebook_runs_and_its_sweep_is_complete(
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
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]
    assert errors == []
    sweep = tmp_path / "sweeps" / "tiny"
    summary = pd.read_csv(sweep / "summary.csv").set_index("policy")
    assert summary.loc[["ppo-fedavg", "ppo-centralised"], "train_seeds"].tolist() == [2, 2]
    assert {"sed", "two-tier", "myopic-oracle"} <= set(summary.index)
    federated = pd.read_csv(sweep / "ppo-fedavg-s1" / "per_seed.csv")
    assert federated["round"].max() == 2 and (federated["train_seed"] == 1).all()
    assert len(list((sweep / "plots").glob("*.png"))) == 5
    images = [
        o for c in notebook.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert len(images) >= 6  # the day's signals and the five sweep plots
