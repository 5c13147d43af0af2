"""TensorBoard event files of a run, in `<experiment>/tb/`, for `tensorboard --logdir results`.

One TensorBoard run per learner or region, named like metrics.csv's `client` column
(`tb/us-east1`, `tb/all`), so one chart overlays a run's regions and, under `--logdir
results`, the cells of a sweep (`results/sweeps/<sweep>/<cell>/tb/<client>`); and one run
per dispatcher, `tb/dispatchers/<name>`, so each chart of held-out metrics carries every
dispatcher's level beside the learner's. Tags:

- `heldout/<metric>`, one per `metrics.METRICS`, in the unit of the console's table
  (`Metric.board_name`: `cost_µUSD`, `carbon_mg`, `energy_mWh`; metrics.csv keeps USD, g
  and kWh): the held-out evaluation after each round, per region and over all of them
  (`all`), and each dispatcher's over all regions;
- for each PPO update (one rollout and its epochs), CleanRL's names: `losses/value_loss`,
  `losses/policy_loss`, `losses/entropy`, `losses/approx_kl`, `losses/clipfrac`,
  `losses/explained_variance`, `charts/learning_rate` and `charts/SPS`, in the run of the
  learner that made it (a region's in a federation, `all` for the centralised learner);
- `charts/episodic_return` once a round, in the same runs (and `all` for a federation's
  regions together): the round's mean reward per job over its training episodes. The
  world is a continuing task whose episodes are cut at `ppo.episode_steps` jobs, so the
  return is given per job, on the held-out reward's scale;
- in `all`, the run's config as text (`config`) and its scalar settings as TensorBoard
  hyperparameters (the HParams tab), with the held-out reward as their metric.

Every step is the environment steps the run has trained on so far, over all regions:
per_seed.csv's `train_steps`, and for the centralised learner CleanRL's `global_step`. The
learners of a round train side by side, so an update sits at the round's start plus the
share of the round's steps that its learner had collected by then (`update_steps`); a
round's last updates, its training return and its evaluation share one step.

A resumed run opens its writers with `purge_from`, the steps of the last completed round:
TensorBoard then hides what an interrupted round had logged past it, and the new events go
to a new file beside the old ones. Nothing here prints, and nothing feeds back into a
result, so metrics.csv is the same bit for bit with or without it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tensorboardX import SummaryWriter
from tensorboardX.summary import hparams

from fedmc_flwr.metrics import METRICS
from fedmc_flwr.results import BOARD_DIR

HELD_OUT = "heldout/"
RETURN = "charts/episodic_return"
DISPATCHERS = "dispatchers/"
"""The folder of the dispatchers' runs under `tb/`."""
SETTINGS_RUN = "all"
"""The run that carries the config and the hyperparameters."""
PPO_TAGS = {
    "value_loss": "losses/value_loss",
    "policy_loss": "losses/policy_loss",
    "entropy": "losses/entropy",
    "approx_kl": "losses/approx_kl",
    "clipfrac": "losses/clipfrac",
    "explained_variance": "losses/explained_variance",
    "learning_rate": "charts/learning_rate",
    "steps_per_second": "charts/SPS",
}
"""CleanRL's tag for each diagnostic of `PPOLearner.updates`."""


def heldout_scalars(row: Mapping[str, object]) -> dict[str, float]:
    """A metrics.csv eval row's metrics in the console table's units, tagged
    `heldout/<board name>`."""
    return {
        HELD_OUT + m.board_name: float(row[m.csv_column]) * m.scale  # type: ignore[arg-type]
        for m in METRICS
    }


def update_steps(base: int, round_steps: int, updates: Sequence[Mapping[str, float]]) -> list[int]:
    """The step of each of one learner's PPO updates in a round: `base` (the run's steps
    before the round) plus the share of `round_steps` (the round's steps over all learners)
    that the learner had collected by the end of that update."""
    total = sum(u["env_steps"] for u in updates)
    steps, collected = [], 0.0
    for update in updates:
        collected += update["env_steps"]
        steps.append(base + round(round_steps * collected / total))
    return steps


class Board:
    """The TensorBoard writers of one experiment, one per run, opened on first use."""

    def __init__(self, experiment: Path, purge_from: int | None = None) -> None:
        """`purge_from`: a resumed run's steps so far (see the module docstring)."""
        self.root = experiment / BOARD_DIR
        self.purge_from = purge_from
        self._writers: dict[str, SummaryWriter] = {}

    def _writer(self, run: str) -> SummaryWriter:
        if run not in self._writers:
            folder = self.root / run
            earlier = len(list(folder.glob("events.out.tfevents.*"))) if folder.is_dir() else 0
            self._writers[run] = SummaryWriter(
                str(folder),
                purge_step=None if self.purge_from is None else self.purge_from + 1,
                filename_suffix=f".{earlier:04d}",  # never the name of an earlier file
            )
        return self._writers[run]

    def scalars(self, run: str, values: Mapping[str, float], step: int) -> None:
        """`values` (tag -> value) at `step`; NaN and infinities are left out."""
        writer = self._writer(run)
        for tag, value in values.items():
            if math.isfinite(value):
                writer.add_scalar(tag, value, step)

    def heldout(self, rows: Iterable[Mapping[str, object]], step: int) -> None:
        """A learner's metrics.csv eval rows, each in the run of its client."""
        for row in rows:
            self.scalars(str(row["client"]), heldout_scalars(row), step)

    def dispatchers(self, rows: Iterable[Mapping[str, object]], step: int) -> None:
        """The dispatchers' metrics.csv eval rows over all regions, each in its own run."""
        for row in rows:
            if row["client"] == "all":
                self.scalars(DISPATCHERS + str(row["policy"]), heldout_scalars(row), step)

    def settings(self, config_yaml: str, values: Mapping[str, bool | int | float | str]) -> None:
        """The run's config as text and `values` as hyperparameters, in SETTINGS_RUN, whose
        held-out reward is their metric in the HParams tab."""
        writer = self._writer(SETTINGS_RUN)
        writer.add_text("config", f"```yaml\n{config_yaml}```", 0)
        for summary in hparams(dict(values), {HELD_OUT + "reward": 0.0}):
            writer.file_writer.add_summary(summary)

    def updates(
        self, run: str, updates: Sequence[Mapping[str, float]], base: int, round_steps: int
    ) -> None:
        """One learner's PPO updates of a round (`PPOLearner.updates`), at `update_steps`."""
        if not updates:
            return
        for update, step in zip(updates, update_steps(base, round_steps, updates), strict=True):
            self.scalars(run, {tag: update[name] for name, tag in PPO_TAGS.items()}, step)

    def flush(self) -> None:
        """Everything so far onto disk (after each round: a run that dies keeps it)."""
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
