"""The server's step on the round's aggregate (`federation/server_optimizers.py`): FedAvgM,
FedAdam and FedExP against steps worked out by hand over two rounds of toy updates, the state's
trip through a round checkpoint, and the config's refusals."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY
from test_faults import MAX_STEPS, _fit_res, _net, _Recorder

from fedmc_flwr.config import ConfigError, FederationConfig, load_config
from fedmc_flwr.federation.server_optimizers import ServerState, server_step
from fedmc_flwr.federation.strategy import RegionStrategy
from fedmc_flwr.policies.checkpoints import checkpoint_arrays, read_checkpoint, write_weights


def _rounds(federation: FederationConfig, start: list[float], aggregates: list[list[float]]):
    """The global network after each round, each round's aggregate given outright."""
    weights, state, out = [np.array(start, dtype=np.float32)], ServerState(), []
    for aggregate in aggregates:
        weights, state = server_step(weights, [np.array(aggregate, np.float32)], state, federation)
        out.append(weights[0])
    return out, state


def test_fedavgm_takes_the_momentum_step_worked_by_hand() -> None:
    """lr 2, momentum 0.5, from [1, 2]. Round 1: delta [0.5, -1], m = delta, w = [2, 0].
    Round 2 (aggregate [2.5, 0.5]): delta [0.5, 0.5], m = 0.5 m + delta = [0.75, 0],
    w = [2, 0] + 2 m = [3.5, 0]."""
    federation = FederationConfig(
        server_optimizer="fedavgm", server_learning_rate=2.0, server_momentum=0.5
    )
    (first, second), state = _rounds(federation, [1.0, 2.0], [[1.5, 1.0], [2.5, 0.5]])
    np.testing.assert_allclose(first, [2.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(second, [3.5, 0.0], atol=1e-6)
    assert second.dtype == np.float32 and state.second is None
    np.testing.assert_allclose(state.first[0], [0.75, 0.0])


def test_fedadam_takes_reddis_step_worked_by_hand() -> None:
    """lr 0.1, beta1 0.9, beta2 0.99, tau 1e-3, from [0]. Round 1 (aggregate [1]): m = 0.1,
    v = 0.01, w = 0.1 * 0.1 / (0.1 + 0.001). Round 2 (aggregate w - 2): m = 0.09 - 0.2,
    v = 0.0099 + 0.04, w += 0.1 * m / (sqrt(v) + 0.001)."""
    federation = FederationConfig(
        server_optimizer="fedadam",
        server_learning_rate=0.1,
        server_momentum=0.9,
        server_beta2=0.99,
        server_tau=1e-3,
    )
    w1 = 0.1 * 0.1 / (0.1 + 0.001)
    (first, second), state = _rounds(federation, [0.0], [[1.0], [float(np.float32(w1)) - 2.0]])
    np.testing.assert_allclose(first, [w1], rtol=1e-6)
    w2 = w1 + 0.1 * (0.09 - 0.2) / (math.sqrt(0.0099 + 0.04) + 1e-3)
    np.testing.assert_allclose(second, [w2], rtol=1e-5)
    np.testing.assert_allclose(state.second[0], [0.0499], rtol=1e-5)


def _fedexp_round(weights, regions, largest):
    """One FedExP round from `weights` over `regions`' networks, the aggregate their mean."""
    federation = FederationConfig(server_optimizer="fedexp", server_learning_rate=largest)
    networks = [[np.array(r, np.float32)] for r in regions]
    aggregate = [np.mean([n[0] for n in networks], axis=0)]
    (out,), state = server_step(
        [np.array(weights, np.float32)], aggregate, ServerState(), federation, networks
    )
    return out, state


def test_fedexp_extrapolates_by_what_the_averaging_cancelled_worked_by_hand() -> None:
    """From [0, 0], regions [3, 0] and [-1, 0]: mean update [1, 0], their squared norms 9
    and 1, so eta = (9 + 1) / 2 / (2 * 1) = 2.5 and w = [2.5, 0]. Round 2 from there,
    both regions at [2.5, 1]: they agree, (1 / (2 * 1)) = 0.5 is raised to 1, and w is the
    mean, [2.5, 1]. Under a cap of 2 the first round stops at [2, 0]. No state is kept."""
    first, state = _fedexp_round([0.0, 0.0], [[3.0, 0.0], [-1.0, 0.0]], largest=10.0)
    np.testing.assert_allclose(first, [2.5, 0.0], atol=1e-6)
    assert state == ServerState() and first.dtype == np.float32
    second, _ = _fedexp_round(list(first), [[2.5, 1.0], [2.5, 1.0]], largest=10.0)
    np.testing.assert_allclose(second, [2.5, 1.0], atol=1e-6)
    capped, _ = _fedexp_round([0.0, 0.0], [[3.0, 0.0], [-1.0, 0.0]], largest=2.0)
    np.testing.assert_allclose(capped, [2.0, 0.0], atol=1e-6)


def test_fedexp_with_one_region_or_no_move_is_fedavg() -> None:
    """One region's update is its own mean: eta = 1 / 2, raised to 1. Regions that
    cancel exactly leave nothing to extrapolate."""
    alone, _ = _fedexp_round([1.0, -1.0], [[4.0, 3.0]], largest=5.0)
    np.testing.assert_allclose(alone, [4.0, 3.0], atol=1e-6)
    still, _ = _fedexp_round([1.0, 1.0], [[2.0, 1.0], [0.0, 1.0]], largest=5.0)
    np.testing.assert_allclose(still, [1.0, 1.0], atol=1e-6)
    with pytest.raises(ValueError, match="regions' networks"):
        server_step(
            [np.zeros(2, np.float32)],
            [np.ones(2, np.float32)],
            ServerState(),
            FederationConfig(server_optimizer="fedexp", server_learning_rate=2.0),
        )


def test_the_strategy_sizes_fedexps_step_from_the_regions_it_kept() -> None:
    """Regions at 3, -1 and -1 from 0 (every element alike): mean update 1/3, squared
    norms' mean 11/3 per element, eta = (11/3) / (2/9) = 16.5, so the network lands at
    5.5; a cap of 10 stops it at 10/3."""
    for largest, expected in ((20.0, 5.5), (10.0, 10 / 3)):
        federation = FederationConfig(server_optimizer="fedexp", server_learning_rate=largest)
        strategy = RegionStrategy(
            _net(0.0), federation, 3, lambda rnd: {}, _Recorder(), 0, max_steps=MAX_STEPS
        )
        replies = [(None, _fit_res(r, v)) for r, v in enumerate((3.0, -1.0, -1.0))]
        strategy.aggregate_fit(1, replies, [])
        np.testing.assert_allclose(strategy.weights[0], expected, rtol=1e-5)


def test_without_a_server_step_the_aggregate_is_the_global_network() -> None:
    """'none', and 'fedavgm' at lr 1 with no momentum, are FedAvg."""
    aggregates = [[0.25, -3.0], [1.0, 4.0]]
    for federation in (
        FederationConfig(),
        FederationConfig(server_optimizer="fedavgm", server_momentum=0.0),
    ):
        rounds, _ = _rounds(federation, [1.0, 2.0], aggregates)
        for got, aggregate in zip(rounds, aggregates, strict=True):
            np.testing.assert_allclose(got, aggregate, atol=1e-6)


def test_the_state_travels_in_the_round_checkpoint(tmp_path: Path) -> None:
    """Written beside the weights, read back equal; readers of the weights see only them,
    and a checkpoint without state (no optimiser, an older file) gives the fresh state."""
    federation = FederationConfig(server_optimizer="fedadam")
    _, state = _rounds(federation, [1.0, 2.0], [[1.5, 1.0], [2.5, 0.5]])
    path = tmp_path / "round_002.npz"
    weights = [np.ones(2, np.float32), np.zeros((2, 2), np.float64)]
    write_weights(path, weights, state.arrays())
    back = ServerState.from_arrays(checkpoint_arrays(path))
    for mine, theirs in ((back.first, state.first), (back.second, state.second)):
        np.testing.assert_array_equal(mine[0], theirs[0])
    assert len(read_checkpoint(path)) == 2
    write_weights(path, weights)
    assert ServerState.from_arrays(checkpoint_arrays(path)) == ServerState()


def test_a_state_that_does_not_fit_the_network_is_refused() -> None:
    federation = FederationConfig(server_optimizer="fedavgm")
    state = ServerState([np.zeros(3)])
    with pytest.raises(ValueError, match="does not fit"):
        server_step([np.zeros(2, np.float32)], [np.ones(2, np.float32)], state, federation)


@pytest.mark.parametrize(
    "override, words",
    [
        ("federation.server_optimizer=sgd", "'none', 'fedavgm', 'fedadam' or 'fedexp'"),
        ("federation.server_learning_rate=0", "a number > 0"),
        ("federation.server_momentum=1", "[0, 1)"),
        ("federation.server_tau=-1", "a number > 0"),
    ],
)
def test_bad_server_settings_are_refused_by_name(override: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(TINY, [override])
    assert override.split("=")[0] in str(caught.value) and words in str(caught.value)


def test_fedexp_below_a_step_of_one_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"server_learning_rate = 0\.5 under server_optimizer"):
        load_config(
            TINY, ["federation.server_optimizer=fedexp", "federation.server_learning_rate=0.5"]
        )
