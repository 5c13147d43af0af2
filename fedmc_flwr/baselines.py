"""`fedmc baselines`: every classic dispatcher on every region's held-out seeds.

The rows go to `results/<experiment>-baselines/baselines.csv` with the columns of
metrics.csv, so the learners' evaluation rows and these compare in one table or plot, and
every held-out world's values to `per_seed.csv` beside it (round 0), for paired
comparisons (`fedmc report`). The `-baselines` suffix keeps them from overwriting the
federated run's files in `results/<experiment>/`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from fedmc_flwr.config import ExperimentConfig
from fedmc_flwr.evaluation import EvalResult, evaluate, mean_over_regions, per_seed_rows
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.results import COLUMNS, MetricsWriter, experiment_dir, per_seed_writer
from fedmc_flwr.sim.signals import region_catalogue

_AVERAGED = (
    "latency_ms",
    "latency_p95_ms",
    "slo_violation_rate",
    "cost_usd",
    "carbon_g",
    "energy_kwh",
)
"""Columns of a `client="all"` row that are the mean over regions."""


def evaluate_dispatchers(
    cfg: ExperimentConfig, names: Sequence[str] | None = None, progress: bool = True
) -> list[EvalResult]:
    """Each named dispatcher (default: all, in DISPATCHERS order) on each region, in turn."""
    names = list(DISPATCHERS) if names is None else list(names)
    unknown = [name for name in names if name not in DISPATCHERS]
    if unknown:
        raise ValueError(f"unknown dispatchers {unknown}; expected some of {list(DISPATCHERS)}")
    jobs = [(name, region) for name in names for region in range(cfg.world.regions)]
    results = []
    with tqdm(total=len(jobs), disable=not progress, file=sys.stderr, unit="eval") as bar:
        for name, region in jobs:
            bar.set_description(f"{name} @ region {region}")
            results.append(evaluate(DISPATCHERS[name], cfg, region))
            bar.update()
    return results


def summary_rows(results: list[EvalResult], region_names: list[str]) -> list[dict]:
    """One row per (policy, region), then per policy one `client="all"` row: the mean over
    regions of every metric, with the reward's CI from `mean_over_regions`.
    """
    rows: list[dict] = []
    policies = list(dict.fromkeys(result.policy for result in results))
    for policy in policies:
        mine = [result for result in results if result.policy == policy]
        regional = [{"client": region_names[r.region], **r.row()} for r in mine]
        reward, half_width = mean_over_regions([r.per_seed_reward for r in mine])
        overall = {
            "client": "all",
            "policy": policy,
            "seeds": sum(row["seeds"] for row in regional),
            "steps": sum(row["steps"] for row in regional),
            "reward": reward,
            "reward_ci95": half_width,
        }
        overall.update({key: float(np.mean([row[key] for row in regional])) for key in _AVERAGED})
        rows.extend([*regional, overall])
    return rows


_HEADERS = (
    "policy",
    "reward ± ci95",
    "latency ms",
    "p95 ms",
    "SLO viol.",
    "cost µUSD",
    "carbon mg",
    "energy mWh",
)


def _cells(row: dict) -> list[str]:
    return [
        row["policy"],
        f"{row['reward']:.4f} ± {row['reward_ci95']:.4f}",
        f"{row['latency_ms']:.1f}",
        f"{row['latency_p95_ms']:.1f}",
        f"{row['slo_violation_rate']:.3f}",
        f"{row['cost_usd'] * 1e6:.3f}",
        f"{row['carbon_g'] * 1e3:.3f}",
        f"{row['energy_kwh'] * 1e6:.3f}",
    ]


def format_table(rows: list[dict]) -> str:
    """The `client="all"` rows, aligned; cost, carbon and energy are means per job."""
    body = [_cells(row) for row in rows if row["client"] == "all"]
    widths = [max(map(len, column)) for column in zip(_HEADERS, *body, strict=True)]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if k == 0 else cell.rjust(width)
            for k, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in [list(_HEADERS), *body]
    )


def run_baselines(cfg: ExperimentConfig) -> Path:
    """Evaluate every dispatcher, print the table, write `baselines.csv` and `per_seed.csv`;
    return baselines.csv's path."""
    results = evaluate_dispatchers(cfg)
    names = [region.name for region in region_catalogue(cfg.world.regions)]
    rows = summary_rows(results, names)
    out = experiment_dir(cfg.results_dir, f"{cfg.name}-baselines")
    path = out / "baselines.csv"
    writer = MetricsWriter(path, columns=COLUMNS)
    writer.write({"experiment": cfg.name, "round": 0, "phase": "eval", **row} for row in rows)
    key = {"experiment": cfg.name, "train_seed": cfg.seed, "round": 0, "train_steps": 0}
    per_seed_writer(out).write(per_seed_rows(results, names, **key))
    print(format_table(rows))
    print(f"wrote {path}")
    return path
