"""The non-IID settings: per-region multipliers reach the world's spec, and bad lists are
config errors that name the key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedmc_flwr.config import ConfigError, load_config
from fedmc_flwr.sim.signals import build_spec

CONF = Path(__file__).resolve().parents[1] / "conf"


def _spec(name: str, overrides: list[str] | None = None):
    cfg = load_config(CONF / f"{name}.yaml", overrides or [])
    return build_spec(cfg.world, cfg.reward)


def test_the_settings_change_only_what_they_name() -> None:
    base = _spec("small_demo")
    balanced = _spec("noniid_balanced")
    busy = _spec("noniid_busy_region")
    skewed = _spec("noniid_skewed_prices_carbon")
    assert np.allclose(balanced.arrival_rate, base.arrival_rate.max())
    assert np.allclose(busy.arrival_rate / busy.arrival_rate[0], [1, 1 / 3, 1 / 3])
    assert busy.arrival_rate[0] == pytest.approx(base.arrival_rate.max())
    assert np.allclose(skewed.price_mean / base.price_mean, [0.5, 1.5, 2.0])
    assert np.allclose(skewed.carbon_mean / base.carbon_mean, [1.3, 1.0, 1.0])
    for spec in (balanced, busy):
        assert np.array_equal(spec.price_mean, base.price_mean)
        assert np.array_equal(spec.carbon_mean, base.carbon_mean)
    assert np.array_equal(skewed.arrival_rate, base.arrival_rate)


@pytest.mark.parametrize(
    "override",
    ["world.region_load=[1,2]", "world.region_price=[1,0,1]", "world.region_carbon=[1,1,-2]"],
)
def test_a_bad_per_region_list_is_a_config_error(override: str) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key} = .* expected 3 numbers > 0"):
        load_config(CONF / "small_demo.yaml", [override])
