"""The two training aids a learner may use in simulation: imitating a dispatcher before
PPO, and a critic that reads hidden state. Neither reaches what is deployed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_ppo import tiny_cfg

from fedmc_flwr.config import (
    ConfigError,
    imitation_teachers,
    learner_plan,
    learner_world,
    load_config,
)
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.policies import privileged
from fedmc_flwr.policies.heuristics import DISPATCHERS, ORACLES, SEDPolicy
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sim.world import MultiCloudSim


def test_the_teachers_a_config_may_name_are_the_dispatchers_but_the_oracles() -> None:
    assert set(imitation_teachers()) == set(DISPATCHERS) - ORACLES


def _agreement_with_sed(learner: PPOLearner, seed: int) -> float:
    """Share of a fresh batch's decisions where the learner's greedy act is SED's."""
    sim = MultiCloudSim(learner_world(learner.cfg.world, [0]), learner.cfg.reward, [0] * 32)
    obs, mask = sim.reset(np.arange(seed, seed + 32, dtype=np.uint64))
    policy, sed = learner.policy(), SEDPolicy(sim)
    agree = 0.0
    for _ in range(50):
        ours = policy.act(obs, mask)
        agree += float((ours == sed.act(obs, mask)).mean())
        step = sim.step(ours)
        obs, mask = step.obs, step.mask
    return agree / 50


def test_imitating_sed_makes_the_actor_choose_as_sed_does() -> None:
    cfg = tiny_cfg(num_envs=16, imitation_steps=256, update_epochs=4, learning_rate=3e-3)
    cfg = replace(cfg, train=replace(cfg.train, steps_per_round=256))
    imitated = PPOLearner(learner_plan(cfg, [0]), seed=0)
    fresh = PPOLearner(learner_plan(cfg, [0]), seed=0)
    before = _agreement_with_sed(fresh, seed=100)
    imitated.train_round(256, imitate=True)
    after = _agreement_with_sed(imitated, seed=100)
    assert after > 0.75 and after > before + 0.3, (before, after)
    # What it learned was the teacher's choices: the cross-entropy fell, no ratio taken.
    losses = [u["policy_loss"] for u in imitated.updates]
    assert losses[-1] < losses[0]
    assert all(u["approx_kl"] == 0.0 and u["clipfrac"] == 0.0 for u in imitated.updates)


def test_imitation_takes_the_first_steps_of_the_round_only_when_asked() -> None:
    cfg = tiny_cfg(imitation_steps=32)
    cfg = replace(cfg, train=replace(cfg.train, steps_per_round=64))
    learner = PPOLearner(learner_plan(cfg, [0]), seed=0)
    stats = learner.train_round(64, imitate=True)
    assert stats["env_steps"] == 64 * cfg.ppo.num_envs  # the budget holds the imitation
    kinds = [
        "imitation" if u["clipfrac"] == 0.0 and u["approx_kl"] == 0.0 else "ppo"
        for u in learner.updates
    ]
    assert kinds[:2] == ["imitation", "imitation"]  # 32 steps = 2 rollouts of 16
    assert "ppo" in kinds[2:]
    again = PPOLearner(learner_plan(cfg, [0]), seed=0)
    again.train_round(64)  # not asked: PPO from the first step
    assert any(u["approx_kl"] != 0.0 for u in again.updates[:2])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ppo.imitation_teacher=myopic-oracle", "ppo.imitation_teacher"),
        ("ppo.imitation_steps=999999", "at most train.steps_per_round"),
        ("ppo.imitation_steps=-1", "an integer >= 0"),
        ("ppo.privileged_critic=true ppo.policy=mlp", "ppo.privileged_critic"),
    ],
)
def test_a_bad_training_aid_is_one_config_error(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("conf/small_demo.yaml", override.split())


def test_the_privileged_critic_reads_the_worlds_hidden_state() -> None:
    cfg = tiny_cfg(privileged_critic=True)
    learner = PPOLearner(learner_plan(cfg, [0, 1]), seed=0)
    hidden = privileged.privileged_inputs(learner.sim)
    state, mean_job = learner.sim.state, learner.sim.spec.mean_service_s
    assert hidden.shape == (cfg.ppo.num_envs, privileged.WIDTH) == (6, 4)
    np.testing.assert_allclose(hidden[:, 0], state.size / mean_job, rtol=1e-6)
    best = np.where(state.mask, learner.sim.dispatch_costs(), np.inf).min(axis=1)
    np.testing.assert_allclose(hidden[:, 1], best, rtol=1e-6)
    assert (hidden[:, 2] >= hidden[:, 1]).all()
    np.testing.assert_allclose(hidden[:, 3], state.backlog.mean(axis=1) / (10 * mean_job), 1e-6)
    # Only the critic grows: the actor's arrays are those of a learner without it.
    plain = PPOLearner(learner_plan(tiny_cfg(), [0, 1]), seed=0)
    ours, theirs = learner.model, plain.model
    assert ours.critic[0].in_features == theirs.critic[0].in_features + privileged.WIDTH
    for tier in ("region_scorer", "node_scorer"):
        shapes = [[p.shape for p in getattr(m, tier).parameters()] for m in (ours, theirs)]
        assert shapes[0] == shapes[1]


def test_a_privileged_learner_trains_and_its_policy_acts_on_the_observation_alone() -> None:
    cfg = tiny_cfg(privileged_critic=True)
    learner = PPOLearner(learner_plan(cfg, [0, 1]), seed=0)
    stats = learner.train_round(32)
    assert np.isfinite(stats["value_loss"])
    judged = replace(cfg, eval=replace(cfg.eval, seeds=2, steps=50))
    policy = learner.policy()
    result = evaluate(lambda sim: policy, judged, 0)  # a policy needs no hidden state
    assert np.isfinite(result.per_seed_reward).all()
