"""The catalogue of cloud regions: where each is, and its grid's carbon.

The first regions are named cloud regions whose annual mean carbon intensity is a public
figure; every region past them is SYNTHETIC (drawn from a fixed generator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedmc_flwr.sim.cloud_carbon import CLOUD_CARBON

CATALOGUE_SEED = 20261129
"""Seed of the synthetic regions and of the estate's instance mix (fixed for all seeds)."""


@dataclass(frozen=True)
class Region:
    """One cloud region of the catalogue."""

    name: str
    lat: float
    lon: float
    carbon_g_per_kwh: float
    """Annual mean grid carbon intensity (location-based)."""
    carbon_swing: float
    """Relative amplitude of the daily carbon cycle (flat for hydro/nuclear grids)."""
    price_usd_per_hour: float
    """Hourly price of a speed-1.0 node (synthetic)."""
    crowding: float
    """How busy other tenants keep the region, relative to the configured background load."""
    speed_bias: float
    """Log-speed shift of the region's instance mix (older, slower hardware < 0)."""


# Carbon means come from the generated table (`cloud_carbon.py`: Google Cloud's 2023
# figures via codecarbon 3.3.2); everything else in these rows is synthetic.
NAMED_REGIONS: tuple[Region, ...] = (
    Region("us-east1", 33.20, -80.01, CLOUD_CARBON["us-east1"], 0.15, 0.036, 1.45, 0.15),
    Region("europe-west9", 48.86, 2.35, CLOUD_CARBON["europe-west9"], 0.05, 0.052, 0.90, 0.0),
    Region(
        "northamerica-northeast1",
        45.50,
        -73.57,
        CLOUD_CARBON["northamerica-northeast1"],
        0.02,
        0.047,
        1.20,
        -0.35,
    ),
    Region(
        "europe-central2", 52.23, 21.01, CLOUD_CARBON["europe-central2"], 0.20, 0.043, 1.10, 0.0
    ),
)


def _synthetic_regions(count: int) -> list[Region]:
    rng = np.random.default_rng(CATALOGUE_SEED)
    regions = []
    for k in range(count):
        regions.append(
            Region(
                name=f"synthetic-{k + 1:02d}",
                lat=float(rng.uniform(-40, 60)),
                lon=float(rng.uniform(-180, 180)),
                carbon_g_per_kwh=float(np.exp(rng.uniform(np.log(20), np.log(700)))),
                carbon_swing=float(rng.uniform(0.02, 0.25)),
                price_usd_per_hour=float(rng.uniform(0.036, 0.058)),
                crowding=float(rng.uniform(0.7, 1.4)),
                speed_bias=float(rng.uniform(-0.3, 0.2)),
            )
        )
    return regions


def region_catalogue(count: int) -> list[Region]:
    """The first `count` regions: the named ones, then synthetic ones."""
    named = list(NAMED_REGIONS[:count])
    return named + _synthetic_regions(count - len(named))
