"""Colluding regions: each robust rule's breakdown point is stated once
(`config.breakdown_point`) and a setting beyond it is refused in one line; the server's
acceptance check keeps out identical hostile updates that Multi-Krum, beyond its
breakdown point, would keep."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import TINY

from fedmc_flwr.config import ConfigError, FederationConfig, breakdown_point, load_config
from fedmc_flwr.federation.acceptance import server_score
from fedmc_flwr.federation.aggregation import (
    RegionUpdate,
    aggregate,
    hostile_assumed,
    multi_krum,
    screen,
)
from fedmc_flwr.federation.server_app import initial_weights

SMALL_DEMO = Path(__file__).resolve().parents[1] / "conf" / "small_demo.yaml"
DIM = 50
TARGET = np.ones(DIM)
"""Where a good network lies, in the toy score below."""


@pytest.mark.parametrize(
    ("rule", "regions", "most"),
    [
        ("median", 3, 0),
        ("median", 5, 1),
        ("median", 9, 2),
        ("median", 10, 2),
        ("trimmed-mean", 5, 1),
        ("trimmed-mean", 10, 2),
        ("multi-krum", 3, 0),
        ("multi-krum", 5, 1),
        ("multi-krum", 10, 3),
        ("acceptance", 5, 4),
    ],
)
def test_a_setting_beyond_the_rules_breakdown_point_is_refused_in_one_line(
    rule: str, regions: int, most: int
) -> None:
    assert breakdown_point(rule, regions, 0.2, 1) == most
    base = [f"world.regions={regions}", f"federation.aggregation={rule}"]
    load_config(SMALL_DEMO, [*base, f"federation.byzantine={most}"])
    with pytest.raises(ConfigError) as refused:
        load_config(SMALL_DEMO, [*base, f"federation.byzantine={most + 1}"])
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert f"federation.byzantine = {most + 1} is not allowed with aggregation {rule!r}" in message
    assert f"expected at most {most}, its breakdown point" in message


@pytest.mark.parametrize(
    ("rule", "regions", "most"),
    [
        ("median", 3, 0),
        ("median", 5, 1),
        ("median", 10, 2),
        ("trimmed-mean", 10, 2),
        ("multi-krum", 3, 0),
        ("multi-krum", 5, 1),
        ("multi-krum", 10, 3),
        ("acceptance", 5, 4),
        ("mean", 10, 0),
    ],
)
def test_byzantine_auto_is_the_rules_breakdown_point_for_the_rounds_regions(
    rule: str, regions: int, most: int
) -> None:
    cfg = load_config(SMALL_DEMO, [f"world.regions={regions}", f"federation.aggregation={rule}"])
    assert cfg.federation.byzantine == "auto"  # the default, never refused
    assert hostile_assumed(cfg.federation, regions) == most
    counted = load_config(SMALL_DEMO, [f"world.regions={regions}", "federation.byzantine=0"])
    assert hostile_assumed(counted.federation, regions) == 0  # a count is read as given


def test_byzantine_auto_counts_the_regions_that_replied() -> None:
    """Two identical copies among seven replies: 'auto' assumes two hostile regions and
    Multi-Krum keeps both out; among five replies (two regions late) it may assume one
    only, and says so (the copies, beyond that breakdown point, are kept)."""
    federation = FederationConfig(aggregation="multi-krum")
    updates, previous = _colluding(7, 2)
    kept, rejected = screen(updates, previous, federation, statistics=0)
    assert sorted(rejected) == [5, 6] and len(kept) == 5
    assert "federation.byzantine auto = 2" in rejected[5]
    _, rejected = screen(updates[2:], previous, federation, statistics=0)
    (why,) = rejected.values()
    assert "federation.byzantine auto = 1" in why


def _toy_score(weights: list[np.ndarray]) -> float:
    """Minus the distance of the network to TARGET: the server's worlds reward being near."""
    return -float(np.linalg.norm(weights[0].astype(np.float64) - TARGET))


def _colluding(regions: int, hostile: int) -> tuple[list[RegionUpdate], list[np.ndarray]]:
    """Honest regions step from 0 toward TARGET with noise; the last `hostile` send one
    identical sign-flipped x10 step."""
    rng = np.random.default_rng(3)
    previous = [np.zeros(DIM, np.float32)]
    updates = []
    for region in range(regions):
        step = 0.5 * TARGET + 0.03 * rng.normal(size=DIM)
        if region >= regions - hostile:
            step = -10 * 0.5 * TARGET
        updates.append(RegionUpdate(region, [step.astype(np.float32)], 100))
    return updates, previous


def test_identical_copies_fool_multi_krum_beyond_its_breakdown_point() -> None:
    """Why the config refuses byzantine 2 of 5 for Multi-Krum: the copies are each
    other's nearest neighbours and are kept."""
    updates, _ = _colluding(5, 2)
    chosen, _ = multi_krum(np.stack([u.weights[0] for u in updates]).astype(np.float64), 2)
    assert {3, 4} <= set(chosen)


@pytest.mark.parametrize("hostile", [1, 2, 3])
def test_the_acceptance_check_turns_away_identical_hostile_copies(hostile: int) -> None:
    updates, previous = _colluding(5, hostile)
    federation = FederationConfig(aggregation="acceptance", byzantine=hostile)
    kept, rejected = screen(updates, previous, federation, statistics=0, score=_toy_score)
    assert sorted(rejected) == list(range(5 - hostile, 5))
    assert all(why.startswith("server check: reward") for why in rejected.values())
    network = aggregate(kept, previous, federation, statistics=0)[0]
    assert _toy_score([network]) > _toy_score(previous)  # the honest step is taken


def test_the_servers_score_is_the_same_for_the_same_weights() -> None:
    cfg = load_config(TINY, ["federation.aggregation=acceptance", "federation.acceptance_steps=50"])
    score = server_score(cfg)
    weights = initial_weights(cfg)
    first = score(weights)
    assert np.isfinite(first) and score(weights) == first


def test_the_acceptance_check_turns_away_free_riders() -> None:
    """The global weights sent back score exactly as the previous network: the check
    alone would keep them, and they would drag the mean back; they go as under
    Multi-Krum."""
    updates, previous = _colluding(5, 0)
    updates[4] = RegionUpdate(4, [previous[0].copy()], 100)
    federation = FederationConfig(aggregation="acceptance")
    _, rejected = screen(updates, previous, federation, statistics=0, score=_toy_score)
    assert list(rejected) == [4] and rejected[4].startswith("free rider")
