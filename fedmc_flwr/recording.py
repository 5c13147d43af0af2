"""What every trainer writes of a run: metrics.csv, per_seed.csv, timing.csv and TensorBoard.

`fedmc train` hands a `Recorder` its learners' rounds directly; `fedmc run` and `fedmc
deploy` through the ServerApp (`federation.recorder.RunRecorder`, which adds what only a
federation has: the round's global weights, `progress.json` for `--resume`, `status.json`
and the console's per-reply lines). Both write through the same methods, so their tables
have the same columns, row kinds and TensorBoard tags by construction. The module sits
below `federation/` because nothing here is Flower's: a trainer reports plain `Trained`
records and `EvalResult`s, and `fedmc train` runs without importing Flower at all.

The dispatchers are evaluated once, on the same held-out seeds as the learners; their
metrics.csv rows are repeated in every round, so each round's rows compare like with like
on their own, while their per_seed.csv rows are written once, as round 0 (they do not
train, so every round's values would be the same). The learners' per-seed rows are
written every round, with the environment steps trained on so far, summed over the
learners (`train_steps`).

Rows are appended the moment a round's training or evaluation is reported, so a run that
dies keeps every finished round. A region left out of a round is a `failed` row naming
it and the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from fedmc_flwr.config import ExperimentConfig, to_yaml
from fedmc_flwr.evaluation import EvalResult, evaluate_dispatchers, per_seed_rows, summary_rows
from fedmc_flwr.policies.ppo import ROUND_METRICS
from fedmc_flwr.results import PER_SEED_COLUMNS, PER_SEED_FILE, TIMING_COLUMNS, MetricsWriter
from fedmc_flwr.tracking import RETURN, Board


@dataclass(frozen=True)
class Trained:
    """One learner's round of training (a region's, in a federation), as its trainer
    reports it."""

    client: str
    """Its metrics.csv client: a region's name, or `all` for the centralised learner."""
    steps: int
    """Environment steps it trained on this round."""
    values: Mapping[str, float]
    """The round's means, `ROUND_METRICS` (what `PPOLearner.train_round` returns)."""
    steps_per_second: float
    wall_time_s: float
    updates: Sequence[Mapping[str, float]] = field(default_factory=list)
    """Each PPO update's diagnostics (`PPOLearner.updates`), for TensorBoard."""


def pooled_values(trained: Sequence[Trained]) -> dict[str, float]:
    """The round's means over all learners, weighted by their environment steps."""
    steps = np.array([t.steps for t in trained], dtype=np.float64)
    return {
        name: float(np.dot(steps, [float(t.values[name]) for t in trained]) / steps.sum())
        for name in ROUND_METRICS
    }


def hyperparameters(cfg: ExperimentConfig) -> dict[str, bool | int | float | str]:
    """Every setting of `cfg` as a dotted key (`ppo.learning_rate`), lists as text, for
    TensorBoard's HParams tab; the results directory is where, not how, so it is left out."""
    flat: dict[str, bool | int | float | str] = {}

    def walk(node: Mapping[str, object], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping):
                walk(value, f"{prefix}{key}.")
            elif isinstance(value, bool | int | float | str):
                flat[prefix + key] = value
            else:
                flat[prefix + key] = str(value)

    walk(OmegaConf.to_container(OmegaConf.structured(cfg)), "")  # type: ignore[arg-type]
    flat.pop("results_dir", None)
    return flat


class Recorder:
    """The tables and TensorBoard of one run in `out_dir` (see the module docstring)."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: Path,
        region_names: list[str],
        policy: str,
        *,
        pooled: bool,
        resume_steps: int | None = None,
        progress: bool = False,
    ) -> None:
        """`policy`: the learner's name in the tables. `pooled`: the learners' rounds make
        one policy (a federation's regions), so each round also gets a training row over
        all of them (`pooled_values`). `resume_steps`: the environment steps a resumed run
        has trained so far; its tables, already cut back to its last completed round, are
        appended to. `progress`: a progress bar while the dispatchers are evaluated."""
        self.cfg = cfg
        self.out_dir = out_dir
        self.region_names = region_names
        self.policy = policy
        self.pooled = pooled
        dispatchers = evaluate_dispatchers(cfg, progress=progress)
        self.dispatcher_rows = summary_rows(dispatchers, region_names)
        resumed = resume_steps is not None
        self.metrics = MetricsWriter(out_dir / "metrics.csv", append=resumed)
        self.timing = MetricsWriter(out_dir / "timing.csv", columns=TIMING_COLUMNS, append=resumed)
        self.per_seed = MetricsWriter(
            out_dir / PER_SEED_FILE, columns=PER_SEED_COLUMNS, append=resumed
        )
        self.train_steps = resume_steps or 0
        """Environment steps the policy was trained on so far, over all learners."""
        self.board = Board(out_dir, purge_from=resume_steps)
        if not resumed:
            self.per_seed.write(per_seed_rows(dispatchers, region_names, **self._seed_key(0)))
            self.board.settings(to_yaml(cfg), hyperparameters(cfg))

    def _seed_key(self, server_round: int) -> dict[str, object]:
        return {
            "experiment": self.cfg.name,
            "train_seed": self.cfg.seed,
            "round": server_round,
            "train_steps": self.train_steps,
        }

    def _keyed(self, server_round: int, phase: str, row: Mapping[str, object]) -> dict:
        return {"experiment": self.cfg.name, "round": server_round, "phase": phase, **row}

    def _timing(self, client: str, steps: int, steps_per_second: float, wall_s: float) -> dict:
        return {
            "client": client,
            "policy": self.policy,
            "steps": steps,
            "steps_per_second": steps_per_second,
            "wall_time_s": wall_s,
        }

    def trained(self, server_round: int, trained: Sequence[Trained], wall_s: float) -> None:
        """A round's training: a row per learner (and, `pooled`, one over all of them, whose
        timing is the round's `wall_s`), each learner's PPO updates and training return."""
        rows = [
            {"client": t.client, "policy": self.policy, "steps": t.steps, **t.values}
            for t in trained
        ]
        timing = [
            self._timing(t.client, t.steps, t.steps_per_second, t.wall_time_s) for t in trained
        ]
        total = sum(t.steps for t in trained)
        returns = {t.client: float(t.values["reward"]) for t in trained}
        if self.pooled:
            pooled = pooled_values(trained)
            rows.append({"client": "all", "policy": self.policy, "steps": total, **pooled})
            timing.append(self._timing("all", total, total / wall_s, wall_s))
            returns["all"] = pooled["reward"]
        for t in trained:
            self.board.updates(t.client, t.updates, self.train_steps, total)
        self.train_steps += total
        for client, value in returns.items():
            self.board.scalars(client, {RETURN: value}, self.train_steps)
        self.metrics.write(self._keyed(server_round, "train", r) for r in rows)
        self.timing.write(self._keyed(server_round, "train", r) for r in timing)

    def failed(self, server_round: int, phase: str, failed: Mapping[str, str]) -> None:
        """One `failed` row per region (client name -> why) left out of the round's
        training or evaluation."""
        self.metrics.write(
            self._keyed(
                server_round,
                "failed",
                {"client": client, "policy": self.policy, "steps": 0, "reason": f"{phase}: {why}"},
            )
            for client, why in failed.items()
        )

    def evaluated(
        self, server_round: int, results: list[EvalResult], wall_s: float
    ) -> dict[str, object]:
        """A round's held-out evaluation of the learner(s), beside the dispatchers; flushed
        to disk before it returns. Returns the learner's row over all regions."""
        learner_rows = summary_rows(results, self.region_names)
        rows = learner_rows + self.dispatcher_rows
        self.metrics.write(self._keyed(server_round, "eval", r) for r in rows)
        self.per_seed.write(
            per_seed_rows(results, self.region_names, **self._seed_key(server_round))
        )
        steps = sum(r.steps * r.seeds for r in results)
        self.timing.write(
            [self._keyed(server_round, "eval", self._timing("all", steps, steps / wall_s, wall_s))]
        )
        self.board.heldout(learner_rows, self.train_steps)
        self.board.dispatchers(self.dispatcher_rows, self.train_steps)
        self.board.flush()
        return next(row for row in learner_rows if row["client"] == "all")

    def close(self) -> None:
        self.board.close()
