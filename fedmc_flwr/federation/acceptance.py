"""The server's own judgement of a candidate network, for aggregation 'acceptance'.

The server owns the simulator, so, as FLTrust trusts a root dataset the server holds, it
can judge each region's network itself: the mean reward of the greedy policy on a few
worlds of every region, drawn from the validation seeds (never the test worlds the
results are reported on, never a training world). The worlds and the policy's
randomness are the same for every candidate of a run, so candidates are compared world
by world. What a region claims about its update plays no part.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedmc_flwr.config import ExperimentConfig, learner_plan
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.federation.aggregation import AGGREGATIONS, Score, Weights
from fedmc_flwr.federation.wire import policy_name
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.seeds import learner_seed


def server_score(cfg: ExperimentConfig) -> Score:
    """The mean reward per job of a set of global weights over
    `federation.acceptance_worlds` validation worlds per region of
    `federation.acceptance_steps` jobs each (one learner per region, for its estate)."""
    federation = cfg.federation
    judged = replace(
        cfg,
        eval=replace(
            cfg.eval,
            split="validation",
            seeds=federation.acceptance_worlds,
            steps=federation.acceptance_steps,
        ),
    )
    learners = [
        PPOLearner(learner_plan(judged, [region]), seed=learner_seed(cfg.seed, region))
        for region in range(cfg.world.regions)
    ]
    name = policy_name(federation)

    def score(weights: Weights) -> float:
        rewards = []
        for region, learner in enumerate(learners):
            learner.set_weights(weights)
            result = evaluate(lambda sim, learner=learner: learner.policy(name), judged, region)
            rewards.append(float(np.mean(result.per_seed_reward)))
        return float(np.mean(rewards))

    return score


def rule_score(cfg: ExperimentConfig) -> Score | None:
    """The server's score when the run's aggregation rule judges candidates with it
    (`Rule.needs_score`), else None: building it costs a learner per region."""
    return server_score(cfg) if AGGREGATIONS[cfg.federation.aggregation].needs_score else None
