"""A federation that survives its regions, without starting Flower: every expected region
is accounted for, broken updates never reach the global model, robust rules bound a
hostile region, and a round with too few healthy regions stops the run."""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field

import numpy as np
import pytest
from flwr.clientapp.client_app import ClientAppException
from flwr.common import Code, EvaluateRes, FitRes, Status, ndarrays_to_parameters
from flwr.server.superlink.linkstate.utils import (
    MESSAGE_UNAVAILABLE_ERROR_REASON,
    NODE_UNAVAILABLE_ERROR_REASON,
    REPLY_MESSAGE_UNAVAILABLE_ERROR_REASON,
)
from ray.exceptions import RayTaskError

from fedmc_flwr.config import ExperimentConfig, FaultConfig, FederationConfig
from fedmc_flwr.evaluation import EvalResult
from fedmc_flwr.federation import faults, wire
from fedmc_flwr.federation.accounting import failure_reason, one_line, sort_out
from fedmc_flwr.federation.aggregation import (
    RegionUpdate,
    aggregate,
    clip_to_median,
    coordinatewise,
)
from fedmc_flwr.federation.bundle import bundle
from fedmc_flwr.federation.strategy import RegionStrategy, RoundFailed

MAX_STEPS = 100


def _net(value: float, shape: tuple[int, ...] = (2, 3)) -> list[np.ndarray]:
    return [np.full(shape, value, dtype=np.float32)]


def _reply(regions: list[int], weights: list[list[np.ndarray]], steps: int = 50) -> tuple:
    metrics = wire.covering(regions)
    for region in regions:
        metrics |= wire.pack(region, {"env_steps": float(steps)})
    return bundle([a for w in weights for a in w]), metrics


def test_every_expected_region_is_healthy_or_failed_with_a_reason() -> None:
    reference = _net(0.0)
    nan = _net(1.0)
    nan[0][0, 0] = np.nan
    replies = [
        _reply([0], [_net(1.0)]),
        _reply([1], [nan]),
        _reply([2], [_net(1.0, (3, 2))]),
        _reply([3], [_net(1.0)], steps=10**15),
        _reply([4, 5], [_net(1.0)]),  # one network for two regions: cannot be split
    ]
    outcome = sort_out(range(8), replies, ["RuntimeError: region 6 died"], reference, MAX_STEPS)
    assert [u.region for u in outcome.updates] == [0]
    assert set(outcome.failed) == {1, 2, 3, 4, 5, 6, 7}
    assert "NaN" in outcome.failed[1]
    assert "shape" in outcome.failed[2]
    assert "env steps" in outcome.failed[3]
    assert "unreadable reply" in outcome.failed[4] and "unreadable reply" in outcome.failed[5]
    assert outcome.failed[6] == "client failed: RuntimeError: region 6 died"


def test_two_replies_for_one_region_leave_it_out() -> None:
    replies = [_reply([0], [_net(1.0)]), _reply([0], [_net(2.0)]), _reply([1], [_net(1.0)])]
    outcome = sort_out(range(2), replies, [], _net(0.0), MAX_STEPS)
    assert [u.region for u in outcome.updates] == [1]
    assert "two replies" in outcome.failed[0]


def _flower_error(reason: str) -> ValueError:
    """What Flower's client proxy raises for a client's error reply (flwr 1.42,
    server/compat/grid_client_proxy.py), which the strategy receives as a failure."""
    return ValueError(
        f"Message contains an Error (reason: {reason}). "
        "It originated during client-side execution of a message."
    )


def _raised(ex: BaseException) -> str:
    """An error reply's reason for an exception, as Flower's engines write it
    (vce_api.py, run_clientapp.py)."""
    return str(type(ex)) + ":<'" + str(ex) + "'>"


def _from_ray() -> BaseException:
    """What the simulation engine catches when a ClientApp raises: Ray's task error
    around Flower's ClientAppException around the app's own exception."""
    try:
        try:
            raise RuntimeError("region 1 cannot finish its evaluation")
        except RuntimeError as ex:
            raise ClientAppException(str(ex)) from ex
    except ClientAppException as wrapper:
        remote = traceback.format_exc()
        return RayTaskError("ClientAppActor.run", remote, wrapper, pid=7).as_instanceof_cause()
    raise AssertionError("unreachable")


def test_a_reply_that_never_came_is_named_as_a_timeout() -> None:
    for reason in (MESSAGE_UNAVAILABLE_ERROR_REASON, REPLY_MESSAGE_UNAVAILABLE_ERROR_REASON):
        assert "round_timeout_s (30 s)" in failure_reason(_flower_error(reason), 30.0)
    node = failure_reason(_flower_error(NODE_UNAVAILABLE_ERROR_REASON), 30.0)
    assert node == "its node stopped sending heartbeats and left the federation"


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (
            lambda: _flower_error(_raised(_from_ray())),
            "RuntimeError: region 1 cannot finish its evaluation",
        ),
        (
            lambda: _flower_error(_raised(faults.InjectedFault("region 0 fails (injected)"))),
            "InjectedFault: region 0 fails (injected)",
        ),
        (
            lambda: _flower_error("An exception was raised when attempting to load `ClientApp`"),
            "An exception was raised when attempting to load `ClientApp`",
        ),
        (
            lambda: RuntimeError("region 1 fails\n(injected)"),
            "RuntimeError: region 1 fails (injected)",
        ),
        (lambda: TimeoutError(), "TimeoutError"),
        (lambda: OSError("disk\n  full\nagain"), "OSError: disk full again"),
        (
            lambda: (
                None,
                EvaluateRes(Status(Code.EVALUATE_NOT_IMPLEMENTED, "no evaluate"), 0, 0, {}),
            ),
            "its reply's status is evaluate not implemented: no evaluate",
        ),
    ],
    ids=["simulation", "deployment", "load", "plain", "bare", "lines", "status"],
)
def test_a_failure_reason_is_one_readable_line_without_python_reprs(failure, reason) -> None:
    """The simulation engine's Ray traceback, the deployment engine's `<class ...>` form,
    Flower's own sentences, a plain exception and a reply whose status is not OK: each
    comes out as its cause, in one line."""
    said = failure_reason(failure(), 30.0)
    assert said == reason
    assert not re.search(r"<class|'>|\)\. It originated|\x1b|Status\(", said)


def test_a_status_read_by_one_line_is_a_sentence_too() -> None:
    """The strategy reads a non-OK reply's status through `one_line`."""
    status = Status(Code.FIT_NOT_IMPLEMENTED, "")
    assert one_line(str(status)) == "its reply's status is fit not implemented"


def _scaled_round(federation: FederationConfig) -> np.ndarray:
    """Three regions step +1, +2, +3 from 0; region 2 sends its step times 1000."""
    updates = [RegionUpdate(r, _net(float(r + 1)), 10) for r in range(3)]
    updates[2] = RegionUpdate(2, _net(3000.0), 10)
    return aggregate(updates, _net(0.0), federation, statistics=0)[0]


def test_robust_rules_bound_a_scaled_update_that_the_mean_follows() -> None:
    assert _scaled_round(FederationConfig()).max() > 900  # the plain mean is dragged away
    median = _scaled_round(FederationConfig(aggregation="median"))
    np.testing.assert_allclose(median, 2.0)
    trimmed = _scaled_round(FederationConfig(aggregation="trimmed-mean", trim_fraction=0.34))
    np.testing.assert_allclose(trimmed, 2.0)
    clipped = _scaled_round(FederationConfig(clip=1.0))
    np.testing.assert_allclose(clipped, (1.0 + 2.0 + 2.0) / 3, rtol=1e-6)


def test_clip_keeps_small_updates_and_shrinks_large_ones_to_the_median_norm() -> None:
    networks = [_net(1.0), _net(2.0), _net(-40.0)]
    clipped = clip_to_median(networks, _net(0.0), factor=1.5)
    np.testing.assert_array_equal(clipped[0][0], networks[0][0])
    np.testing.assert_array_equal(clipped[1][0], networks[1][0])
    np.testing.assert_allclose(clipped[2][0], -3.0)
    assert clipped[2][0].dtype == np.float32


def test_coordinatewise_median_per_coordinate_and_keeps_dtype() -> None:
    a = [np.array([1.0, 9.0], np.float32)]
    b = [np.array([2.0, 1.0], np.float32)]
    c = [np.array([3.0, 5.0], np.float32)]
    out = coordinatewise([a, b, c], lambda stacked: np.median(stacked, axis=0))
    np.testing.assert_array_equal(out[0], [2.0, 5.0])
    assert out[0].dtype == np.float32


def test_injected_faults_corrupt_only_their_region_and_round() -> None:
    cfg = ExperimentConfig(faults=[FaultConfig(region=1, round=2, kind="scale", scale=10.0)])
    assert faults.fault_for(cfg, 1, 1) is None and faults.fault_for(cfg, 0, 2) is None
    fault = faults.fault_for(cfg, 1, 2)
    start = [np.zeros(2, np.float32), np.ones(3)]
    update = [np.full(2, 0.5, np.float32), np.full(3, 7.0)]
    sent, steps = faults.corrupt(fault, update, 100, start, network_arrays=1)
    np.testing.assert_allclose(sent[0], 5.0)
    np.testing.assert_array_equal(sent[1], update[1])  # statistics untouched
    assert steps == 100
    with pytest.raises(faults.InjectedFault, match="region 1"):
        faults.before_training(FaultConfig(region=1, round=2, kind="raise"), cfg)


@dataclass
class _Recorder:
    fits: list[tuple[int, list[int]]] = field(default_factory=list)
    failures: list[tuple[int, str, dict[int, str]]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)

    def on_fit(self, server_round, updates, weights, wall_s, **saved) -> None:
        self.fits.append((server_round, [u.region for u in updates]))

    def on_failures(self, server_round: int, phase: str, failed: dict[int, str]) -> None:
        self.failures.append((server_round, phase, failed))

    def on_evaluate(self, server_round: int, results: list[EvalResult], wall_s: float) -> None:
        pass

    def on_abort(self, reason: str) -> None:
        self.aborted.append(reason)


def _fit_res(region: int, value: float) -> FitRes:
    weights, metrics = _reply([region], [_net(value)])
    return FitRes(Status(Code.OK, ""), ndarrays_to_parameters(weights), 50, metrics)


def _strategy(recorder: _Recorder, min_regions: int, **kwargs: object) -> RegionStrategy:
    return RegionStrategy(
        _net(0.0),
        FederationConfig(min_regions=min_regions),
        3,
        lambda rnd: {},
        recorder,
        statistics=0,
        max_steps=MAX_STEPS,
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_round_goes_on_without_failed_regions_and_records_them() -> None:
    recorder = _Recorder()
    strategy = _strategy(recorder, min_regions=2, first_round=4)
    results = [(None, _fit_res(0, 1.0)), (None, _fit_res(2, 3.0))]
    strategy.aggregate_fit(1, results, [RuntimeError("region 1 fails (injected)")])
    assert recorder.fits == [(4, [0, 2])]  # resumed numbering; healthy regions only
    failed = {1: "client failed: RuntimeError: region 1 fails (injected)"}
    assert recorder.failures == [(4, "training", failed)]
    np.testing.assert_allclose(strategy.weights[0], 2.0)  # built from regions 0 and 2 only


def test_too_few_healthy_regions_stop_the_run_with_the_reason() -> None:
    recorder = _Recorder()
    strategy = _strategy(recorder, min_regions=2)
    with pytest.raises(RoundFailed, match=r"1 of 3 regions healthy, federation\.min_regions is 2"):
        strategy.aggregate_fit(1, [(None, _fit_res(0, 1.0))], [RuntimeError("down")])
    assert (
        recorder.fits == []
        and recorder.aborted
        and "region 1: client failed" in recorder.aborted[0]
    )
    np.testing.assert_array_equal(strategy.weights[0], 0.0)  # the global model is untouched


def test_a_run_whose_owner_is_gone_stops() -> None:
    recorder = _Recorder()
    strategy = _strategy(recorder, min_regions=1, owner_alive=lambda: False)
    with pytest.raises(RoundFailed, match="gone"):
        strategy.aggregate_fit(1, [(None, _fit_res(0, 1.0))], [])
    assert recorder.fits == []
