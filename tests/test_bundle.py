"""A message's arrays as one bundle: the same arrays back, bit for bit, and nothing else."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import FitIns, ndarrays_to_parameters
from flwr.compat.common.recorddict_compat import fitins_to_recorddict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fedmc_flwr.config import learner_plan, load_config
from fedmc_flwr.federation.bundle import MAGIC, bundle, unbundle
from fedmc_flwr.policies.ppo import PPOLearner

MIXED = [
    np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    np.array([np.nan, -0.0, np.inf, 1e-310]),  # float64, a subnormal and a signed zero
    np.array(5, dtype=np.int64),  # 0-d
    np.zeros((0, 3), dtype=np.float32),  # empty
    np.array([True, False]),
    np.arange(6, dtype=np.uint64)[::2],  # not contiguous
]


def test_arrays_come_back_with_their_dtype_shape_and_bits() -> None:
    (one,) = bundle(MIXED)
    assert one.dtype == np.uint8 and one.ndim == 1
    back = unbundle([one])
    assert len(back) == len(MIXED)
    for a, b in zip(MIXED, back, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
        assert b.flags.writeable
    assert unbundle(bundle([])) == []


def test_a_learners_weights_travel_as_a_few_flower_objects(tmp_path) -> None:
    """Flower fetches each object of a message with a request of its own."""
    cfg = load_config("conf/small_demo.yaml", [f"results_dir={tmp_path}"])
    weights = PPOLearner(learner_plan(cfg, [0]), seed=0).get_weights()

    def objects(arrays: list[np.ndarray]) -> int:
        ins = FitIns(ndarrays_to_parameters(arrays), {})
        return len(get_all_nested_objects(fitins_to_recorddict(ins, keep_input=True)))

    assert len(weights) == 24
    assert objects(bundle(weights)) == 5 < objects(weights) / 6


def _bad(data: bytes) -> list[np.ndarray]:
    return [np.frombuffer(data, dtype=np.uint8)]


def _with_header(header: bytes, body: bytes = b"") -> list[np.ndarray]:
    return _bad(MAGIC + len(header).to_bytes(8, "little") + header + body)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        (MIXED[:2], "2 arrays where one bundle"),
        ([np.zeros(4, dtype=np.float32)], "1-D uint8"),
        (_bad(b"hello"), "no header"),
        (_with_header(b"not json"), "header is unreadable"),
        (_with_header(b'[["<f4", [2]]]', b"\x00" * 4), "ends before its arrays"),
        (_with_header(b'[["<f4", [1]]]', b"\x00" * 8), "4 bytes beyond"),
        (_with_header(b'[["|O", [1]]]', b"\x00" * 8), "may not hold"),
        (_with_header(b'[["<f4", [-1]]]'), "may not hold"),
        (_with_header(b"[1, 2]"), "header is unreadable"),
    ],
)
def test_anything_but_a_bundle_is_refused_with_what_is_wrong(arrays, message) -> None:
    with pytest.raises(ValueError, match=message):
        unbundle(arrays)


def test_object_arrays_are_never_bundled() -> None:
    with pytest.raises(ValueError, match="dtype object"):
        bundle([np.array([{}], dtype=object)])
