"""docs/results.md and the README's headline block come from the sweeps' own files."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SMALL_DEMO

from fedmc_flwr.analysis.results_doc import BEGIN, END, description, update_readme, write_results
from fedmc_flwr.errors import InputError
from fedmc_flwr.results import record_provenance


def sweep_file(folder: Path, name: str, results: Path) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"# A tiny sweep of {name}: FedAvg against SED on two seeds.\n"
        f"# `fedmc sweep --config conf/sweeps/{name}.yaml`\n"
        f"name: {name}\nexperiment: {SMALL_DEMO}\n"
        f"results_dir: {results}\nseeds: [0, 1]\nbaseline: sed\n"
        "variants:\n  ppo-fedavg:\n    kind: federated\n"
    )
    return path


def two_sweeps(tmp_path: Path, default_summary: str) -> Path:
    """Sweep files `default` and `other` under tmp_path/sweeps; only `default` measured,
    its summary.md `default_summary`."""
    sweeps, results = tmp_path / "sweeps", tmp_path / "results"
    sweeps.mkdir()
    for name in ("default", "other"):
        sweep_file(sweeps, name, results)
    (results / "default").mkdir(parents=True)
    (results / "default" / "summary.md").write_text(default_summary)
    return sweeps


def test_each_section_is_the_sweeps_description_provenance_and_summary(tmp_path: Path) -> None:
    sweeps = two_sweeps(tmp_path, "| policy | reward |\n|---|---|\n| x | -1 |\n")
    record_provenance(
        tmp_path / "results" / "default", "fedmc sweep --config conf/sweeps/default.yaml"
    )
    out = write_results(["default", "other"], tmp_path / "results.md", sweeps, federating=["other"])
    text = out.read_text()
    assert "## What federating buys" in text
    assert "| `other` | | not measured yet: `fedmc sweep --config" in text
    assert "## `default`" in text
    assert "FedAvg against SED on two seeds." in text
    assert "| x | -1 |" in text
    assert "`fedmc sweep --config conf/sweeps/default.yaml` at commit `" in text
    assert "Not measured yet" in text.split("## `other`")[1]


def test_the_readme_block_is_replaced_and_the_rest_kept(tmp_path: Path) -> None:
    sweeps, results = tmp_path / "sweeps", tmp_path / "results"
    sweeps.mkdir()
    sweep_file(sweeps, "default", results)
    (results / "default").mkdir(parents=True)
    (results / "default" / "summary.md").write_text("| fresh | table |\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\n{BEGIN}\n| stale |\n{END}\n\n## Next\n")
    update_readme(readme, sweeps)
    text = readme.read_text()
    assert "| fresh | table |" in text and "stale" not in text
    assert text.startswith("# Title") and text.endswith("## Next\n")
    assert "commit" not in text  # commits and dates stay in docs/results.md
    readme.write_text("# no markers\n")
    with pytest.raises(InputError, match="no headline block"):
        update_readme(readme, sweeps)


def test_a_checkout_without_the_headline_results_keeps_the_published_block(
    tmp_path: Path,
) -> None:
    sweeps, results = tmp_path / "sweeps", tmp_path / "results"
    sweeps.mkdir()
    sweep_file(sweeps, "default", results)
    readme = tmp_path / "README.md"
    published = f"# Title\n\n{BEGIN}\n| published | table |\n{END}\n"
    readme.write_text(published)
    update_readme(readme, sweeps)
    assert readme.read_text() == published
    readme.write_text(f"# Title\n\n{BEGIN}\n{END}\n")
    update_readme(readme, sweeps)
    assert "Not measured yet" in readme.read_text()


def test_the_optimum_section_holds_each_measured_part_and_names_the_missing(
    tmp_path: Path,
) -> None:
    sweeps, results, optimum = tmp_path / "sweeps", tmp_path / "results", tmp_path / "optimum"
    sweeps.mkdir()
    sweep_file(sweeps, "default", results)
    (optimum / "table").mkdir(parents=True)
    (optimum / "table" / "summary.md").write_text("| servers | optimum |\n|---|---|\n| 2 | 1.1 |\n")
    record_provenance(optimum / "table", "python bench/bench_optimum.py --part table")
    out = write_results(["default"], tmp_path / "r.md", sweeps, federating=[], optimum_dir=optimum)
    text = out.read_text().split("## The optimum where one exists")[1]
    table, learner = text.split("### The CLI's learner")
    assert (
        "| 2 | 1.1 |" in table and "`python bench/bench_optimum.py --part table` at commit" in table
    )
    assert "Not measured yet: `make optimum PART=learner`" in learner


def test_a_section_this_checkout_cannot_measure_keeps_its_published_text(tmp_path: Path) -> None:
    sweeps = two_sweeps(tmp_path, "| fresh | default |\n")
    page = tmp_path / "results.md"
    page.write_text(
        "# Results\n\n## What federating buys\n\n| h |\n|---|\n"
        "| `other` | `ppo-fedavg` | all regions | 5 | +0.1 (pays) | | | | |\n\n"
        "- `other` (all regions): an old reading.\n\n"
        "## `default`\n\n| stale | default |\n\n"
        "## `other`\n\nA tiny sweep.\n\n*at commit `abc`*\n\n| published | other |\n"
    )
    for _ in range(2):  # a second pass leaves the kept text as the first left it
        write_results(["default", "other"], page, sweeps, federating=["other"], optimum_dir=None)
        text = page.read_text()
        assert "| fresh | default |" in text and "stale" not in text
        other = text.split("## `other`")[1]
        assert "| published | other |" in other and other.count("Kept as last published") == 1
        assert "Not measured yet" not in other
        federating = text.split("## `default`")[0]
        assert "| `other` | `ppo-fedavg` | all regions | 5 | +0.1 (pays)" in federating
        assert "- `other` (all regions): an old reading." in federating
        assert "Rows of `other` are kept as last published" in federating
    assert text.count("\n\n\n") == 0


def test_a_description_keeps_the_commands_it_names_and_drops_the_one_that_runs_it(
    tmp_path: Path,
) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text(
        "# The learner as `fedmc run` trains it, and warm-started.\n"
        "# 5 seeds. `fedmc sweep --config conf/sweeps/x.yaml`\n"
        "name: x\n# not part of it\n"
    )
    assert description(config) == "The learner as `fedmc run` trains it, and warm-started. 5 seeds."
    config.write_text(
        "# Eight regions.\n# `fedmc speedup --config conf/speedup.yaml` measures it.\n"
    )
    assert description(config) == "Eight regions."
