"""The notebook's two looks at a policy: one PPO update watched, and where jobs go."""

from __future__ import annotations

import numpy as np
from conftest import SMALL_DEMO, TINY_WORLD

from fedmc_flwr.analysis.ppo_update import watch_one_update
from fedmc_flwr.config import learner_plan, load_config
from fedmc_flwr.experiments.destinations import where_jobs_go
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sim.signals import build_spec

SMALL = [*TINY_WORLD, "ppo.num_envs=4", "ppo.rollout_steps=16", "eval.seeds=3", "eval.steps=40"]


def test_watching_an_update_sees_the_learners_own_update_and_leaves_it_trained() -> None:
    cfg = load_config(SMALL_DEMO, SMALL)
    learner = PPOLearner(learner_plan(cfg, [0]), seed=3)
    twin = PPOLearner(learner_plan(cfg, [0]), seed=3)
    watched = watch_one_update(learner)
    twin.train_round(cfg.ppo.rollout_steps)
    for mine, theirs in zip(learner.get_weights(), twin.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)  # watching changed nothing
    assert "_update" not in vars(learner)  # the class's own method again
    jobs = cfg.ppo.rollout_steps * cfg.ppo.num_envs
    assert watched.advantages.shape == watched.after.ratio.shape == (jobs,)
    np.testing.assert_allclose(watched.before.ratio, 1.0, atol=1e-4)
    assert abs(watched.before.losses["approx_kl"]) < 1e-6
    assert not np.allclose(watched.after.ratio, 1.0)
    assert watched.after.losses["value_loss"] < watched.before.losses["value_loss"]


def test_where_jobs_go_tallies_every_held_out_job_with_the_signals_it_met() -> None:
    cfg = load_config(SMALL_DEMO, SMALL)
    spec = build_spec(cfg.world, cfg.reward)
    routes = where_jobs_go(DISPATCHERS["sed"], cfg, 1)
    assert list(routes["destination"]) == list(spec.region_names)
    assert (routes["ingress"] == spec.region_names[1]).all()
    assert np.isclose(routes["share of jobs"].sum(), 1.0)
    sent = routes.dropna()
    assert len(sent) >= 1
    # read from the observation the job was sent on: a price, a carbon intensity
    assert (sent["price when sent"] > 0).all() and (sent["carbon when sent"] >= 0).all()
