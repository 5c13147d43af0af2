"""SCAFFOLD's drift correction (`federation/control_variates.py`): the corrected Adam step,
the regions' and the server's variates, and where the correction is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TINY

from fedmc_flwr.config import ConfigError, learner_plan, load_config
from fedmc_flwr.federation.aggregation import RegionUpdate
from fedmc_flwr.federation.client_app import adopt_global
from fedmc_flwr.federation.control_variates import next_control, train_corrected
from fedmc_flwr.federation.drift import flat
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.federation.server_optimizers import ServerState
from fedmc_flwr.federation.wire import policy_name, split_control, with_control
from fedmc_flwr.policies.flat_adam import FlatAdam
from fedmc_flwr.policies.ppo import PPOLearner

SCAFFOLD = ["federation.drift_correction=scaffold"]


def _learners(count: int, *extra: str) -> tuple[list[PPOLearner], list[np.ndarray]]:
    cfg = load_config(TINY, [*SCAFFOLD, *extra])
    learners = [PPOLearner(learner_plan(cfg, [k % 2]), seed=k) for k in range(count)]
    return learners, initial_weights(cfg)


def _network(learner: PPOLearner) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in learner.params]


def test_a_corrected_adam_step_moves_by_the_correction_times_the_step_size() -> None:
    params = [torch.nn.Parameter(torch.linspace(-1, 1, 6).reshape(2, 3))]
    twin = [torch.nn.Parameter(params[0].detach().clone())]
    plain, corrected = FlatAdam(params, lr=0.01, eps=1e-5), FlatAdam(twin, lr=0.01, eps=1e-5)
    correction = torch.tensor([0.5, -1.0, 0.0, 2.0, 0.25, -0.125])
    for optimizer, p in ((plain, params[0]), (corrected, twin[0])):
        p.grad = torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2.5
        optimizer.step(correction if optimizer is corrected else None)
    gap = (twin[0] - params[0]).detach().reshape(-1)
    torch.testing.assert_close(gap, -0.01 * correction, rtol=0, atol=1e-7)


def test_with_zero_variates_a_region_trains_as_without_and_keeps_its_mean_direction() -> None:
    (plain,), weights = _learners(1, "ppo.imitation_steps=0")
    twin = PPOLearner(learner_plan(plain.cfg, [0]), seed=0)
    for learner in (plain, twin):
        learner.set_weights(weights)
    start = flat(_network(twin))
    plain.train_round(64)
    stats = train_corrected(twin, np.zeros(start.size), 64)
    for mine, theirs in zip(_network(twin), _network(plain), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert stats["step_size_sum"] > 0
    walk = start - flat(_network(twin))
    np.testing.assert_allclose(twin.control, walk / stats["step_size_sum"], rtol=1e-12)


def test_the_servers_variate_is_the_mean_of_the_regions_without_their_upload() -> None:
    """Over rounds with every region replying, `next_control` (from the updates alone)
    equals the mean of the variates the regions keep; the correction is live by round 2."""
    learners, weights = _learners(3)
    cut = len(_network(learners[0]))
    control = np.zeros(flat(weights[:cut]).size)
    for rnd in (1, 2):
        updates = []
        for k, learner in enumerate(learners):
            adopt_global(learner, weights, learner.cfg.federation, has_own=rnd > 1)
            stats = train_corrected(learner, control, 32, imitate=rnd == 1)
            updates.append(RegionUpdate(k, learner.get_update(), 32, dict(stats)))
        control = next_control(control, weights[:cut], updates, len(learners))
        mean = np.mean([learner.control for learner in learners], axis=0)
        np.testing.assert_allclose(control, mean, rtol=1e-9, atol=1e-12)
        network = [np.mean([u.weights[k] for u in updates], axis=0) for k in range(cut)]
        weights = [a.astype(np.float32) for a in network] + weights[cut:]
    assert np.abs(control).max() > 0


def test_a_silent_region_moves_the_servers_variate_by_nothing() -> None:
    control = np.array([1.0, -2.0])
    previous = [np.zeros(2, np.float32)]
    update = RegionUpdate(0, [np.ones(2, np.float32)], 10, {"step_size_sum": float("nan")})
    np.testing.assert_array_equal(next_control(control, previous, [update], 2), control)
    update.metrics["step_size_sum"] = 0.5  # walk -1 per coordinate over 0.5: direction -2
    moved = next_control(control, previous, [update], 2)
    np.testing.assert_allclose(moved, control + (np.array([-2.0, -2.0]) - control) / 2)


def test_the_variates_survive_the_learners_state_and_the_round_checkpoint() -> None:
    (learner,), _ = _learners(1)
    learner.control = np.linspace(-1, 1, sum(p.numel() for p in learner.params))
    twin = PPOLearner(learner_plan(learner.cfg, [0]), seed=0)
    twin.load_state(learner.state())
    np.testing.assert_array_equal(twin.control, learner.control)
    state = ServerState(control=np.arange(4.0))
    np.testing.assert_array_equal(ServerState.from_arrays(state.arrays()).control, np.arange(4.0))


def test_the_variate_travels_after_the_weights_only_under_scaffold() -> None:
    cfg = load_config(TINY, SCAFFOLD)
    weights, control = [np.ones(3, np.float32)], np.arange(5.0)
    back, got = split_control(with_control(weights, control), cfg.federation)
    assert len(back) == 1 and np.array_equal(got, control)
    plain = load_config(TINY).federation
    assert split_control(weights, plain) == (weights, None)
    assert policy_name(cfg.federation) == "ppo-scaffold"


@pytest.mark.parametrize(
    "extra, words",
    [
        ("federation.aggregation=median", "aggregation 'median'"),
        ("federation.local_critic=true", "federation.local_critic"),
        ("federation.drift_correction=feddyn", "'none' or 'scaffold'"),
    ],
)
def test_drift_correction_is_refused_where_it_cannot_hold(extra: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(TINY, [*SCAFFOLD, extra])
    assert "federation.drift_correction" in str(caught.value) and words in str(caught.value)
