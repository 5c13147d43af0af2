"""What the server keeps of each round: the run's tables and TensorBoard events
(`recording.Recorder`, the same as `fedmc train` writes), the round's global weights, the
run's progress and status; and what the console says of it (`progress.RoundProgress`).

`progress.json` names the last round whose training and evaluation were both recorded
(where `--resume` continues) and `status.json` says whether the run is running, completed
or failed, and why. A region left out of a round is a `failed` row naming the region, the
round and the reason.

TensorBoard gets what the regions already report: each region's PPO updates and training
return, from its training reply, and the global policy's held-out metrics per region and
over all regions, from the evaluation replies. Clients never write it: in the simulation
engine they are Ray actors, in the deployment engine processes on other nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from fedmc_flwr.config import ExperimentConfig
from fedmc_flwr.evaluation import EvalResult
from fedmc_flwr.federation.aggregation import RegionUpdate, Weights
from fedmc_flwr.federation.drift import DRIFT_COLUMNS, DRIFT_FILE
from fedmc_flwr.federation.progress import RoundProgress
from fedmc_flwr.federation.run_files import PROGRESS_FILE, STATUS_FILE, write_json
from fedmc_flwr.federation.wire import policy_name, updates_of
from fedmc_flwr.policies.checkpoints import round_checkpoint, write_weights
from fedmc_flwr.policies.ppo import ROUND_METRICS
from fedmc_flwr.recording import Recorder, Trained
from fedmc_flwr.results import MetricsWriter


class RunRecorder:
    """Everything the server writes of one federated run, in `out_dir`."""

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
        self.tables = Recorder(
            cfg,
            out_dir,
            region_names,
            policy_name(cfg.federation),
            pooled=True,
            resume_steps=resume_steps,
        )
        self.drift = MetricsWriter(
            out_dir / DRIFT_FILE, columns=DRIFT_COLUMNS, append=resume_steps is not None
        )
        self.progress = RoundProgress(cfg.train.rounds, region_names)
        self._status("running")

    def _status(self, state: str, **details: str) -> None:
        write_json(self.out_dir / STATUS_FILE, {"state": state, "run_id": self.run_id, **details})

    def on_fit(
        self,
        server_round: int,
        updates: list[RegionUpdate],
        weights: Weights,
        wall_s: float,
        server_state: Mapping[str, np.ndarray] | None = None,
        drift: Mapping[str, float] | None = None,
    ) -> None:
        """The round's training rows, its `drift.csv` row (how far the regions' updates
        pulled apart), and its checkpoint: the global weights with the server optimiser's
        state (`ServerState.arrays`), which a resumed run continues."""
        trained = [
            Trained(
                client=self.region_names[u.region],
                steps=u.num_examples,
                values={name: float(u.metrics[name]) for name in ROUND_METRICS},
                steps_per_second=float(u.metrics["steps_per_second"]),
                wall_time_s=float(u.metrics["wall_time_s"]),
                updates=updates_of(u.metrics),
            )
            for u in updates
        ]
        self.tables.trained(server_round, trained, wall_s)
        if drift is not None:
            self.drift.write([{"round": server_round, **drift}])
        write_weights(round_checkpoint(self.out_dir, server_round), weights, server_state)

    def on_failures(self, server_round: int, phase: str, failed: dict[int, str]) -> None:
        """One `failed` row per region left out of the round's training or evaluation."""
        named = {self.region_names[region]: why for region, why in failed.items()}
        self.tables.failed(server_round, phase, named)

    def on_reply(self, server_round: int, phase: str, regions: list[int], wall_s: float) -> None:
        """A client's reply for `regions` arrived, `wall_s` seconds after it was asked."""
        self.progress.reply(server_round, phase, regions, wall_s)

    def on_abort(self, reason: str) -> None:
        self._status("failed", reason=reason)
        self.tables.close()

    def on_evaluate(self, server_round: int, results: list[EvalResult], wall_s: float) -> None:
        overall = self.tables.evaluated(server_round, results, wall_s)
        # after the flush: a resumed run keeps everything of the rounds it counts as done
        write_json(
            self.out_dir / PROGRESS_FILE,
            {"completed_round": server_round, "train_steps": self.tables.train_steps},
        )
        self.progress.round_done(server_round, float(overall["reward"]), len(results))
        if server_round == self.cfg.train.rounds:
            self.tables.close()
            self._status("completed")  # last: every result is written by now
