"""The aggregation rules' registry: every name the config allows is implemented, and the
server picks a rule's combination, its selection and its need of the server's score
through the registry alone, so a new rule is an entry there (docs/extending.md)."""

from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np
import pytest
from conftest import SMALL_DEMO

from fedmc_flwr import choices
from fedmc_flwr.config import (
    ConfigError,
    ExperimentConfig,
    FederationConfig,
    allowed_values,
    load_config,
)
from fedmc_flwr.federation import aggregation
from fedmc_flwr.federation.acceptance import rule_score
from fedmc_flwr.federation.aggregation import (
    AGGREGATIONS,
    RegionUpdate,
    Rule,
    Screening,
    Selection,
    aggregate,
    screen,
    steps_weighted,
)


def test_the_registry_implements_exactly_the_names_the_config_allows() -> None:
    """The config reads the names and breakdown points from the registry
    (`choices.AGGREGATIONS`), and `AGGREGATIONS`' docstring explains every rule."""
    assert allowed_values(FederationConfig, "aggregation") == tuple(AGGREGATIONS)
    breakdowns = {name: rule.breakdown for name, rule in AGGREGATIONS.items()}
    assert choices.AGGREGATIONS.facts() == breakdowns
    source = inspect.getsource(aggregation)
    explained = source.split("AGGREGATIONS: dict[str, Rule] = {", 1)[1].split('"""')[1]
    assert [name for name in AGGREGATIONS if f"'{name}'" not in explained] == []


def _update(region: int, value: float, steps: int = 10) -> RegionUpdate:
    network = [np.full(3, value, np.float32)]
    moments = [np.array(4.0), np.zeros(2), np.ones(2)]
    return RegionUpdate(region, network + moments, steps)


PREVIOUS = [np.zeros(3, np.float32), np.array(4.0), np.zeros(2), np.ones(2)]
UPDATES = [_update(0, 1.0, 10), _update(1, 2.0, 30), _update(2, 9.0, 10)]


@pytest.mark.parametrize(
    ("rule", "expected"),
    [("mean", 3.2), ("median", 2.0), ("trimmed-mean", 2.0), ("multi-krum", 1.75)],
)
def test_each_rule_combines_as_its_entry_says(rule: str, expected: float) -> None:
    federation = FederationConfig(aggregation=rule, byzantine=1, trim_fraction=0.34)
    kept, _ = screen(UPDATES, PREVIOUS, federation, statistics=1)
    out = aggregate(kept, PREVIOUS, federation, statistics=1)
    np.testing.assert_allclose(out[0], expected, rtol=1e-6)


def test_a_rule_is_an_entry_in_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule that keeps only the region with the most steps, added by its entry alone: the
    server applies it, and the config accepts its name and enforces its breakdown point."""

    def busiest(kept: list[RegionUpdate], screening: Screening) -> Selection:
        top = max(kept, key=lambda u: u.num_examples)
        return [top], {u.region: "not the busiest" for u in kept if u is not top}

    rule = Rule(steps_weighted, busiest, breakdown=lambda regions, _, __: regions // 3)
    monkeypatch.setitem(AGGREGATIONS, "busiest", rule)
    federation = FederationConfig(aggregation="busiest")
    kept, rejected = screen(UPDATES, PREVIOUS, federation, statistics=1)
    assert [u.region for u in kept] == [1]
    assert rejected == {0: "not the busiest", 2: "not the busiest"}
    np.testing.assert_array_equal(aggregate(kept, PREVIOUS, federation, 1)[0], 2.0)
    chosen = ["federation.aggregation=busiest", "world.regions=3"]
    assert load_config(SMALL_DEMO, chosen).federation.aggregation == "busiest"
    with pytest.raises(ConfigError, match="expected at most 1, its breakdown point"):
        load_config(SMALL_DEMO, [*chosen, "federation.byzantine=2"])


def test_the_servers_score_is_built_only_for_a_rule_that_needs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = []
    monkeypatch.setattr(
        "fedmc_flwr.federation.acceptance.server_score", lambda cfg: built.append(cfg) or len
    )
    cfg = ExperimentConfig()
    for name, rule in AGGREGATIONS.items():
        judged = replace(cfg, federation=replace(cfg.federation, aggregation=name))
        assert (rule_score(judged) is not None) == rule.needs_score
    assert len(built) == sum(rule.needs_score for rule in AGGREGATIONS.values()) >= 1


def test_a_rule_that_needs_the_score_refuses_to_run_without_it() -> None:
    with pytest.raises(ValueError, match="needs the server's score"):
        screen(UPDATES, PREVIOUS, FederationConfig(aggregation="acceptance"), statistics=1)
