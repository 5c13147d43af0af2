"""The aggregation rules' registry: every name the config allows is implemented, and the
server picks a rule's combination, its selection and its need of the server's score
through the registry alone, so a new rule is an entry there (docs/extending.md)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fedmc_flwr.config import BREAKDOWN_POINTS, ExperimentConfig, FederationConfig, allowed_values
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
    assert list(AGGREGATIONS) == list(allowed_values(FederationConfig, "aggregation"))
    assert list(AGGREGATIONS) == list(BREAKDOWN_POINTS)


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
    """A rule that keeps only the region with the most steps, added by its entry alone."""

    def busiest(kept: list[RegionUpdate], screening: Screening) -> Selection:
        top = max(kept, key=lambda u: u.num_examples)
        return [top], {u.region: "not the busiest" for u in kept if u is not top}

    monkeypatch.setitem(AGGREGATIONS, "busiest", Rule(steps_weighted, busiest))
    federation = FederationConfig(aggregation="busiest")
    kept, rejected = screen(UPDATES, PREVIOUS, federation, statistics=1)
    assert [u.region for u in kept] == [1]
    assert rejected == {0: "not the busiest", 2: "not the busiest"}
    np.testing.assert_array_equal(aggregate(kept, PREVIOUS, federation, 1)[0], 2.0)


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
