"""Environment steps per second of MultiCloudSim.step, and of the Gymnasium single-env loop.

Batches of B = 1, 64, 1024 and 4096 worlds on small_demo and on a 20 x 100 estate, on one
thread (every learner's default) and on all cores, each timed warm (the kernel compiled
before the clock starts) over several repetitions, the median reported. In the same run,
the parallel kernel held to one thread, the reference for the serial kernel's speed per
thread (its idle OpenMP worker spins after every call, so sims on one thread use the
serial kernel; the `parallel_1_thread` row shows what that costs or saves). Actions are valid,
as a policy sends them: a uniformly random valid node per env, chosen outside the clock
from noise drawn beforehand, so the figure is the world's cost alone (a masked action would
take the worst-node path, which no trained policy takes). Also in the same run, the
single-env `step()` loop through `gymnasium.make` (time limit and checker wrappers included, as a
user gets it).

Prints a table, then one JSON line of the figures.

    python bench/bench_sim.py [--config conf/small_demo.yaml] [--reps 5] [--seconds 0.5]

A trace-driven world (`conf/trace_dc.yaml`: each region's arrival rate from a real
machine-usage series) is timed beside small_demo in the same run, one thread; its target
is 0.8x small_demo's steps/s. `--trace` times only these two, alternating in one process
over `--rounds` rounds at `--batch`, and prints their medians and ratio:

    python bench/bench_sim.py --trace [--rounds 7] [--batch 1024]

`--against REV` instead times this checkout's simulator beside git revision REV's, side by
side in one run: REV's `fedmc_flwr/` is exported to a temporary directory, and each round
runs one subprocess per tree, in alternating order, on the same batch (small_demo, one
thread, B=1024 by default). Machine noise then hits both trees alike; the table gives each
tree's median over the rounds and their ratio.

    python bench/bench_sim.py --against HEAD~1 [--rounds 7] [--batch 1024]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numba
import numpy as np

from fedmc_flwr.config import ExperimentConfig, load_config
from fedmc_flwr.sim import ENV_ID, kernel
from fedmc_flwr.sim.world import MultiCloudSim

REPO = Path(__file__).resolve().parents[1]
BATCHES = (1, 64, 1024, 4096)
TARGET_STEPS_PER_S = 2.5e6
"""On one thread, at B >= 1024."""
TARGET_RATIO = 50.0
TARGET_TRACE_RATIO = 0.8
"""A trace-driven world's steps/s over the synthetic world's, same batch, one thread."""
TRACE_CONFIG = REPO / "conf" / "trace_dc.yaml"
_NOISE_ROWS = 64
"""Pre-drawn noise rows, reused cyclically (drawing per step would time numpy's generator)."""


def _median_rate(run_once, reps: int) -> float:
    """Median over `reps` of steps per second; `run_once()` returns (steps, seconds)."""
    rates = []
    for _ in range(reps):
        steps, seconds = run_once()
        rates.append(steps / seconds)
    return statistics.median(rates)


def sim_steps_per_second(
    cfg: ExperimentConfig, envs: int, threads: int, reps: int, seconds: float
) -> float:
    """Median env steps per second of MultiCloudSim.step over a batch of `envs` worlds."""
    sim = MultiCloudSim(cfg.world, cfg.reward, np.arange(envs) % cfg.world.regions, threads)
    _, mask = sim.reset(np.arange(envs))
    noise = np.random.default_rng(0).random((_NOISE_ROWS, envs, sim.num_actions))
    sim.step(mask.argmax(axis=1))  # warm: compiled (or loaded from numba's cache) before timing
    start = time.perf_counter()
    sim.step(sim.mask.argmax(axis=1))
    per_call = time.perf_counter() - start
    calls = max(8, int(seconds / max(per_call, 1e-7)))

    def run_once() -> tuple[int, float]:
        mask, elapsed = sim.mask, 0.0
        for k in range(calls):
            actions = np.where(mask, noise[k % _NOISE_ROWS], -1.0).argmax(axis=1)
            start = time.perf_counter()
            mask = sim.step(actions).mask
            elapsed += time.perf_counter() - start
        return calls * envs, elapsed

    return _median_rate(run_once, reps)


@contextmanager
def parallel_kernel_on_one_thread() -> Iterator[None]:
    """Make one-thread sims call the parallel kernel (with numba held to one thread)."""
    serial = kernel.step_kernel
    kernel.step_kernel = kernel.step_kernel_parallel
    numba.set_num_threads(1)
    try:
        yield
    finally:
        kernel.step_kernel = serial


def gym_steps_per_second(cfg_path: Path, reps: int, seconds: float) -> float:
    """Median steps per second of the single-env `step()` loop built by `gymnasium.make`."""
    env = gym.make(ENV_ID, config=cfg_path)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(env.action_space.n, size=4096).tolist()
    env.step(actions[0])
    calls = max(1000, int(seconds * 50_000))

    def run_once() -> tuple[int, float]:
        start = time.perf_counter()
        for k in range(calls):
            _, _, terminated, truncated, _ = env.step(actions[k % len(actions)])
            if terminated or truncated:
                env.reset()
        return calls, time.perf_counter() - start

    return _median_rate(run_once, reps)


def export_revision(rev: str, into: Path) -> Path:
    """`fedmc_flwr/` as git revision `rev` has it, under `into`; returns `into`."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "fedmc_flwr"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def against(args: argparse.Namespace) -> None:
    """This checkout's steps/s beside revision `args.against`'s, alternating per round."""
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        trees = {"this checkout": REPO, args.against: export_revision(args.against, Path(tmp))}
        rates: dict[str, list[float]] = {name: [] for name in trees}
        worker_args = ["--config", str(args.config), "--batch", str(args.batch)]
        worker_args += ["--reps", str(args.reps), "--seconds", str(args.seconds)]
        for k in range(args.rounds):
            order = list(trees) if k % 2 == 0 else list(reversed(trees))
            for name in order:
                worker = subprocess.run(
                    [sys.executable, __file__, "--worker", *worker_args],
                    env={**os.environ, "PYTHONPATH": str(trees[name])},
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rates[name].append(float(worker.stdout.split()[-1]))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    ratio = medians["this checkout"] / medians[args.against]
    print(f"MultiCloudSim.step, env steps/s, B={args.batch}, one thread, {args.config.name}")
    print(f"(median of {args.rounds} alternating rounds, each the median of {args.reps} reps)")
    for name, rate in medians.items():
        spread = f"{min(rates[name]):,.0f} .. {max(rates[name]):,.0f}"
        print(f"{name:<20}{rate:>14,.0f}   range {spread}")
    print(f"this checkout / {args.against}: {ratio:.3f}")
    figures = {
        "bench": "sim_against",
        "unit": "env_steps_per_second",
        "against": args.against,
        "batch": args.batch,
        "rounds": args.rounds,
        "this_checkout": round(medians["this checkout"]),
        "revision": round(medians[args.against]),
        "ratio": round(ratio, 3),
        "load_average_1min": os.getloadavg()[0],
    }
    print(json.dumps(figures))


def trace_beside_synthetic(args: argparse.Namespace) -> None:
    """small_demo and trace_dc in one process, alternating round by round (machine noise
    hits both alike): each one's median steps/s over the rounds, and their ratio."""
    worlds = {"small_demo": load_config(args.config), "trace_dc": load_config(TRACE_CONFIG)}
    rounds: dict[str, list[float]] = {name: [] for name in worlds}
    for _ in range(args.rounds):
        for name, cfg in worlds.items():
            rounds[name].append(sim_steps_per_second(cfg, args.batch, 1, args.reps, args.seconds))
    medians = {name: statistics.median(r) for name, r in rounds.items()}
    ratio = medians["trace_dc"] / medians["small_demo"]
    print(f"MultiCloudSim.step, one thread, B={args.batch}, median of {args.rounds} rounds")
    for name, rate in medians.items():
        print(f"{name:<12}{rate:>14,.0f} env steps/s")
    met = "met" if ratio >= TARGET_TRACE_RATIO else "MISSED"
    print(f"trace_dc / small_demo: {ratio:.2f}x (target {TARGET_TRACE_RATIO}x: {met})")
    print(
        json.dumps(
            {
                "bench": "sim_trace",
                "batch": args.batch,
                "rounds": args.rounds,
                "load_average_1min": os.getloadavg()[0],
                **{name: round(rate) for name, rate in medians.items()},
                "trace_dc_vs_small_demo": round(ratio, 2),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "conf" / "small_demo.yaml")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per figure (median)")
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one repetition")
    parser.add_argument("--against", metavar="REV", help="time beside git revision REV")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (--against)")
    parser.add_argument("--batch", type=int, default=1024, help="batch size (--against)")
    parser.add_argument("--trace", action="store_true", help="time only small_demo beside trace_dc")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:  # one figure of `against`, from whichever tree PYTHONPATH names
        cfg = load_config(args.config)
        print(sim_steps_per_second(cfg, args.batch, 1, args.reps, args.seconds))
        return
    if args.against:
        against(args)
        return
    if args.trace:
        trace_beside_synthetic(args)
        return

    small = load_config(args.config)
    traced = load_config(TRACE_CONFIG)
    large = replace(small, world=replace(small.world, regions=20, nodes_per_region=100))
    worlds = {"small_demo": small, "20x100": large}
    shape = {name: f"{c.world.regions}x{c.world.nodes_per_region}" for name, c in worlds.items()}
    thread_counts = sorted({1, numba.config.NUMBA_NUM_THREADS})

    def by_batch(cfg: ExperimentConfig, threads: int) -> dict[int, float]:
        return {b: sim_steps_per_second(cfg, b, threads, args.reps, args.seconds) for b in BATCHES}

    rates = {
        (name, "parallel" if threads > 1 else "serial", threads): by_batch(cfg, threads)
        for name, cfg in worlds.items()
        for threads in thread_counts
    }
    with parallel_kernel_on_one_thread():
        for name, cfg in worlds.items():
            rates[(name, "parallel_1_thread", 1)] = by_batch(cfg, 1)
    rates[("trace_dc", "serial", 1)] = by_batch(traced, 1)
    shape["trace_dc"] = f"{traced.world.regions}x{traced.world.nodes_per_region}"
    gym_rate = gym_steps_per_second(args.config, args.reps, args.seconds)
    one_thread = max(rates[("small_demo", "serial", 1)][b] for b in BATCHES if b >= 1024)
    reference = max(rates[("small_demo", "parallel_1_thread", 1)][b] for b in BATCHES if b >= 1024)
    ratio = one_thread / gym_rate
    trace_best = max(rates[("trace_dc", "serial", 1)][b] for b in BATCHES if b >= 1024)
    trace_ratio = trace_best / one_thread

    print(f"MultiCloudSim.step, env steps/s (median of {args.reps}, warm, valid actions)")
    header = f"{'world':<12}{'shape':>8}{'compiled':>17}{'threads':>9}"
    print(header + "".join(f"{f'B={b}':>14}" for b in BATCHES))
    for (name, variant, threads), rate in rates.items():
        cells = "".join(f"{rate[b]:>14,.0f}" for b in BATCHES)
        print(f"{name:<12}{shape[name]:>8}{variant:>17}{threads:>9}{cells}")
    print(f"gymnasium.make single-env step() loop: {gym_rate:,.0f} steps/s")
    met = {True: "met", False: "MISSED"}
    print(
        f"small_demo, one thread, best of B>=1024: {one_thread:,.0f} steps/s (target "
        f"{TARGET_STEPS_PER_S:,.0f}: {met[one_thread >= TARGET_STEPS_PER_S]}); "
        f"{one_thread / reference:.2f}x the parallel kernel held to one thread; "
        f"{ratio:,.1f}x the Gymnasium loop "
        f"(target {TARGET_RATIO:.0f}x: {met[ratio >= TARGET_RATIO]}); trace_dc at "
        f"{trace_ratio:.2f}x (target {TARGET_TRACE_RATIO}x: "
        f"{met[trace_ratio >= TARGET_TRACE_RATIO]})"
    )
    figures = {
        "bench": "sim",
        "unit": "env_steps_per_second",
        "reps": args.reps,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_average_1min": os.getloadavg()[0],
        **{
            f"{name}_{variant}_t{threads}_B{b}": round(rate)
            for (name, variant, threads), by in rates.items()
            for b, rate in by.items()
        },
        "gym_single_env": round(gym_rate),
        "small_demo_t1_B1024plus_best": round(one_thread),
        "ratio_vs_parallel_1_thread": round(one_thread / reference, 2),
        "ratio_vs_gym": round(ratio, 1),
        "trace_dc_vs_small_demo": round(trace_ratio, 2),
        "target_met": one_thread >= TARGET_STEPS_PER_S
        and ratio >= TARGET_RATIO
        and trace_ratio >= TARGET_TRACE_RATIO,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
