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

`--against REV` instead sets this checkout's simulator beside git revision REV's, in one
run: REV's `fedmc_flwr/` is exported to a temporary directory, and each tree runs in
subprocesses of its own. First the worlds: a few hundred steps of the same seeds and
actions through each tree, in eight worlds (small_demo with outages on the serial and on
the parallel kernel, trace_dc, a job log with declared sizes, the joint arena, declared
Pareto jobs, tiny queues that fall back and refuse, replayed signals), each step's every
`StepOut` array, the dispatch costs, the restarts and the final state fed to one digest
per world; it prints whether the two trees' worlds are equal bit for bit (exit code 1 if
not). Then the speed: each round runs one subprocess per tree, in alternating order, which
times the serial kernel (one thread; by the wall clock, and per second of the stepping
thread's CPU, which other processes inflate far less) and the parallel kernel
(`--threads`, 2 by default) on the same batch (small_demo, B=1024 by default), their
repetitions alternating. Machine noise then hits both trees alike; the table gives each
tree's median over the rounds and their ratio, per kernel, and the load average. The
parallel kernel's speedup is the median of each parallel repetition over the serial one
beside it, with its quartiles. Each round also runs this checkout's serial kernel in
`--threads` processes at once: their summed rate over one alone is what that many cores
give steppers that share nothing, the ceiling of the parallel kernel's speedup on the
machine. A parallel figure means something only on a machine with `--threads` cores
free: where other work keeps them busy, each step waits for a descheduled thread.

    python bench/bench_sim.py --against HEAD~1 [--rounds 7] [--batch 1024] [--threads 2]

`--rounds 0` checks the worlds only.
"""

from __future__ import annotations

import argparse
import hashlib
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
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
    cfg: ExperimentConfig,
    envs: int,
    threads: int,
    reps: int,
    seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median env steps per second of MultiCloudSim.step over a batch of `envs` worlds,
    by `clock` (`time.thread_time`: per second of the stepping thread's CPU, which other
    processes on a busy machine inflate far less than the wall clock; one thread only)."""
    return _median_rate(stepping(cfg, envs, threads, seconds, clock), reps)


def stepping(
    cfg: ExperimentConfig,
    envs: int,
    threads: int,
    seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> Callable[[], tuple[int, float]]:
    """One repetition's timer: a batch of `envs` worlds, compiled and stepped once, and a
    call that steps it for about `seconds` and returns (env steps, seconds by `clock`)."""
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
            start = clock()
            mask = sim.step(actions).mask
            elapsed += clock() - start
        return calls * envs, elapsed

    return run_once


@contextmanager
def parallel_kernel_on_one_thread() -> Iterator[None]:
    """Make one-thread sims call the parallel kernel, one share on numba held to one thread
    (through a Python wrapper, a microsecond a call: it shows at B=1 only)."""
    serial = kernel.step_kernel

    def one_share(actions, state, out, statics) -> None:
        kernel.step_kernel_parallel(actions, state, out, statics, 1)

    kernel.step_kernel = one_share
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


@dataclass(frozen=True)
class World:
    """One world of the trajectory check: a config, its overrides, and how it is run."""

    config: str
    overrides: tuple[str, ...] = ()
    envs: int = 64
    threads: int = 1
    joint: bool = False
    replay: bool = False
    """Halfway through, set every region's arrival rate and carbon by hand."""


OUTAGES = ("world.outage_rate=0.05",)
OUTAGES_OFTEN = ("world.outage_rate=0.05", "world.outage_mean_s=5.0")
WORLDS = {
    "small_demo, outages": World("small_demo.yaml", OUTAGES, envs=256),
    "small_demo, outages, parallel kernel": World("small_demo.yaml", OUTAGES, 256, threads=2),
    "trace_dc": World("trace_dc.yaml"),
    "trace_jobs (job log, declared sizes)": World("trace_jobs.yaml"),
    "joint arena": World("small_demo.yaml", joint=True),
    "declared Pareto jobs": World(
        "small_demo.yaml",
        ("world.declared_size=true", "world.declared_size_error=0.5", "world.job_size=pareto"),
    ),
    "tiny queues (fallback, refusals)": World(
        "small_demo.yaml",
        ("world.queue_capacity=2", "world.queue_threshold=1", "world.load=0.99", *OUTAGES_OFTEN),
    ),
    "replayed signals": World("small_demo.yaml", replay=True),
}
TRAJECTORY_STEPS = 300
INVALID_SHARE = 0.05
"""Share of actions drawn over every action and one past each end, masked or not, so that
the worst-node path and out-of-range actions are run too."""


def _feed(digest: hashlib._Hash, name: str, array: np.ndarray) -> None:
    array = np.ascontiguousarray(array)
    digest.update(f"{name}:{array.dtype.str}:{array.shape}:".encode())
    digest.update(array.tobytes())


def world_digest(world: World) -> str:
    """One digest of everything `world` produces over `TRAJECTORY_STEPS` steps of fixed
    actions: the first observation and mask, every field of every `StepResult`, the
    dispatch costs (true and expected) every 25 steps, some envs restarted at given phases
    every 50, and the final state. Uses only the simulator's public interface, so that
    any revision's tree can run it."""
    cfg = load_config(REPO / "conf" / world.config, list(world.overrides))
    envs = world.envs
    ingress = np.arange(envs) % cfg.world.regions
    sim = MultiCloudSim(cfg.world, cfg.reward, ingress, world.threads, joint=world.joint)
    rng = np.random.default_rng(20261)
    digest = hashlib.sha256()
    obs, mask = sim.reset(np.arange(envs, dtype=np.uint64) * 7919 + 3)
    _feed(digest, "reset.obs", obs)
    _feed(digest, "reset.mask", mask)
    for k in range(TRAJECTORY_STEPS):
        actions = np.where(mask, rng.random(mask.shape), -1.0).argmax(axis=1)
        wild = rng.random(envs) < INVALID_SHARE
        actions[wild] = rng.integers(-1, sim.num_actions + 1, size=int(wild.sum()))
        if k % 25 == 0:
            _feed(digest, "dispatch_costs", sim.dispatch_costs())
            _feed(digest, "expected_dispatch_costs", _expected_dispatch_costs(sim))
        if world.replay and k == TRAJECTORY_STEPS // 2:
            rates = sim.spec.arrival_rate * np.linspace(0.6, 1.1, sim.num_regions)
            sim.replay_signals(arrival_rate=rates, carbon=np.linspace(50.0, 400.0, sim.num_regions))
        result = sim.step(actions)
        for name, value in result._asdict().items():
            _feed(digest, f"step.{name}", value)
        obs, mask = result.obs, result.mask
        if k % 50 == 49:
            restart = np.arange(k % 7, envs, 9)
            phases = rng.random(len(restart))
            obs, mask = sim.reset_envs(restart, restart.astype(np.uint64) + k, phases)
            _feed(digest, "restart.obs", obs)
            _feed(digest, "restart.mask", mask)
    for name, value in sorted(sim.get_state().items()):
        _feed(digest, f"state.{name}", value)
    return digest.hexdigest()


def _expected_dispatch_costs(sim: MultiCloudSim) -> np.ndarray:
    """The myopic cost a policy can know, under either tree's name for it (older trees
    call it `expected_dispatch_costs`), so that `--against` compares the two."""
    if hasattr(sim, "expected_dispatch_costs"):
        return sim.expected_dispatch_costs()
    return sim.dispatch_costs(knows_size=False, knows_backlogs=False)


def _start_in_tree(tree: Path, *args: str) -> subprocess.Popen[str]:
    """This script, started in a subprocess on the simulator of `tree`."""
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _output(process: subprocess.Popen[str]) -> str:
    """A started script's output, once it has ended well."""
    out, err = process.communicate()
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, process.args, out, err)
    return out


def _in_tree(tree: Path, *args: str) -> str:
    """This script's output, run in a subprocess on the simulator of `tree`."""
    return _output(_start_in_tree(tree, *args))


def compare_worlds(trees: dict[str, Path], threads: int) -> bool:
    """Run `WORLDS` through every tree, print each world's digests and whether they agree;
    True when every tree's worlds are equal bit for bit."""
    worlds = [w for w, spec in WORLDS.items() if spec.threads <= threads]
    args = ("--worker-worlds", "--threads", str(threads))
    digests = {
        name: json.loads(_in_tree(tree, *args).splitlines()[-1]) for name, tree in trees.items()
    }
    names = list(trees)
    print(f"Worlds: {TRAJECTORY_STEPS} steps of the same seeds and actions, every output digested")
    print(f"{'world':<40}" + "".join(f"{name:>20}" for name in names) + "  same")
    for world in worlds:
        cells = [digests[name][world][:16] for name in names]
        same = len(set(digests[name][world] for name in names)) == 1
        print(f"{world:<40}" + "".join(f"{cell:>20}" for cell in cells) + f"  {same}")
    equal = all(digests[names[0]] == digests[name] for name in names[1:])
    verdict = "equal bit for bit" if equal else "NOT EQUAL"
    print(f"{' and '.join(names)}: {verdict} ({len(worlds)} worlds)")
    for name in names:
        serial, parallel = (digests[name].get(w) for w in list(WORLDS)[:2])
        if parallel is not None:
            print(f"{name}: parallel kernel == serial kernel: {serial == parallel}")
    return equal


def time_kernels(args: argparse.Namespace) -> dict[str, object]:
    """Steps/s of the serial kernel (one thread) and of the parallel kernel on
    `args.threads` threads, one batch of small_demo (a worker of `against`).

    The two kernels' repetitions alternate, each parallel one beside the serial one just
    before or after it, and `speedups` holds each pair's ratio: the machine's speed drifts
    by tens of percent within seconds here, so two figures timed apart can say 1.6x or
    2.1x of the same code."""
    cfg = load_config(args.config)
    serial_steps = stepping(cfg, args.batch, 1, args.seconds)
    if args.serial_only:  # a process of `machine_ceiling`
        return {"serial": _median_rate(serial_steps, args.reps)}
    rates: dict[str, object] = {
        "serial_cpu": sim_steps_per_second(
            cfg, args.batch, 1, args.reps, args.seconds, time.thread_time
        )
    }
    if args.threads <= 1:
        return rates | {"serial": _median_rate(serial_steps, args.reps)}
    parallel_steps = stepping(cfg, args.batch, args.threads, args.seconds)
    serial, parallel = [], []
    order = [(serial, serial_steps), (parallel, parallel_steps)]
    for rep in range(args.reps):
        for rates_of, run in order if rep % 2 == 0 else order[::-1]:
            steps, seconds = run()
            rates_of.append(steps / seconds)
    return rates | {
        "serial": statistics.median(serial),
        "parallel": statistics.median(parallel),
        "speedups": [p / s for p, s in zip(parallel, serial, strict=True)],
    }


def machine_ceiling(args: argparse.Namespace, threads: int) -> float:
    """What `threads` cores give as many independent steppers: this checkout's serial
    kernel in `threads` processes at once, their steps/s summed, over one alone just
    after. A parallel kernel on `threads` threads cannot beat it: the limit is the
    machine's (shared caches, memory, clock), not the kernel's."""
    worker = ["--worker", "--serial-only", "--config", str(args.config)]
    worker += ["--batch", str(args.batch), "--reps", str(args.reps)]
    worker += ["--seconds", str(args.seconds)]
    together = [_start_in_tree(REPO, *worker) for _ in range(threads)]
    summed = sum(json.loads(_output(p).splitlines()[-1])["serial"] for p in together)
    return summed / json.loads(_in_tree(REPO, *worker).splitlines()[-1])["serial"]


def against(args: argparse.Namespace) -> int:
    """This checkout's worlds and speed beside revision `args.against`'s; 1 if their
    worlds differ."""
    threads = min(args.threads, numba.config.NUMBA_NUM_THREADS)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        trees = {"this checkout": REPO, args.against: export_revision(args.against, Path(tmp))}
        equal = compare_worlds(trees, threads)
        if args.rounds == 0:
            return 0 if equal else 1
        rates: dict[tuple[str, str], list[float]] = {}
        worker_args = ["--worker", "--config", str(args.config), "--batch", str(args.batch)]
        worker_args += ["--reps", str(args.reps), "--seconds", str(args.seconds)]
        worker_args += ["--threads", str(threads)]
        for k in range(args.rounds):
            order = list(trees) if k % 2 == 0 else list(reversed(trees))
            for name in order:
                figures = json.loads(_in_tree(trees[name], *worker_args).splitlines()[-1])
                for kernel_name, rate in figures.items():
                    pooled = rates.setdefault((name, kernel_name), [])
                    pooled += rate if isinstance(rate, list) else [rate]
            if threads > 1:
                ceiling = machine_ceiling(args, threads)
                rates.setdefault(("this checkout", "ceiling"), []).append(ceiling)
    speedups = {name: rates.pop((name, "speedups"), []) for name in trees}
    ceilings = rates.pop(("this checkout", "ceiling"), [])
    medians = {key: statistics.median(r) for key, r in rates.items()}
    kernels = {
        "serial": "serial, 1 thread",
        "serial_cpu": "serial, per CPU-s",
        "parallel": f"parallel, {threads} threads",
    }
    kernels = {k: label for k, label in kernels.items() if ("this checkout", k) in medians}
    load_after = os.getloadavg()[0]
    print(f"\nMultiCloudSim.step, env steps/s, B={args.batch}, {args.config.name}, valid actions")
    print(f"(median of {args.rounds} alternating rounds, each the median of {args.reps} reps;")
    print(f" load average {load_before:.2f} before, {load_after:.2f} after)")
    print(f"{'kernel':<22}{'this checkout':>16}{args.against:>16}{'ratio':>8}   ranges")
    figures: dict[str, object] = {"bench": "sim_against", "unit": "env_steps_per_second"}
    for k, label in kernels.items():
        mine, theirs = medians[("this checkout", k)], medians[(args.against, k)]
        spread = "; ".join(
            f"{min(rates[(name, k)]):,.0f} .. {max(rates[(name, k)]):,.0f}" for name in trees
        )
        print(f"{label:<22}{mine:>16,.0f}{theirs:>16,.0f}{mine / theirs:>8.3f}   {spread}")
        figures |= {f"{k}_this_checkout": round(mine), f"{k}_revision": round(theirs)}
        figures[f"{k}_ratio"] = round(mine / theirs, 3)
    if "parallel" in kernels:
        paired = [statistics.median(speedups[name]) for name in trees]
        quartiles = [statistics.quantiles(speedups[name], n=4) for name in trees]
        print(
            f"{'parallel / serial':<22}"
            + "".join(f"{s:>15.2f}x" for s in paired)
            + " " * 11
            + "; ".join(f"{q[0]:.2f} .. {q[2]:.2f}" for q in quartiles)
        )
        print(" (each parallel repetition over the serial one beside it: median, quartiles)")
        figures |= {"speedup_this_checkout": round(paired[0], 2)}
        figures |= {"speedup_revision": round(paired[1], 2)}
        figures |= {"speedup_quartiles_this_checkout": [round(q, 2) for q in quartiles[0][::2]]}
    if ceilings:
        ceiling = statistics.median(ceilings)
        print(
            f"{f'{threads} serial processes':<22}{ceiling:>15.2f}x"
            + " " * 27
            + f"{min(ceilings):.2f} .. {max(ceilings):.2f}"
        )
        print(f" (this checkout's serial kernel in {threads} processes at once over one alone:")
        print(f"  the machine's ceiling for any {threads}-thread speedup)")
        figures |= {"processes_over_one": round(ceiling, 2)}
    figures |= {"against": args.against, "batch": args.batch, "threads": threads}
    figures |= {"rounds": args.rounds, "worlds_equal": equal}
    figures |= {"load_average_1min": [load_before, load_after]}
    print(json.dumps(figures))
    return 0 if equal else 1


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
    parser.add_argument(
        "--threads", type=int, default=2, help="the parallel kernel's threads (--against)"
    )
    parser.add_argument("--trace", action="store_true", help="time only small_demo beside trace_dc")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serial-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-worlds", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:  # one round of `against`, in whichever tree PYTHONPATH names
        print(json.dumps(time_kernels(args)))
        return
    if args.worker_worlds:  # the worlds of `against`, in whichever tree PYTHONPATH names
        worlds = {n: w for n, w in WORLDS.items() if w.threads <= args.threads}
        print(json.dumps({name: world_digest(world) for name, world in worlds.items()}))
        return
    if args.against:
        sys.exit(against(args))
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
    header = f"{'world':<12}{'shape':>8}{'compiled':>19}{'threads':>9}"
    print(header + "".join(f"{f'B={b}':>14}" for b in BATCHES))
    for (name, variant, threads), rate in rates.items():
        cells = "".join(f"{rate[b]:>14,.0f}" for b in BATCHES)
        print(f"{name:<12}{shape[name]:>8}{variant:>19}{threads:>9}{cells}")
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
