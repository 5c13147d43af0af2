"""What bench/bench_federation.py reads from a run, and how many virtual clients the
simulation engine runs at once (`runner.ray_cpus`): without Flower."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, SMALL_DEMO

from fedmc_flwr.config import load_config
from fedmc_flwr.federation.runner import SimulationEngine, ray_cpus

sys.path.insert(0, str(REPO / "bench"))
from bench_federation import more_rounds, rounds_of, summary


def _row(rnd: int, phase: str, client: str, wall: float) -> dict[str, str]:
    return {"round": str(rnd), "phase": phase, "client": client, "wall_time_s": str(wall)}


def test_a_rounds_overhead_is_its_wall_time_less_its_regions_training_spread_over_the_workers() -> (
    None
):
    rows = [
        _row(1, "train", "a", 3.0),
        _row(1, "train", "b", 1.0),
        _row(1, "train", "c", 2.0),
        _row(1, "train", "all", 9.0),
        _row(1, "eval", "all", 1.0),
        _row(2, "train", "a", 2.0),
        _row(2, "train", "b", 2.0),
        _row(2, "train", "c", 2.0),
        _row(2, "train", "all", 4.5),
        _row(2, "eval", "all", 0.5),
    ]
    first, second = rounds_of(rows, workers=2)
    assert (first.wall_s, first.training_s, first.ideal_s, first.eval_s) == (10.0, 6.0, 3.0, 1.0)
    assert first.overhead_s == 7.0
    assert (second.wall_s, second.ideal_s, second.overhead_s) == (5.0, 3.0, 2.0)
    later = summary([first, second])  # round 1 carries the start-up: left out
    assert later["round_s"] == 5.0 and later["overhead_per_ideal"] == pytest.approx(2 / 3, abs=1e-3)


def test_four_times_the_rounds_train_the_same_total_steps() -> None:
    demo = load_config(SMALL_DEMO)
    assert more_rounds(demo) == [
        f"train.rounds={4 * demo.train.rounds}",
        f"train.steps_per_round={demo.train.steps_per_round // 4}",
    ]
    with pytest.raises(SystemExit, match="does not divide by 4"):
        more_rounds(load_config(SMALL_DEMO, ["train.steps_per_round=2001"]))


@pytest.mark.parametrize(
    ("nodes", "cores", "cpus"),
    [
        (1, 2, 2),  # fewer nodes than cores: as many CPUs as cores, as before
        (2, 2, 2),
        (3, 2, 3),  # two at a time would leave a core idle half the round
        (4, 2, 2),
        (5, 2, 3),  # 3 then 2: every wave fills both cores
        (7, 2, 4),  # 3 would leave 1 alone at the end
        (10, 2, 2),
        (100, 2, 2),
        (20, 16, 20),  # 16 then 4 would leave 12 cores idle
        (32, 16, 16),
    ],
)
def test_nodes_that_do_not_share_out_over_the_cores_get_as_many_actors_as_fill_them(
    nodes: int, cores: int, cpus: int
) -> None:
    assert ray_cpus(nodes, cores) == cpus


def test_rays_cpu_count_is_left_to_a_cluster_of_ones_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert "init-args-num-cpus=" in (SimulationEngine(3).federation_config() or "")
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")  # ray.init refuses a CPU count there
    assert "init-args-num-cpus" not in (SimulationEngine(3).federation_config() or "")
