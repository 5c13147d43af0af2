"""`fedmc speedup`: how much faster k regions learn together than one alone.

Every region of the federation trains on worlds drawn like one region's (`region` of the
base experiment: the same ingress, estate and workload, its own training seeds), so the
regions differ only in what they happen to meet and federating k of them can at best pool
k times the experience. Each region trains `train.steps_per_round` steps per env and
round; after every round the federated greedy policy is judged on that region's held-out
worlds (`eval.split`) beside the baseline dispatcher, world by world. From the rows,
`fedmc_flwr.analysis.speedup` reads the steps per region until the federation beats the
baseline (paired over the held-out worlds, 95% interval above 0) and the return at the
budget, for each federation size.

A plan with `pooled: true` measures the reference instead: for each size k, one learner on
k regions' worth of worlds at once (k times the envs, the same steps per env and updates,
each update on k times the rows), what a federation of k would learn if its regions'
experience were pooled in one place.

The rounds run in this process, through the federation's own pieces: each region's
learner adopts the global weights as a Flower client does (`client_app.adopt_global`) and
the server combines the updates with the strategy's `aggregate` and `server_step`. Why
not Flower's simulation engine: its clients take their worlds from their region index, so
k regions of one workload are not a config it can run, and a round's fixed overhead there
(some seconds) would dwarf rounds of 64 steps.

A cell is one (federation size, training seed); `speedup.csv` holds every finished cell's
rows and is replaced whole (a tmp file renamed) after each cell, so an interrupted run
resumes at the first unfinished cell. Cells run seed by seed, every size of a seed before
the next seed, so a run stopped early still compares the sizes over the seeds it finished.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fedmc_flwr.analysis.speedup import (
    COLUMNS,
    PLAN_FILE,
    SPEEDUP_FILE,
    markdown,
    plot,
    read_speedup,
)
from fedmc_flwr.config import ConfigError, ExperimentConfig, learner_plan, load_config, to_yaml
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.federation.aggregation import RegionUpdate, aggregate
from fedmc_flwr.federation.client_app import adopt_global
from fedmc_flwr.federation.control_variates import next_control, train_corrected
from fedmc_flwr.federation.drift import flat
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.federation.server_optimizers import ServerState, server_step
from fedmc_flwr.federation.wire import policy_name
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.moments import MOMENT_ARRAYS
from fedmc_flwr.policies.ppo import STATISTICS, PPOLearner
from fedmc_flwr.results import record_provenance
from fedmc_flwr.seeds import learner_seed

PLAN_KEYS = {
    "name",
    "experiment",
    "region",
    "federations",
    "seeds",
    "baseline",
    "overrides",
    "together",
    "pooled",
}


@dataclass(frozen=True)
class Plan:
    """What `conf/speedup.yaml` asks for: the base experiment (a YAML and dotted
    overrides), the region whose worlds every region trains on, the federation sizes, the
    training seeds and the dispatcher to beat. With `pooled`, a size k is not k regions
    but one learner on k regions' worth of worlds (k times `ppo.num_envs`): the same
    experience pooled, the reference a federation of k is measured against.

    `together`: dotted overrides for the sizes above 1 only, after `overrides` and before
    the command line's. A lone region is the reference every size is read against, so it
    keeps the experiment's own settings (those it learns best with alone), while the
    regions of a federation, or the pooled learner, may take settings that only pay
    together: the mean of k regions' updates is less noisy than one region's, so it can
    take a larger step."""

    name: str
    experiment: Path
    region: int
    federations: tuple[int, ...]
    seeds: tuple[int, ...]
    baseline: str = "sed"
    overrides: tuple[str, ...] = ()
    together: tuple[str, ...] = ()
    command_line: tuple[str, ...] = ()
    """Overrides given on the command line: the last word at every size."""
    pooled: bool = False

    def config(self, size: int = 1) -> ExperimentConfig:
        """The base experiment with the plan's overrides, and for a size above 1 its
        `together` overrides: what a cell of `size` trains with."""
        together = self.together if size > 1 else ()
        overrides = [*self.overrides, *together, *self.command_line]
        cfg = load_config(self.experiment, overrides)
        if not 0 <= self.region < cfg.world.regions:
            raise ConfigError(
                f"{self.name}: region {self.region} not in 0..{cfg.world.regions - 1}"
            )
        return cfg

    def out_dir(self, cfg: ExperimentConfig) -> Path:
        return Path(cfg.results_dir) / self.name


def _read_plan(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """A speed-up file's keys, over those of the file it `inherits` from (next to it, and
    so on up): a plan measured again on another region's worlds names only what differs.
    Each file's `experiment` is read relative to that file; its `overrides` (and
    `together`) go after the parent's, so that a child that changes one key of the
    experiment names that key alone."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such speed-up file")
    if path.resolve() in chain:
        raise ConfigError(f"{path}: inherits from itself")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    unknown = set(raw) - PLAN_KEYS - {"inherits"}
    if unknown:
        expected = sorted(PLAN_KEYS | {"inherits"})
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)}; expected {expected}")
    if "experiment" in raw:
        raw["experiment"] = path.parent / str(raw["experiment"])
    parent = raw.pop("inherits", None)
    if parent is None:
        return raw
    if "name" not in raw:
        raise ConfigError(f"{path}: a file that inherits names its own plan (its results folder)")
    inherited = _read_plan(path.parent / str(parent), (*chain, path.resolve()))
    lists = {key: [*inherited.get(key, []), *raw.pop(key, [])] for key in ("overrides", "together")}
    return inherited | raw | {key: value for key, value in lists.items() if value}


def load_plan(path: Path, overrides: Sequence[str] = ()) -> Plan:
    """Read a speed-up file; `overrides` (dotted `key=value`) go after the file's own."""
    raw = _read_plan(Path(path))
    try:
        plan = Plan(
            name=str(raw["name"]),
            experiment=Path(raw["experiment"]),
            region=int(raw.get("region", 0)),
            federations=tuple(int(k) for k in raw["federations"]),
            seeds=tuple(int(s) for s in raw["seeds"]),
            baseline=str(raw.get("baseline", "sed")),
            overrides=tuple(map(str, raw.get("overrides", []))),
            together=tuple(map(str, raw.get("together", []))),
            command_line=tuple(overrides),
            pooled=bool(raw.get("pooled", False)),
        )
    except KeyError as exc:
        raise ConfigError(f"{path}: missing key {exc.args[0]!r}") from None
    if not plan.federations or min(plan.federations) < 1:
        raise ConfigError(f"{path}: federations must be sizes of 1 or more")
    if plan.baseline not in DISPATCHERS:
        raise ConfigError(f"{path}: baseline {plan.baseline!r} is not a dispatcher")
    return plan


def _stamp(plan: Plan, cfg: ExperimentConfig) -> str:
    """The plan and resolved experiment, as plan.yaml holds them: a folder measured with
    another config is refused rather than mixed."""
    grid: dict[str, object] = {"region": plan.region, "baseline": plan.baseline}
    if plan.pooled:
        grid["pooled"] = True
    if plan.together:
        grid["together"] = list(plan.together)
    return yaml.safe_dump(grid) + to_yaml(cfg)


def alone(cfg: ExperimentConfig) -> ExperimentConfig:
    """`cfg` for a region learning by itself: no server step, no drift correction. Every
    size's steps are read against one region's, and a region alone has no server to
    extrapolate its update nor other regions to drift from: a plan that steps the server
    would otherwise slow (or speed) its own reference and flatter (or hide) the speed-up."""
    federation = dataclasses.replace(
        cfg.federation, server_optimizer="none", drift_correction="none"
    )
    return dataclasses.replace(cfg, federation=federation)


def federate(cfg: ExperimentConfig, region: int, size: int) -> list[tuple[int, list[np.ndarray]]]:
    """FedAvg (or the configured server step and drift correction) of `size` regions
    trained on `region`'s worlds for `cfg.train.rounds` rounds: the global weights after
    each round."""
    plan = learner_plan(cfg, [region])
    learners = [PPOLearner(plan, learner_seed(cfg.seed, k)) for k in range(size)]
    weights = initial_weights(cfg)
    cut = len(weights) - len(STATISTICS) * MOMENT_ARRAYS
    scaffold = cfg.federation.drift_correction != "none"
    state = ServerState(control=np.zeros(flat(weights[:cut]).size) if scaffold else None)
    steps, mu = cfg.train.steps_per_round, cfg.federation.proximal_mu
    rounds = []
    for rnd in range(1, cfg.train.rounds + 1):
        updates = []
        for k, learner in enumerate(learners):
            adopt_global(learner, weights, cfg.federation, has_own=rnd > 1)
            stats = (
                train_corrected(learner, state.control, steps, mu, rnd == 1)
                if state.control is not None
                else learner.train_round(steps, mu, imitate=rnd == 1)
            )
            updates.append(RegionUpdate(k, learner.get_update(), int(stats["env_steps"]), stats))
        combined = aggregate(updates, weights, cfg.federation, len(STATISTICS))
        network, state = server_step(
            weights[:cut], combined[:cut], state, cfg.federation, [u.weights[:cut] for u in updates]
        )
        if scaffold:
            control = next_control(state.control, weights[:cut], updates, size)
            state = dataclasses.replace(state, control=control)
        weights = network + combined[cut:]
        rounds.append((rnd, weights))
    return rounds


def pool(cfg: ExperimentConfig, size: int) -> ExperimentConfig:
    """`cfg` for one learner on `size` regions' worth of worlds at once (`size` times the
    envs): every region's experience pooled, in the same steps per env and updates as each
    region of a federation makes, each update on `size` times the rows."""
    ppo = dataclasses.replace(cfg.ppo, num_envs=cfg.ppo.num_envs * size)
    return dataclasses.replace(cfg, ppo=ppo)


def cell_training(
    cfg: ExperimentConfig, size: int, pooled: bool = False
) -> tuple[ExperimentConfig, int]:
    """The config and the number of regions a cell of `size` trains (`federate`): `size`
    regions, or under `pooled` one learner on their worlds (`pool`); a single region
    learns `alone`. The speed-up's own choice, kept out of `federate`, which trains a
    one-region federation as `fedmc run` does for other callers."""
    if pooled:
        cfg, size = pool(cfg, size), 1
    return (alone(cfg), 1) if size == 1 else (cfg, size)


def run_cell(
    cfg: ExperimentConfig, region: int, size: int, baseline: np.ndarray, pooled: bool = False
) -> list[dict[str, float | int]]:
    """One cell's rows: after every round, the global greedy policy's reward on each
    held-out world of `region` beside `baseline`'s on the same world; with `pooled`, the
    policy of one learner on `size` regions' worlds (`pool`)."""
    judge = PPOLearner(learner_plan(cfg, [region]), learner_seed(cfg.seed))
    name = policy_name(cfg.federation)
    rows = []
    trained, regions = cell_training(cfg, size, pooled)
    for rnd, weights in federate(trained, region, regions):
        judge.set_weights(weights)
        result = evaluate(lambda sim: judge.policy(name), cfg, region)
        rows += [
            {
                "regions": size,
                "train_seed": cfg.seed,
                "round": rnd,
                "steps": rnd * cfg.train.steps_per_round,
                "eval_seed": int(seed),
                "reward": float(reward),
                "baseline": float(base),
            }
            for seed, reward, base in zip(
                result.eval_seeds, result.per_seed_reward, baseline, strict=True
            )
        ]
    return rows


def _finished(frame: pd.DataFrame, rounds: int) -> set[tuple[int, int]]:
    """The (size, seed) cells whose every round is in `frame`."""
    last = frame.groupby(["regions", "train_seed"])["round"].max()
    return {(int(k), int(s)) for (k, s), top in last.items() if top == rounds}


def _write(frame: pd.DataFrame, path: Path) -> None:
    """Replace `path` whole: a reader never meets a half-written file."""
    partial = path.with_name(path.name + ".partial")
    frame.to_csv(partial, index=False)
    os.replace(partial, path)


def run_speedup(plan: Plan, command: str = "") -> Path:
    """Run every unfinished cell of `plan`, seed by seed; return speedup.csv's path."""
    cfg = plan.config()
    # every size's config before anything is written: a mistyped key leaves no folder
    configs = {size: plan.config(size) for size in plan.federations}
    out = plan.out_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    stamp = _stamp(plan, cfg)
    plan_file = out / PLAN_FILE
    if plan_file.is_file() and plan_file.read_text() != stamp:
        raise ConfigError(
            f"{out} was measured with another config ({plan_file}); "
            "remove the folder or name the plan differently"
        )
    plan_file.write_text(stamp)
    csv = out / SPEEDUP_FILE
    frame = pd.read_csv(csv) if csv.is_file() else pd.DataFrame(columns=COLUMNS)
    done = _finished(frame, cfg.train.rounds)
    cells = zip(frame["regions"], frame["train_seed"], strict=True)
    frame = frame.loc[np.array([(int(k), int(s)) in done for k, s in cells], dtype=bool)]
    todo = [(k, s) for s in plan.seeds for k in plan.federations if (k, s) not in done]
    print(
        f"fedmc speedup {plan.name}: {len(plan.seeds) * len(plan.federations)} cells, "
        f"{len(todo)} to run; results in {out}",
        file=sys.stderr,
    )
    if not todo:
        return csv
    record_provenance(
        out, command or f"fedmc speedup {shlex.join((*plan.overrides, *plan.command_line))}"
    )
    dispatcher = DISPATCHERS[plan.baseline]
    baseline = evaluate(lambda sim: dispatcher(sim), cfg, plan.region).per_seed_reward
    for size, seed in todo:
        start = time.perf_counter()
        cell = dataclasses.replace(configs[size], seed=seed)
        rows = run_cell(cell, plan.region, size, baseline, plan.pooled)
        fresh = pd.DataFrame(rows, columns=COLUMNS)
        frame = pd.concat([frame, fresh], ignore_index=True) if len(frame) else fresh
        _write(frame, csv)
        print(
            f"fedmc speedup: {size} region(s), seed {seed} done in "
            f"{time.perf_counter() - start:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return csv


def main(path: Path, overrides: Sequence[str] = ()) -> Path:
    """`fedmc speedup`: run the plan's unfinished cells, print the table, draw the plot
    (`speedup.png` beside speedup.csv); return the plot's path."""
    plan = load_plan(path, overrides)
    words = ["fedmc", "speedup", "--config", str(path)]
    for override in overrides:
        words += ["--set", override]
    csv = run_speedup(plan, shlex.join(words))
    frame = read_speedup(csv)
    print(markdown(frame, plan.baseline))
    return plot(frame, csv.with_name("speedup.png"), plan.baseline)
