"""What a region keeps for itself: its own statistics (`federation.personal_statistics`),
its own fine-tuned network when judged (`federation.fine_tuned`), and a share of its own
network in the one it trains on (`federation.global_share`). The server and the reply are
FedAvg's; only what a region trains and is judged with changes."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SMALL_DEMO
from test_training import SHORT_TRAINING

from fedmc_flwr.config import ConfigError, FederationConfig, learner_plan, load_config
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.federation.client_app import (
    adopt_global,
    evaluate_region,
    state_dir_of,
    train_region,
)
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.federation.wire import policy_name
from fedmc_flwr.policies.checkpoints import round_file
from fedmc_flwr.policies.moments import MOMENT_ARRAYS, Moments
from fedmc_flwr.policies.ppo import STATISTICS, PPOLearner


def _tiny(tmp_path, *extra: str):
    return load_config(SMALL_DEMO, [*SHORT_TRAINING, f"results_dir={tmp_path}", *extra])


def _with_statistics(weights: list[np.ndarray], count: float, mean: float) -> list[np.ndarray]:
    """`weights` with every statistic replaced by `count` samples of mean `mean`."""
    network = weights[: len(weights) - len(STATISTICS) * MOMENT_ARRAYS]
    stats = []
    for k in range(len(STATISTICS)):
        dim = len(weights[len(network) + k * MOMENT_ARRAYS + 1])
        stats += Moments(count, np.full(dim, mean), np.ones(dim)).arrays()
    return [*network, *stats]


def test_personal_variants_are_named_for_what_a_region_keeps() -> None:
    assert policy_name(FederationConfig()) == "ppo-fedavg"
    assert policy_name(FederationConfig(personal_statistics=True)) == "ppo-fedavg-own-stats"
    assert policy_name(FederationConfig(fine_tuned=True)) == "ppo-fedavg-fine-tuned"
    both = FederationConfig(proximal_mu=0.01, personal_statistics=True, fine_tuned=True)
    assert policy_name(both) == "ppo-fedprox-own-stats-fine-tuned"
    assert policy_name(FederationConfig(global_share=0.5)) == "ppo-fedavg-mix0.5"


@pytest.mark.parametrize("personal", [False, True])
def test_a_region_with_its_own_statistics_never_takes_the_pooled_ones(tmp_path, personal) -> None:
    cfg = _tiny(tmp_path, f"federation.personal_statistics={str(personal).lower()}")
    state = tmp_path / "state"
    update, _ = train_region(cfg, 0, initial_weights(cfg), 1, state)
    assert len(update) == len(initial_weights(cfg))  # the reply's layout is FedAvg's
    pooled = _with_statistics(update, count=1e9, mean=50.0)
    train_region(cfg, 0, pooled, 2, state)
    learner = PPOLearner(learner_plan(cfg, [0]), seed=0)
    learner.load(round_file(state_dir_of(state, cfg, 0), 2))
    own = learner.norm.total
    if personal:  # its own two rounds of observations only
        assert own.count < 1e6 and not np.isclose(own.mean, 50.0, atol=1).any()
    else:
        assert own.count > 1e9 and np.isclose(own.mean, 50.0, atol=1).all()


def test_a_fine_tuned_region_is_judged_with_the_network_its_round_left(tmp_path) -> None:
    cfg = _tiny(tmp_path, "federation.fine_tuned=true")
    state = tmp_path / "state"
    start = initial_weights(cfg)
    train_region(cfg, 0, start, 1, state)
    judged, _ = evaluate_region(cfg, 0, start, state, 1)
    own = PPOLearner(learner_plan(cfg, [0]), seed=0)
    own.load(round_file(state_dir_of(state, cfg, 0), 1))
    expected = evaluate(lambda sim: own.policy("x"), cfg, 0)
    np.testing.assert_array_equal(judged.per_seed_reward, expected.per_seed_reward)
    global_only, _ = evaluate_region(cfg, 0, start)  # no state: the global policy
    fresh = PPOLearner(learner_plan(cfg, [0]), seed=0)
    fresh.set_weights(start)
    reference = evaluate(lambda sim: fresh.policy("x"), cfg, 0)
    np.testing.assert_array_equal(global_only.per_seed_reward, reference.per_seed_reward)


def test_a_region_judged_on_its_own_statistics_reads_them_from_its_state(tmp_path) -> None:
    cfg = _tiny(tmp_path, "federation.personal_statistics=true")
    state = tmp_path / "state"
    update, _ = train_region(cfg, 0, initial_weights(cfg), 1, state)
    pooled = _with_statistics(update, count=1e9, mean=50.0)
    judged, _ = evaluate_region(cfg, 0, pooled, state, 1)
    own = PPOLearner(learner_plan(cfg, [0]), seed=0)
    own.load(round_file(state_dir_of(state, cfg, 0), 1))
    mine = own.norm.total, own.return_norm.total
    own.set_weights(pooled)
    own.norm.start_from(mine[0])
    own.return_norm.start_from(mine[1])
    expected = evaluate(lambda sim: own.policy("x"), cfg, 0)
    np.testing.assert_array_equal(judged.per_seed_reward, expected.per_seed_reward)


@pytest.mark.parametrize("local", [False, True])
def test_a_region_with_its_own_critic_never_takes_the_global_one(tmp_path, local) -> None:
    """Round 2 starts from global weights whose every array is 0: a region with its own
    critic trains on from its round-1 critic (and the global actor), one without starts
    both from 0."""
    cfg = _tiny(tmp_path, f"federation.local_critic={str(local).lower()}")
    state = tmp_path / "state"
    first, _ = train_region(cfg, 0, initial_weights(cfg), 1, state)
    learner = PPOLearner(learner_plan(cfg, [0]), seed=0)
    learner.load(round_file(state_dir_of(state, cfg, 0), 1))
    critic = learner.critic_arrays()
    assert critic and len(critic) < len(learner.params)
    zeros = [np.zeros_like(a) for a in first[: len(learner.params)]]
    start = [*zeros, *first[len(learner.params) :]]
    adopt_global(learner, start, cfg.federation, has_own=True)
    for k, array in enumerate(learner.get_weights()[: len(learner.params)]):
        kept = local and k in critic
        np.testing.assert_array_equal(array, critic[k] if kept else zeros[k])
    assert policy_name(cfg.federation).endswith("-own-critic") == local


def test_a_mixing_region_starts_its_round_from_the_share_of_global_and_own_worked_by_hand(
    tmp_path,
) -> None:
    """Global weights of 4 everywhere and a region's own of 2: a share of 0.25 gives
    0.25 * 4 + 0.75 * 2 = 2.5 in every network array; the statistics are the global ones."""
    cfg = _tiny(tmp_path, "federation.global_share=0.25")
    learner = PPOLearner(learner_plan(cfg, [0]), seed=0)
    networks = len(learner.params)
    own = learner.get_weights()
    learner.set_weights([np.full_like(a, 2.0) for a in own[:networks]] + own[networks:])
    pooled = _with_statistics(own, count=1e9, mean=50.0)
    start = [np.full_like(a, 4.0) for a in pooled[:networks]] + pooled[networks:]
    adopt_global(learner, start, cfg.federation, has_own=True)
    for array in learner.get_weights()[:networks]:
        np.testing.assert_array_equal(array, np.full_like(array, 2.5))
    assert learner.norm.total.count == 1e9 and np.isclose(learner.norm.total.mean, 50.0).all()
    fresh = PPOLearner(learner_plan(cfg, [0]), seed=0)  # no state yet: the global network
    adopt_global(fresh, start, cfg.federation, has_own=False)
    for array in fresh.get_weights()[:networks]:
        np.testing.assert_array_equal(array, np.full_like(array, 4.0))


def test_a_mixing_region_is_judged_with_its_own_network(tmp_path) -> None:
    cfg = _tiny(tmp_path, "federation.global_share=0.5")
    state = tmp_path / "state"
    start = initial_weights(cfg)
    update, _ = train_region(cfg, 0, start, 1, state)
    rng = np.random.default_rng(0)  # a global network far from its own, not a multiple of it
    networks = len(update) - len(STATISTICS) * MOMENT_ARRAYS
    other = [rng.normal(size=a.shape).astype(np.float32) for a in update[:networks]]
    judged, _ = evaluate_region(cfg, 0, [*other, *update[networks:]], state, 1)
    own = PPOLearner(learner_plan(cfg, [0]), seed=0)
    own.load(round_file(state_dir_of(state, cfg, 0), 1))
    expected = evaluate(lambda sim: own.policy("x"), cfg, 0)
    np.testing.assert_array_equal(judged.per_seed_reward, expected.per_seed_reward)


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_global_share_outside_zero_to_one_is_refused(tmp_path, share) -> None:
    with pytest.raises(ConfigError, match=r"federation\.global_share"):
        _tiny(tmp_path, f"federation.global_share={share}")
