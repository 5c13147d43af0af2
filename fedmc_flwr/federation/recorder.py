"""What the server keeps of each round: metrics.csv, per_seed.csv and timing.csv rows,
a checkpoint, TensorBoard events, and the run's progress and status; and what the console
says of it (`progress.RoundProgress`).

Rows are written the moment a round's training or evaluation is aggregated, so a run
that dies keeps every finished round; `progress.json` names the last round whose training
and evaluation were both recorded (where `--resume` continues) and `status.json` says
whether the run is running, completed or failed, and why. A region left out of a round is
a `failed` row naming the region, the round and the reason.

The dispatchers are evaluated once, on the same held-out seeds the regions evaluate the
global policy on; their metrics.csv rows are repeated in every round so that each round's
rows compare like with like on their own, while their per_seed.csv rows are written once,
as round 0 (they do not train, so every round's values would be the same). The global
policy's per-seed rows are written every round, with the environment steps trained on so
far, summed over the regions.

TensorBoard (`tracking.Board`, in `tb/`) gets what the regions already report: each
region's PPO updates, from its training reply, and the global policy's held-out metrics per
region and over all regions, from the evaluation replies. Clients never write it: in the
simulation engine they are Ray actors, in the deployment engine processes on other nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fedmc_flwr.config import ExperimentConfig
from fedmc_flwr.evaluation import EvalResult, evaluate_dispatchers, per_seed_rows, summary_rows
from fedmc_flwr.federation.aggregation import RegionUpdate, Weights
from fedmc_flwr.federation.progress import RoundProgress
from fedmc_flwr.federation.run_files import PROGRESS_FILE, STATUS_FILE, write_json
from fedmc_flwr.federation.wire import policy_name, updates_of
from fedmc_flwr.policies.checkpoints import round_checkpoint, write_weights
from fedmc_flwr.policies.ppo import ROUND_METRICS
from fedmc_flwr.results import (
    PER_SEED_COLUMNS,
    PER_SEED_FILE,
    TIMING_COLUMNS,
    MetricsWriter,
)
from fedmc_flwr.tracking import Board


def _train_mean(updates: Sequence[RegionUpdate]) -> dict[str, float]:
    """Training values over all regions, weighted by environment steps."""
    steps = np.array([u.num_examples for u in updates], dtype=np.float64)
    return {
        name: float(np.dot(steps, [float(u.metrics[name]) for u in updates]) / steps.sum())
        for name in ROUND_METRICS
    }


class RunRecorder:
    """metrics.csv, per_seed.csv, timing.csv and checkpoints of one federated run, in
    `out_dir`."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: Path,
        region_names: list[str],
        *,
        resume_steps: int | None = None,
        run_id: str = "",
    ) -> None:
        """A fresh run, or (`resume_steps` given: the environment steps trained so far) one
        that appends to the tables a resumed run has already cut back to its last round.
        `run_id` is Flower's id of the run, named in status.json: the process that started
        the run trusts only its own run's status."""
        self.cfg = cfg
        self.out_dir = out_dir
        self.run_id = run_id
        self.region_names = region_names
        self.policy = policy_name(cfg.federation)
        dispatchers = evaluate_dispatchers(cfg, progress=False)
        self.dispatcher_rows = summary_rows(dispatchers, region_names)
        resumed = resume_steps is not None
        self.metrics = MetricsWriter(out_dir / "metrics.csv", append=resumed)
        self.timing = MetricsWriter(out_dir / "timing.csv", columns=TIMING_COLUMNS, append=resumed)
        self.per_seed = MetricsWriter(
            out_dir / PER_SEED_FILE, columns=PER_SEED_COLUMNS, append=resumed
        )
        if not resumed:
            key = self._seed_key(0, 0)
            self.per_seed.write(per_seed_rows(dispatchers, region_names, **key))
        self.train_steps = resume_steps or 0
        """Environment steps the global policy was trained on so far, over all regions."""
        self.board = Board(out_dir, purge_from=resume_steps)
        self.progress = RoundProgress(cfg.train.rounds, region_names)
        self._status("running")

    def _status(self, state: str, **details: str) -> None:
        write_json(self.out_dir / STATUS_FILE, {"state": state, "run_id": self.run_id, **details})

    def _seed_key(self, server_round: int, train_steps: int) -> dict[str, object]:
        return {
            "experiment": self.cfg.name,
            "train_seed": self.cfg.seed,
            "round": server_round,
            "train_steps": train_steps,
        }

    def _keyed(self, server_round: int, phase: str, row: Mapping[str, object]) -> dict:
        return {"experiment": self.cfg.name, "round": server_round, "phase": phase, **row}

    def on_fit(
        self, server_round: int, updates: list[RegionUpdate], weights: Weights, wall_s: float
    ) -> None:
        rows, timing = [], []
        for u in updates:
            client = self.region_names[u.region]
            values = {name: float(u.metrics[name]) for name in ROUND_METRICS}
            rows.append(
                {"client": client, "policy": self.policy, "steps": u.num_examples, **values}
            )
            timing.append(
                {
                    "client": client,
                    "policy": self.policy,
                    "steps": u.num_examples,
                    "steps_per_second": float(u.metrics["steps_per_second"]),
                    "wall_time_s": float(u.metrics["wall_time_s"]),
                }
            )
        total = sum(u.num_examples for u in updates)
        for u in updates:
            self.board.updates(
                self.region_names[u.region], updates_of(u.metrics), self.train_steps, total
            )
        self.train_steps += total
        rows.append(
            {"client": "all", "policy": self.policy, "steps": total, **_train_mean(updates)}
        )
        timing.append(
            {
                "client": "all",
                "policy": self.policy,
                "steps": total,
                "steps_per_second": total / wall_s,
                "wall_time_s": wall_s,
            }
        )
        self.metrics.write(self._keyed(server_round, "train", r) for r in rows)
        self.timing.write(self._keyed(server_round, "train", r) for r in timing)
        write_weights(round_checkpoint(self.out_dir, server_round), weights)

    def on_failures(self, server_round: int, phase: str, failed: dict[int, str]) -> None:
        """One `failed` row per region left out of the round's training or evaluation."""
        self.metrics.write(
            self._keyed(
                server_round,
                "failed",
                {
                    "client": self.region_names[region],
                    "policy": self.policy,
                    "steps": 0,
                    "reason": f"{phase}: {why}",
                },
            )
            for region, why in failed.items()
        )

    def on_reply(self, server_round: int, phase: str, regions: list[int], wall_s: float) -> None:
        """A client's reply for `regions` arrived, `wall_s` seconds after it was asked."""
        self.progress.reply(server_round, phase, regions, wall_s)

    def on_abort(self, reason: str) -> None:
        self._status("failed", reason=reason)
        self.board.close()

    def on_evaluate(self, server_round: int, results: list[EvalResult], wall_s: float) -> None:
        learner_rows = summary_rows(results, self.region_names)
        rows = learner_rows + self.dispatcher_rows
        self.metrics.write(self._keyed(server_round, "eval", r) for r in rows)
        key = self._seed_key(server_round, self.train_steps)
        self.per_seed.write(per_seed_rows(results, self.region_names, **key))
        steps = sum(r.steps * r.seeds for r in results)
        self.timing.write(
            [
                self._keyed(
                    server_round,
                    "eval",
                    {
                        "client": "all",
                        "policy": self.policy,
                        "steps": steps,
                        "steps_per_second": steps / wall_s,
                        "wall_time_s": wall_s,
                    },
                )
            ]
        )
        self.board.heldout(learner_rows, self.train_steps)
        self.board.flush()  # before the round counts as completed: a resumed run keeps it
        write_json(
            self.out_dir / PROGRESS_FILE,
            {"completed_round": server_round, "train_steps": self.train_steps},
        )
        overall = next(row for row in learner_rows if row["client"] == "all")
        self.progress.round_done(server_round, float(overall["reward"]), len(results))
        if server_round == self.cfg.train.rounds:
            self.board.close()
            self._status("completed")  # last: every result is written by now
