"""Every script in bench/ runs at its smallest settings, so a change that breaks a benchmark
fails here rather than on the day someone measures with it.

Each runs as `python bench/<script>` would, a child process from the repository root, at
sizes that measure nothing (the suite's tiny federation, one rollout, a handful of calls),
and its output is read as its reader reads it: the table's header with at least one row
under it, and the last line, one JSON object that names the bench. No figure is asserted.
A script left out says why in `NOT_SMOKED`, and a new script in bench/ that is in neither
list fails `test_every_bench_is_smoked_or_says_why`."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, TINY
from flower_runs import RAY_LOCK

BENCH = REPO / "bench"
TIMEOUT_S = 600


@dataclass(frozen=True)
class Smoke:
    """One bench at its smallest settings: its arguments and how its table begins."""

    script: str
    args: str
    """Its command line's arguments, as a shell would split them; `{tmp}` is the test's
    temporary directory (for what a bench writes)."""
    header: str
    """The start of the table's header line (after leading spaces)."""
    ray: bool = False
    """It starts Flower's simulation engine: `RAY_LOCK` is held while it runs."""

    @property
    def name(self) -> str:
        return self.script.removeprefix("bench_").removesuffix(".py")


TINY_ARG = shlex.quote(str(TINY))
QUICK = [
    Smoke("bench_serving.py", "--calls 20 --batches 2", "runtime"),
    # the trace mode: small_demo beside trace_dc, one batch (the full table steps 20x100
    # at every batch size, minutes even at its smallest)
    Smoke(
        "bench_sim.py",
        "--trace --rounds 1 --batch 64 --reps 1 --seconds 0.05",
        "MultiCloudSim.step, one thread",
    ),
    Smoke("bench_update.py", f"--config {TINY_ARG} --repeats 1", "piece"),
    Smoke("bench_ppo.py", f"--config {TINY_ARG} --envs 2 --rollouts 1", "learner"),
    Smoke(
        "bench_byzantine.py",
        f"--config {TINY_ARG} --scenario none:mean --scenario sign-flip:median --hostile 1",
        "| attack",
    ),
    Smoke(
        "bench_time_to_quality.py",
        # without SB3: its defaults collect 16,384 steps a chunk (bench_ppo runs SB3)
        f"--config {TINY_ARG} --set train.rounds=1 --worlds 2 --steps 20 --no-sb3",
        "learner",
    ),
    Smoke(
        "bench_optimum.py",
        "--servers 2 --ratios 2 --loads 0.5 --cases '2x one fast 2:1 @ 0.5' "
        "--test-worlds 2 --test-jobs 100 --seeds 0 "
        "--set train.rounds=1 --set train.steps_per_round=64 "
        "--set ppo.num_envs=4 --set ppo.rollout_steps=16 --out {tmp}",
        "| servers",
    ),
]
"""The benches that run in-process, each some seconds."""
FLOWER = [
    Smoke(
        "bench_federation.py",
        f"--config {TINY_ARG} --rounds 2 --no-schedule",
        "round",
        ray=True,
    ),
    Smoke("bench_scaling.py", f"--config {TINY_ARG} --estates 2x2", "estate", ray=True),
    Smoke("bench_engines.py", f"--config {TINY_ARG} --rounds 2 --warm-cache", "run", ray=True),
    Smoke("bench_startup.py", f"--config {TINY_ARG} --repeats 1", "repeat", ray=True),
]
"""The benches that run `fedmc run` (and `fedmc deploy`, `flwr run .`): each some 30 s or
more, most of it Flower's and Ray's start."""
NOT_SMOKED = {
    "bench_attacks.py": "its cells' sizes are fixed (SMALL: 3 rounds of 500 steps, 10 x 500 "
    "held-out jobs), a minute at its smallest, and its JSON line names no bench",
}
"""Scripts of bench/ this file does not run, and why."""


def run_bench(smoke: Smoke, tmp_path: Path) -> tuple[list[str], dict]:
    """The bench's output lines and its last line's JSON; its files under `tmp_path`."""
    args = shlex.split(smoke.args.format(tmp=shlex.quote(str(tmp_path))))
    command = [sys.executable, str(BENCH / smoke.script), *args]
    with RAY_LOCK if smoke.ray else nullcontext():
        done = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
    lines = done.stdout.splitlines()
    return lines, json.loads(lines[-1])


def table_rows(lines: list[str], header: str) -> list[str]:
    """The lines under the first one that starts with `header`, up to a blank line or the
    JSON line; Markdown's separator row left out."""
    starts = [k for k, line in enumerate(lines) if line.lstrip().startswith(header)]
    assert starts, f"no table headed {header!r} in:\n" + "\n".join(lines[-30:])
    rows = []
    for line in lines[starts[0] + 1 :]:
        if not line.strip() or line.startswith("{"):
            break
        if not line.startswith("|---"):
            rows.append(line)
    return rows


def check(smoke: Smoke, tmp_path: Path) -> None:
    lines, figures = run_bench(smoke, tmp_path)
    # a bench with modes names the mode after its own name (bench_sim: "sim_trace")
    assert figures["bench"] == smoke.name or figures["bench"].startswith(f"{smoke.name}_")
    assert table_rows(lines, smoke.header), f"{smoke.script}: a table without rows"


@pytest.mark.parametrize("smoke", QUICK, ids=lambda smoke: smoke.name)
def test_a_bench_runs_and_prints_its_table_and_figures(smoke: Smoke, tmp_path: Path) -> None:
    check(smoke, tmp_path)


@pytest.mark.slow
@pytest.mark.flower
@pytest.mark.parametrize("smoke", FLOWER, ids=lambda smoke: smoke.name)
def test_a_federated_bench_runs_and_prints_its_table_and_figures(
    smoke: Smoke, tmp_path: Path
) -> None:
    check(smoke, tmp_path)


def test_every_bench_is_smoked_or_says_why() -> None:
    scripts = {path.name for path in BENCH.glob("bench_*.py")}
    smoked = [smoke.script for smoke in QUICK + FLOWER]
    assert len(smoked) == len(set(smoked))
    assert scripts == set(smoked) | NOT_SMOKED.keys()
    assert not set(smoked) & NOT_SMOKED.keys()


def test_the_table_reader_finds_rows_and_fails_without_them() -> None:
    lines = ["intro", "  learner  frames/s", "ours  1", "", '{"bench": "x"}']
    assert table_rows(lines, "learner") == ["ours  1"]
    assert table_rows(["| a | b |", "|---|---|", '{"bench": "x"}'], "| a") == []
    with pytest.raises(AssertionError):
        table_rows(lines, "estate")
