"""notebooks/explore.ipynb runs top to bottom in a fresh kernel. Its federated learner,
trained in-process through the functions Flower's apps call, beats SED paired over
small_demo's test worlds, and FedAvg's global network is the steps-weighted mean of what
the regions sent."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from conftest import REPO, SMALL_DEMO
from nbclient import NotebookClient

from fedmc_flwr.config import load_config

NOTEBOOK = REPO / "notebooks" / "explore.ipynb"


def test_the_notebook_is_committed_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.slow
def test_the_notebook_runs_and_its_federated_learner_beats_sed(
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
    out = tmp_path / "notebook"
    result = json.loads((out / "learner_vs_sed.json").read_text())
    demo = load_config(SMALL_DEMO)
    # judged on small_demo's own test worlds, every region's
    assert result["test_worlds"] == demo.eval.seeds * demo.world.regions
    # the federated learner beats SED, paired per test world
    assert result["d_reward"] > 0, result
    # pairing is what makes the comparison sharp: its interval is narrower than either level's
    assert result["high"] - result["low"] < 2 * min(result["level_half_widths"])
    # aggregate's network equals the steps-weighted mean of the regions' networks
    assert result["fedavg_max_abs_error"] < 1e-6
    assert (out / "policy.onnx").is_file()
    images = [
        o for c in notebook.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert len(images) >= 3  # the day's signals, the PPO update, where jobs go
