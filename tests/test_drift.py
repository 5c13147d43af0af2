"""The round's client drift (`federation/drift.py`) on updates whose figures are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedmc_flwr.federation.drift import update_drift


def _net(*values: float) -> list[np.ndarray]:
    return [np.array(values[:1], np.float32), np.array(values[1:], np.float32)]


def test_regions_that_move_alike_have_no_spread_and_lose_nothing() -> None:
    drift = update_drift(_net(0, 0), [_net(3, 4), _net(3, 4)])
    assert drift["mean_update_norm"] == pytest.approx(5.0)
    assert drift["spread"] == 0.0 and drift["shrink"] == pytest.approx(1.0)


def test_updates_at_right_angles_keep_one_over_root_two_of_their_length() -> None:
    """(1, 0) and (0, 1) from the origin: mean (0.5, 0.5), norm 1/sqrt(2); each update is
    1/sqrt(2) from the mean, so the spread is 1 and the mean keeps 1/sqrt(2) of the work."""
    drift = update_drift(_net(1, 1), [_net(2, 1), _net(1, 2)])
    assert drift["shrink"] == pytest.approx(1 / math.sqrt(2))
    assert drift["spread"] == pytest.approx(1.0)
    assert drift["regions"] == 2


def test_opposite_updates_cancel() -> None:
    drift = update_drift(_net(0, 0), [_net(1, 0), _net(-1, 0)])
    assert drift["shrink"] == 0.0 and math.isnan(drift["spread"])
    with pytest.raises(ValueError, match="no region updates"):
        update_drift(_net(0, 0), [])
