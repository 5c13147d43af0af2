"""`fedmc baselines`: every classic dispatcher on every region's held-out seeds.

The rows go to `results/<experiment>-baselines/baselines.csv` with the columns of
metrics.csv, so the learners' evaluation rows and these compare in one table or plot, and
every held-out world's values to `per_seed.csv` beside it (round 0), for paired
comparisons (`fedmc report`). The `-baselines` suffix keeps them from overwriting the
federated run's files in `results/<experiment>/`. The printed table is `fedmc run`'s
(`tables.policy_table`): best first, each dispatcher paired against SED and the two-tier
heuristic on the same held-out worlds; its title says it holds the dispatchers alone, with
no round and no training seed.
"""

from __future__ import annotations

from pathlib import Path

from fedmc_flwr.analysis.tables import policy_table
from fedmc_flwr.config import ExperimentConfig
from fedmc_flwr.evaluation import evaluate_dispatchers, per_seed_rows, summary_rows
from fedmc_flwr.outputs import output_dir
from fedmc_flwr.results import (
    COLUMNS,
    MetricsWriter,
    experiment_dir,
    experiment_path,
    per_seed_writer,
    read_per_seed,
)
from fedmc_flwr.sim.signals import region_catalogue


def run_baselines(cfg: ExperimentConfig) -> Path:
    """Evaluate every dispatcher, print the table, write `baselines.csv` and `per_seed.csv`;
    return baselines.csv's path. A folder it could not write is refused before the work;
    an earlier run's files stay until the new ones are ready."""
    output_dir(experiment_path(cfg.results_dir, f"{cfg.name}-baselines"), "results_dir")
    results = evaluate_dispatchers(cfg)
    names = [region.name for region in region_catalogue(cfg.world.regions)]
    rows = summary_rows(results, names)
    out = experiment_dir(cfg.results_dir, f"{cfg.name}-baselines")
    path = out / "baselines.csv"
    writer = MetricsWriter(path, columns=COLUMNS)
    writer.write({"experiment": cfg.name, "round": 0, "phase": "eval", **row} for row in rows)
    key = {"experiment": cfg.name, "train_seed": cfg.seed, "round": 0, "train_steps": 0}
    per_seed = per_seed_writer(out)
    per_seed.write(per_seed_rows(results, names, **key))
    title = f"the dispatchers on {cfg.name}'s held-out worlds, mean over regions:"
    print(policy_table(title, rows, read_per_seed(per_seed.path), trained=False))
    print(f"wrote {path}")
    return path
