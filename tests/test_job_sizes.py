"""The job size laws (`world.job_size`): each has the configured mean and shape, and each
draws the same arrivals, so two worlds that differ only in their sizes meet the same jobs
at the same times."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CONF

from fedmc_flwr.config import ConfigError, load_config
from fedmc_flwr.sim.world import MultiCloudSim

ENVS = 64
STEPS = 1500
OPTIMUM = CONF / "optimum.yaml"


def _sizes_and_clocks(*overrides: str) -> tuple[np.ndarray, np.ndarray, float]:
    """Every waiting job's true size and arrival time [STEPS, ENVS] in conf/optimum.yaml's
    one-region world with `overrides`, each job sent to node 0; and the mean size in s."""
    cfg = load_config(OPTIMUM, overrides)
    sim = MultiCloudSim(cfg.world, cfg.reward, np.zeros(ENVS, dtype=np.int64))
    sim.reset(np.arange(ENVS) + 11)
    sizes, clocks = np.empty((STEPS, ENVS)), np.empty((STEPS, ENVS))
    for k in range(STEPS):
        sizes[k], clocks[k] = sim.state.size, sim.state.t
        sim.step(np.zeros(ENVS, dtype=np.int64))
    return sizes, clocks, cfg.world.mean_service_ms / 1000.0


@pytest.mark.parametrize("sigma", [0.5, 1.5])
def test_lognormal_sizes_have_the_configured_mean_and_sigma(sigma: float) -> None:
    """log(size) is normal with the configured sigma and the mean log(m) - sigma^2 / 2
    that keeps the sizes' mean at m (96,000 jobs: each within ~5 standard errors)."""
    sizes, _, mean_s = _sizes_and_clocks(
        "world.job_size=lognormal", f"world.lognormal_sigma={sigma}"
    )
    logs = np.log(sizes).ravel()
    n = logs.size
    assert abs(logs.std() - sigma) < 5 * sigma / np.sqrt(2 * n)
    assert abs(logs.mean() - (np.log(mean_s) - sigma**2 / 2)) < 5 * sigma / np.sqrt(n)
    # The mean of the sizes themselves: its standard error is m * sqrt(e^(sigma^2) - 1) / sqrt(n).
    cv = np.sqrt(np.expm1(sigma**2))
    assert abs(sizes.mean() / mean_s - 1.0) < 5 * cv / np.sqrt(n)
    # Normal in log: the share of jobs more than one sigma above the median is 15.9%.
    above = (logs > np.log(mean_s) - sigma**2 / 2 + sigma).mean()
    assert abs(above - 0.1587) < 0.01


@pytest.mark.parametrize("law", ["pareto", "lognormal"])
def test_every_size_law_draws_the_same_arrivals(law: str) -> None:
    """The heavy-tailed laws take one uniform of the stream per job, as the exponential
    does: the arrival clock of every job is the same; the sizes are not."""
    exp_sizes, exp_clocks, _ = _sizes_and_clocks()
    sizes, clocks, _ = _sizes_and_clocks(f"world.job_size={law}")
    np.testing.assert_array_equal(clocks, exp_clocks)
    assert not np.array_equal(sizes, exp_sizes)


@pytest.mark.parametrize("sigma", ["0", "-1", "3.5"])
def test_a_lognormal_sigma_out_of_range_is_refused(sigma: str) -> None:
    with pytest.raises(ConfigError, match=r"world\.lognormal_sigma"):
        load_config(OPTIMUM, ["world.job_size=lognormal", f"world.lognormal_sigma={sigma}"])
