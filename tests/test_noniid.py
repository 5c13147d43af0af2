"""The non-IID settings: per-region multipliers reach the world's spec (and, for outages,
the world's rollouts), and bad lists are config errors that name the key."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import CONF

from fedmc_flwr.config import ConfigError, ExperimentConfig, load_config
from fedmc_flwr.sim.signals import build_spec
from fedmc_flwr.sim.world import MultiCloudSim


def _spec(name: str, overrides: list[str] | None = None):
    cfg = load_config(CONF / f"{name}.yaml", overrides or [])
    return build_spec(cfg.world, cfg.reward)


def test_the_settings_change_only_what_they_name() -> None:
    base = _spec("small_demo")
    balanced = _spec("noniid_balanced")
    busy = _spec("noniid_busy_region")
    skewed = _spec("noniid_skewed_prices_carbon")
    outages = _spec("noniid_outages")
    assert np.allclose(balanced.arrival_rate, base.arrival_rate.max())
    assert np.allclose(busy.arrival_rate / busy.arrival_rate[0], [1, 1 / 3, 1 / 3])
    assert busy.arrival_rate[0] == pytest.approx(base.arrival_rate.max())
    assert np.allclose(skewed.price_mean / base.price_mean, [0.5, 1.5, 2.0])
    assert np.allclose(skewed.carbon_mean / base.carbon_mean, [1.3, 1.0, 1.0])
    assert np.array_equal(outages.region_outage, [1.0, 1.0, 10.0])
    for spec in (balanced, busy, outages):
        assert np.array_equal(spec.price_mean, base.price_mean)
        assert np.array_equal(spec.carbon_mean, base.carbon_mean)
    for spec in (skewed, outages):
        assert np.array_equal(spec.arrival_rate, base.arrival_rate)
    for spec in (base, balanced, busy, skewed):
        assert np.array_equal(spec.region_outage, np.ones(3))


@pytest.mark.parametrize(
    "override",
    [
        "world.region_load=[1,2]",
        "world.region_price=[1,0,1]",
        "world.region_carbon=[1,1,-2]",
        "world.region_outage=[1,1]",
        "world.region_outage=[1,0,1]",
        "world.region_outage=[1,1,.inf]",
    ],
)
def test_a_bad_per_region_list_is_a_config_error(override: str) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key} = .* expected 3 numbers > 0"):
        load_config(CONF / "small_demo.yaml", [override])


def test_outage_multipliers_must_keep_the_outage_chance_a_probability() -> None:
    """Rate 0.3 with a mean multiplier of 4 would ask for an outage in 120% of jobs."""
    with pytest.raises(ConfigError) as caught:
        load_config(
            CONF / "small_demo.yaml", ["world.outage_rate=0.3", "world.region_outage=[1,1,10]"]
        )
    message = str(caught.value)
    assert "\n" not in message
    assert "world.region_outage = [1.0, 1.0, 10.0] is not allowed" in message
    load_config(CONF / "small_demo.yaml", ["world.outage_rate=0.3", "world.region_outage=[1,1,1]"])


def _down_share(cfg: ExperimentConfig, envs: int, steps: int) -> np.ndarray:
    """Share of node-time each region's nodes spend down, read from the observations' up
    flags, over `envs` worlds spread over the ingress regions (shortest-queue dispatch)."""
    sim = MultiCloudSim(cfg.world, cfg.reward, np.arange(envs) % cfg.world.regions)
    obs, mask = sim.reset(np.arange(envs))
    down, total = np.zeros(sim.num_actions), 0.0
    for _ in range(steps):
        start, up = sim.state.t.copy(), obs[:, sim.layout.node("up")]
        result = sim.step(np.where(mask, -obs[:, sim.layout.node("queue")], -np.inf).argmax(axis=1))
        down += ((1.0 - up) * (sim.state.t - start)[:, None]).sum(axis=0)
        total += float((sim.state.t - start).sum())
        obs, mask = result.obs, result.mask
    return (down / total).reshape(sim.num_regions, -1).mean(axis=1)


def test_frequent_outages_take_down_one_region_only() -> None:
    """The nodes of the region at 10x spend several times more of their time down than
    any region of either setting; the other two regions stay where small_demo has them."""
    base = _down_share(load_config(CONF / "small_demo.yaml"), 60, 1000)
    outages = _down_share(load_config(CONF / "noniid_outages.yaml"), 60, 1000)
    assert outages[2] > 4 * max(base.max(), outages[:2].max())
    assert outages[:2].max() < 2 * base.max()
    assert outages[2] < 0.6  # frequent, but most of the region stays up


def _rollout(cfg: ExperimentConfig, region_outage: list[float]) -> dict[str, np.ndarray]:
    """Every observation, mask, reward and metric of 3 worlds over 1000 shortest-queue jobs,
    with outages 25x small_demo's (0.05 per job) so that many happen; `down` counts the
    observations that show each node down."""
    world = replace(cfg.world, outage_rate=0.05, region_outage=region_outage)
    sim = MultiCloudSim(world, cfg.reward, [0, 1, 2])
    obs, mask = sim.reset([3, 4, 5])
    seen: dict[str, list[np.ndarray]] = {"obs": [], "mask": [], "reward": [], "metrics": []}
    for _ in range(1000):
        seen["obs"].append(obs)
        seen["mask"].append(mask)
        result = sim.step(np.where(mask, -obs[:, sim.layout.node("queue")], -np.inf).argmax(axis=1))
        obs, mask = result.obs, result.mask
        seen["reward"].append(result.reward)
        seen["metrics"].append(result.metrics)
    out = {name: np.array(arrays) for name, arrays in seen.items()}
    out["down"] = (out["obs"][:, :, sim.layout.node("up")] == 0).sum(axis=(0, 1))
    return out


def test_no_outage_multipliers_leave_every_result_as_it_was() -> None:
    """An empty list and all ones are the same world, draw for draw, and that world is the
    one from before per-region outages existed: its per-node down counts below were
    recorded with the single estate-wide rate."""
    cfg = load_config(CONF / "small_demo.yaml")
    empty, ones = _rollout(cfg, []), _rollout(cfg, [1.0, 1.0, 1.0])
    for name, arrays in empty.items():
        np.testing.assert_array_equal(arrays, ones[name], err_msg=name)
    recorded = [2352, 2295, 1669, 1863, 873, 2198, 1842, 591, 2182]
    recorded += [1914, 1225, 2097, 2608, 1500, 1959, 1570, 2076, 1378]
    assert empty["down"].tolist() == recorded
