"""The joint arena: the superposed world (`MultiCloudSim(joint=True)`), each job routed by
its own region's policy, and the sweep's arena summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_DEMO
from test_sweep import write_sweep

from fedmc_flwr.analysis.report import collect, compare
from fedmc_flwr.config import load_config
from fedmc_flwr.experiments import arena
from fedmc_flwr.experiments.sweep import run_sweep, summarise_arena, summarise_sweep
from fedmc_flwr.results import read_per_seed
from fedmc_flwr.seeds import arena_seeds, heldout_seeds
from fedmc_flwr.sim.world import MultiCloudSim
from fedmc_flwr.sweeps import load_sweep


def rollout(sim: MultiCloudSim, seeds: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Each job to its first valid node (no draws of its own, so nothing depends on the
    batch), for `steps` jobs: each job's ingress region and reward, [steps, B] each."""
    obs, mask = sim.reset(seeds)
    ingress, rewards = np.empty((steps, len(seeds)), np.int64), np.empty((steps, len(seeds)))
    for k in range(steps):
        ingress[k] = sim.state.ingress
        assert (obs[:, sim.layout.region("local")].argmax(axis=1) == sim.state.ingress).all()
        result = sim.step(mask.argmax(axis=1))
        rewards[k] = result.reward
        obs, mask = result.obs, result.mask
    return ingress, rewards


def test_each_job_comes_from_a_region_in_proportion_to_its_workload() -> None:
    cfg = load_config(SMALL_DEMO, ["world.region_load=[1.0,0.5,0.25]", "world.burstiness=0"])
    sim = MultiCloudSim(cfg.world, cfg.reward, np.zeros(32, np.int64), joint=True)
    ingress, _ = rollout(sim, np.arange(32, dtype=np.uint64), 1500)
    shares = np.bincount(ingress.ravel(), minlength=3) / ingress.size
    expected = sim.spec.arrival_rate / sim.spec.arrival_rate.sum()
    np.testing.assert_allclose(expected, [4 / 7, 2 / 7, 1 / 7], rtol=1e-12)
    np.testing.assert_allclose(shares, expected, atol=0.02)


def test_the_arena_offers_the_estate_what_the_busiest_region_offers_alone() -> None:
    cfg = load_config(SMALL_DEMO, ["world.region_load=[0.5,1.0,0.8]"])
    alone = MultiCloudSim(cfg.world, cfg.reward, [0])
    joint = MultiCloudSim(cfg.world, cfg.reward, [0], joint=True)
    rates = joint._statics.arrival_rate
    assert rates.sum() == pytest.approx(alone.spec.arrival_rate[1], rel=1e-12)
    np.testing.assert_allclose(rates / rates.sum(), np.array([0.5, 1.0, 0.8]) / 2.3, rtol=1e-12)
    np.testing.assert_array_equal(alone._statics.arrival_rate, alone.spec.arrival_rate)


def test_a_joint_world_depends_on_its_own_seed_only() -> None:
    cfg = load_config(SMALL_DEMO)
    seeds = np.array([11, 12, 13, 14], dtype=np.uint64)
    batch = rollout(MultiCloudSim(cfg.world, cfg.reward, [0] * 4, joint=True), seeds, 300)
    alone = rollout(MultiCloudSim(cfg.world, cfg.reward, [2], joint=True), seeds[2:3], 300)
    np.testing.assert_array_equal(batch[0][:, 2], alone[0][:, 0])
    np.testing.assert_array_equal(batch[1][:, 2], alone[1][:, 0])


class Recorder:
    """A policy that remembers whose jobs it was asked about and picks a fixed valid node."""

    name = "recorder"

    def __init__(self, layout) -> None:
        self.layout = layout
        self.seen: list[np.ndarray] = []

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        self.seen.append(obs[:, self.layout.region("local")].argmax(axis=1))
        return mask.argmax(axis=1)


def test_each_job_is_routed_by_its_own_regions_policy() -> None:
    cfg = load_config(SMALL_DEMO, ["eval.seeds=6", "eval.steps=200"])
    policies: list[Recorder] = []

    def make(sim: MultiCloudSim) -> list[Recorder]:
        policies.extend(Recorder(sim.layout) for _ in range(sim.num_regions))
        return policies

    rows = arena.evaluate_arena(make, cfg, "recorder")
    for region, policy in enumerate(policies):
        seen = np.concatenate(policy.seen)
        assert len(seen) > 100 and (seen == region).all()
    assert sum(len(np.concatenate(p.seen)) for p in policies) == 6 * 200
    assert [row["eval_seed"] for row in rows] == list(arena_seeds("test", 6))
    assert {row["client"] for row in rows} == {"arena"} and {row["jobs"] for row in rows} == {200}


def test_arena_worlds_are_none_of_the_regions() -> None:
    arena_worlds = set(arena_seeds("test", 1000).tolist())
    for region in range(256):
        assert not arena_worlds & set(heldout_seeds("test", region, 1000).tolist())


@pytest.fixture(scope="module")
def arena_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = write_sweep(tmp_path_factory.mktemp("arena"))
    sweep = load_sweep(path)
    run_sweep(sweep, progress=False)
    summarise_sweep(sweep)
    summarise_arena(sweep, [0, 1], "sed")
    return path


@pytest.mark.slow
def test_the_sweeps_arena_summary_pairs_each_learner_with_the_baseline(arena_sweep: Path) -> None:
    sweep = load_sweep(arena_sweep)
    summary = pd.read_csv(sweep.out_dir / "arena.csv").set_index("policy")
    assert {"ppo-centralised", "ppo-local", "sed", "myopic-oracle"} <= set(summary.index)
    frame = read_per_seed(sweep.out_dir / "arena" / arena.ARENA_FILE)
    assert set(frame["policy"]) >= {"sed", "random", "myopic-oracle"}
    assert (frame["round"] == 0).all()
    cells = pd.concat(read_per_seed(c.out_dir / arena.ARENA_FILE) for c in sweep.cells)
    assert set(cells["policy"]) == {"ppo-centralised", "ppo-local"}
    assert (cells["client"] == "arena").all() and len(cells) == 4 * 3
    policies = collect(pd.concat([frame.assign(source="d"), cells.assign(source="c")]))
    diff, over = compare(policies["ppo-local"], policies["sed"], "reward")
    assert summary.loc["ppo-local", "d_reward"] == pytest.approx(diff.mean, rel=1e-12)
    assert over == "training and eval seeds"
    markdown = (sweep.out_dir / "arena.md").read_text()
    assert "| ppo-local |" in markdown and "reward alone" in markdown


@pytest.mark.slow
def test_a_cells_arena_rows_are_kept_and_reproduced(arena_sweep: Path) -> None:
    sweep = load_sweep(arena_sweep)
    cell = next(c for c in sweep.cells if c.kind == "local")
    path = cell.out_dir / arena.ARENA_FILE
    before, stamp = path.read_bytes(), path.stat().st_mtime_ns
    summarise_arena(sweep, [0, 1], "sed")
    assert path.stat().st_mtime_ns == stamp  # not evaluated again
    path.unlink()
    summarise_arena(sweep, [0, 1], "sed")
    assert path.read_bytes() == before


@pytest.mark.slow
def test_local_policies_act_for_their_own_region_only(arena_sweep: Path) -> None:
    """Swapping two regions' local policies changes the arena: each serves its own jobs."""
    sweep = load_sweep(arena_sweep)
    cell = next(c for c in sweep.cells if c.kind == "local")
    make = arena.trained_policies(cell.cfg, cell.out_dir, "local", "ppo-local")
    own = [row["reward"] for row in arena.evaluate_arena(make, cell.cfg, "ppo-local")]
    swapped = arena.evaluate_arena(lambda sim: make(sim)[::-1], cell.cfg, "ppo-local")
    saved = read_per_seed(cell.out_dir / arena.ARENA_FILE)["reward"].to_numpy()
    np.testing.assert_array_equal(own, saved)
    assert own != [row["reward"] for row in swapped]
