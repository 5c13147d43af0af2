"""The ServerApp: reads the experiment, records every round, aggregates the regions.

Run-config keys (`[tool.flwr.app.config]` in pyproject.toml, `--run-config` overrides):

| key | meaning |
|---|---|
| `config` | experiment YAML; relative paths are taken inside the app (`conf/` ships in the FAB) |
| `overrides` | space-separated dotted `key=value` overrides of the YAML, e.g. `train.rounds=2` |
| `results-dir` | absolute results directory; empty keeps the YAML's `results_dir` |
| `on-existing` | when the experiment already holds results: `refuse`, `overwrite` or `resume` |
| `owner` | `pid:start` of the process that started the run, set by `fedmc run`: the run |
| | stops when that process is gone; empty: no owner |
| `client-state-dir` | where nodes without a `state-dir` node-config keep their regions' |
| | learners; empty: `fedmc-state/` in each node's working directory (`client_app`) |
| `node-joins` | space-separated round each node joins in, set by `fedmc deploy` when some |
| | start mid-run (`federation.join_rounds`): a round waits for its nodes; empty: no wait |
| `node-keys` | space-separated SHA-256 fingerprints of each partition's SuperNode key, set |
| | by `fedmc deploy`: a node serves the partition of its authenticated key; empty: the |
| | server assigns its nodes partitions by rank (virtual nodes; `federation.identity`) |

A relative `results_dir` is taken from the ServerApp's working directory, which is the
directory the SuperLink was started from: for `flwr run .` from the project root (which
starts the local SuperLink there) that is the project root. `fedmc run` always passes an
absolute `results-dir`.

Under plain `flwr run`, bad input (an experiment that already holds results, a config
that does not load) ends the run with one log line in run-config terms, such as
`--run-config "on-existing='overwrite'"`, and so does a federation that stopped because
too few regions delivered: Flower would log either with its traceback (`OneLineFailures`).
Flower marks such a run `finished:failed` but `flwr run` still exits with 0. A run that
completes there ends as under `fedmc run`: its plots drawn in the experiment's `plots/`
and its last round's table printed (`main`).

A resumed run starts at its own round: Flower counts the rounds it runs from 1, so its
round banners are renumbered in this process (`console.number_rounds_from`).
"""

from __future__ import annotations

import logging
import re
from functools import partial
from logging import INFO
from pathlib import Path

import numpy as np
from flwr.app import Context
from flwr.common import Scalar
from flwr.common.logger import log
from flwr.server import Grid, ServerApp, ServerAppComponents, ServerConfig
from flwr.server.compat import start_grid

from fedmc_flwr.config import ExperimentConfig, join_round, learner_plan, load_config, to_yaml
from fedmc_flwr.errors import InputError
from fedmc_flwr.federation import load_choices
from fedmc_flwr.federation.acceptance import rule_score
from fedmc_flwr.federation.console import number_rounds_from, quiet_flower
from fedmc_flwr.federation.identity import by_key
from fedmc_flwr.federation.processes import token_alive
from fedmc_flwr.federation.prompt_grid import PromptGrid
from fedmc_flwr.federation.prompt_supernode import retry_pulls_promptly
from fedmc_flwr.federation.ray_pool import tolerate_node_loss
from fedmc_flwr.federation.recorder import RunRecorder
from fedmc_flwr.federation.resume import prepare_experiment
from fedmc_flwr.federation.run_files import run_completed
from fedmc_flwr.federation.strategy import Partitions, RegionStrategy, RoundFailed, ranked
from fedmc_flwr.policies.ppo import STATISTICS, PPOLearner
from fedmc_flwr.seeds import learner_seed
from fedmc_flwr.sim.signals import region_catalogue
from fedmc_flwr.sim.sources import check_files

quiet_flower()  # this module is loaded in the ServerApp process: its console

APP_DIR = Path(__file__).resolve().parents[2]
"""The app's root (the installed FAB copy under `flwr run`), where `conf/` lives."""


class OneLineFailures(logging.Filter):
    """Flower logs the exception that ends a run with its traceback. Bad input and a
    federation that stopped on purpose are explained by their one line; any other
    exception (a bug) keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, InputError | RoundFailed):
            label = exc.label if isinstance(exc, InputError) else "run failed: "
            record.msg, record.args = "fedmc: %s%s", (label, exc)
            record.exc_info = record.exc_text = None
        return True


logging.getLogger("flwr").addFilter(OneLineFailures())


def in_run_config_terms(message: str) -> str:
    """`fedmc`'s --overwrite and --resume, as the run-config setting a `flwr run` user
    passes instead."""
    return re.sub(r"--(overwrite|resume)\b", "--run-config \"on-existing='\\1'\"", message)


def experiment_config(run_config: dict[str, Scalar]) -> ExperimentConfig:
    """The experiment a run config names, with its overrides and results directory applied;
    its trace files are read now, so a bad one stops the run before round 1."""
    missing = [k for k in ("config", "overrides", "results-dir") if k not in run_config]
    if missing:
        raise KeyError(f"run config lacks {missing}; see [tool.flwr.app.config] in pyproject.toml")
    path = Path(str(run_config["config"])).expanduser()
    load_choices()
    cfg = load_config(
        path if path.is_absolute() else APP_DIR / path, str(run_config["overrides"]).split()
    )
    check_files(cfg.world)
    if str(run_config["results-dir"]):
        cfg.results_dir = str(run_config["results-dir"])
    return cfg


def initial_weights(cfg: ExperimentConfig) -> list[np.ndarray]:
    """Round 1's global weights: a fresh learner seeded by the experiment. Its network
    does not depend on which regions it would train on (region 0's estate serves, also
    when the regions' estates differ), and its statistics are still empty."""
    return PPOLearner(learner_plan(cfg, [0]), seed=learner_seed(cfg.seed)).get_weights()


def node_partitions(grid: Grid, run_config: dict[str, Scalar]) -> Partitions:
    """How the server knows each node's partition: by its authenticated key where the run
    config lists the partitions' keys (`node-keys`), else by rank."""
    keys = str(run_config.get("node-keys", "")).split()
    if not keys:
        return ranked

    def by_authenticated_key(node_ids: list[str]) -> tuple[dict[str, int], int]:
        known = {str(node.node_id): bytes(node.public_key) for node in grid.get_nodes()}
        return by_key({n: known.get(n, b"") for n in node_ids}, keys), len(keys)

    return by_authenticated_key


def prepare_run(
    context: Context, partitions: Partitions = ranked
) -> tuple[Path, ServerAppComponents]:
    """Everything before the first round: config, results directory (fresh, overwritten or
    resumed), dispatcher rows, the weights the first round starts from; the experiment
    directory and what Flower's round loop runs."""
    cfg = experiment_config(context.run_config)
    resolved = to_yaml(cfg)
    on_existing = str(context.run_config.get("on-existing", "refuse"))
    try:
        out, start = prepare_experiment(
            cfg.results_dir, cfg.name, on_existing, resolved, initial_weights(cfg), cfg.train.rounds
        )
    except InputError as exc:
        if context.run_config.get("owner"):  # `fedmc run`, whose flags the message names
            raise
        raise type(exc)(in_run_config_terms(str(exc))) from None
    done = start.completed_round
    log(
        INFO,
        "experiment %s: results in %s, %d of %d rounds done",
        cfg.name,
        out,
        done,
        cfg.train.rounds,
    )
    number_rounds_from(done + 1)
    names = [r.name for r in region_catalogue(cfg.world.regions)]
    recorder = RunRecorder(
        cfg,
        out,
        names,
        resume_steps=start.train_steps if done else None,
        run_id=str(context.run_id),
    )

    def instructions(server_round: int) -> dict[str, Scalar]:
        return {"server-round": server_round, "experiment": resolved}

    strategy = RegionStrategy(
        start.weights,
        cfg.federation,
        cfg.world.regions,
        instructions,
        recorder,
        len(STATISTICS),
        max_steps=cfg.ppo.num_envs * cfg.train.steps_per_round,
        first_round=done + 1,
        owner_alive=partial(token_alive, str(context.run_config.get("owner", ""))),
        join_rounds=[join_round(cfg, r) for r in range(cfg.world.regions)],
        node_joins=[int(k) for k in str(context.run_config.get("node-joins", "")).split()],
        partitions=partitions,
        score=rule_score(cfg),
        server_state=start.server_state,
    )
    config = ServerConfig(
        num_rounds=cfg.train.rounds - done, round_timeout=cfg.federation.round_timeout_s
    )
    return out, ServerAppComponents(strategy=strategy, config=config)


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower's legacy round loop over `prepare_run`'s strategy (what `ServerApp(server_fn=
    ...)` runs), then the end of a completed run under a plain `flwr run`: no `owner`
    means no `fedmc run` waits to draw the plots and print the table, so the ServerApp
    does (`summary.finish`), into the run's log."""
    tolerate_node_loss()  # the simulation engine's actor pool, in this process beside us
    retry_pulls_promptly()  # a reply's arrays asked for before its node has pushed them all
    out, components = prepare_run(context, node_partitions(grid, context.run_config))
    start_grid(grid=PromptGrid(grid), strategy=components.strategy, config=components.config)
    if not context.run_config.get("owner") and run_completed(out, str(context.run_id)):
        from fedmc_flwr.federation.summary import finish  # matplotlib: only where it draws

        print(finish(out), flush=True)
