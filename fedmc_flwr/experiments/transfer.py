"""`fedmc transfer`: a trained policy, unchanged, on another estate beside its dispatchers.

A two-tier network's (and a node scorer's) parameters and statistics do not depend on the
estate's size, so the global weights of a run on small_demo act as they are on 10 x 20 or
20 x 50 nodes. The
policy is judged on the target estate's held-out worlds, next to every dispatcher there,
and written as `per_seed.csv` (the schema `fedmc report` pairs); the printed table is
`fedmc run`'s (`tables.policy_table`), paired against SED and the two-tier heuristic.
One folder per trained run, `<target>-transfer-<source>`: `fedmc report` over the folders
of several training seeds gives the paired intervals over seeds and worlds.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fedmc_flwr.analysis.tables import policy_table
from fedmc_flwr.config import ConfigError, ExperimentConfig, learner_plan, load_config, to_yaml
from fedmc_flwr.evaluation import evaluate, evaluate_dispatchers, per_seed_rows, summary_rows
from fedmc_flwr.policies.checkpoints import read_checkpoint, round_of, run_config
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import experiment_dir, per_seed_writer, read_per_seed, record_provenance
from fedmc_flwr.sim.signals import region_catalogue

POLICY = "ppo-transfer"
"""The transferred policy's name in the tables."""


def transferred_config(source: ExperimentConfig, target: ExperimentConfig) -> ExperimentConfig:
    """The target estate and its evaluation, with the source run's network (kind and shape)."""
    ppo = dataclasses.replace(
        target.ppo,
        policy=source.ppo.policy,
        hidden_size=source.ppo.hidden_size,
        scorer_depth=source.ppo.scorer_depth,
    )
    return dataclasses.replace(target, ppo=ppo)


def trained_rounds(checkpoint: Path, source: ExperimentConfig) -> int:
    """The rounds behind the weights: `round_NNN.npz` says so; a saved learner has run
    its config's rounds. Its rows carry that round (not round 0, a dispatcher's), so
    `fedmc report` pairs the transfers of several training seeds as one learner."""
    server_round = round_of(checkpoint)
    return source.train.rounds if server_round is None else server_round


def run_transfer(checkpoint: Path, target: ExperimentConfig) -> Path:
    """Judge the checkpoint's global policy on `target`'s held-out worlds, beside every
    dispatcher; write `per_seed.csv` and the config; return the folder."""
    weights = read_checkpoint(checkpoint)
    source = load_config(run_config(checkpoint))
    cfg = transferred_config(source, target)
    learner = PPOLearner(learner_plan(cfg, [0]), seed=0)
    try:
        learner.set_weights(weights)
    except ValueError as exc:
        raise ConfigError(
            f"{checkpoint}: its {source.ppo.policy} network does not fit {cfg.name}'s estate "
            f"({exc}); only two-tier and node-scorer networks move between estates"
        ) from None
    policy = learner.policy(POLICY)
    out = experiment_dir(cfg.results_dir, f"{cfg.name}-transfer-{source.name}")
    (out / "config.yaml").write_text(to_yaml(cfg))
    record_provenance(out, f"fedmc transfer --checkpoint {checkpoint} (target {cfg.name})")
    regions = range(cfg.world.regions)
    transferred = [evaluate(lambda sim: policy, cfg, r) for r in regions]
    dispatchers = evaluate_dispatchers(cfg)
    names = [region.name for region in region_catalogue(cfg.world.regions)]
    rounds = trained_rounds(checkpoint, source)
    steps = rounds * source.train.steps_per_round * source.ppo.num_envs * source.world.regions
    key = {"experiment": cfg.name, "train_seed": source.seed}
    rows = per_seed_rows(transferred, names, **key, round=rounds, train_steps=steps)
    rows += per_seed_rows(dispatchers, names, **key, round=0, train_steps=0)
    per_seed = per_seed_writer(out)
    per_seed.write(rows)
    title = (
        f"{source.name}'s policy after round {rounds} (training seed {source.seed}), unchanged "
        f"as {POLICY}, and the dispatchers on {cfg.name}'s held-out worlds, mean over regions:"
    )
    table = summary_rows([*transferred, *dispatchers], names)
    print(policy_table(title, table, read_per_seed(per_seed.path)))
    print(f"wrote {per_seed.path}")
    return out
