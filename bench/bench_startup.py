"""`flwr run .` against `fedmc run`: how long until round 1 ends.

The same config and seed, one round, launched both ways from this checkout and alternating
`--repeats` times (fedmc's first), each into a results folder of its own:

- `fedmc run --config CONFIG` (its own SuperLink in a private Flower home, started and
  stopped by the run);
- the README's guest path: `fedmc start-superlink` (timed on its own), `flwr run . --stream`
  against it with the same config (`--run-config "config=... overrides=..."`, one virtual
  node per region, one CPU each, as the README writes it), then `fedmc stop-superlink`.

Round 1 ends when the run's progress.json records it (polled every 0.1 s), counted from the
launch of the command. The `flwr run .` figure is given with the SuperLink already up (as
the README starts it, once, before any number of runs) and with its start added (a user's
first run). Both runs share a private Flower home, fresh ports and the machine's compiled
kernel cache, and nothing else runs between them; the figures still move with whatever else
runs on the machine, so the load average is printed before and after.

Target (issue): round 1 of `flwr run .` ends within 1.3x of `fedmc run`'s.

Prints a table, then one JSON line of the figures.

    python bench/bench_startup.py [--config conf/small_demo.yaml] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fedmc_flwr.config import load_config
from fedmc_flwr.federation.run_files import PROGRESS_FILE
from fedmc_flwr.federation.superlink import free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GOAL_RATIO = 1.3
POLL_S = 0.1
LIMIT_S = 1800.0
"""The longest a run may take before the bench gives up on it."""


def _completed_round(out: Path) -> int:
    try:
        return int(json.loads((out / PROGRESS_FILE).read_text())["completed_round"])
    except (OSError, ValueError, KeyError):
        return 0


def timed_run(command: list[str], out: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from launching `command` until `out`'s progress.json records round 1, and
    until the command exits; its output goes to `out`'s log beside the results."""
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.log"
    start = time.perf_counter()
    with log.open("w") as handle:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=handle, stderr=handle)
        first = None
        while process.poll() is None:
            if first is None and _completed_round(out) >= 1:
                first = time.perf_counter() - start
            if time.perf_counter() - start > LIMIT_S:
                process.kill()
                break
            time.sleep(POLL_S)
    wall = time.perf_counter() - start
    if first is None and _completed_round(out) >= 1:
        first = wall
    if process.returncode != 0 or first is None:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}); see {log}")
    return first, wall


def fedmc(args: list[str], env: dict[str, str]) -> float:
    """Seconds one `fedmc` housekeeping command (start or stop a SuperLink) takes."""
    start = time.perf_counter()
    done = subprocess.run([str(BIN / "fedmc"), *args], cwd=REPO, env=env, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"fedmc {' '.join(args)} failed: {done.stderr.decode()[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/small_demo.yaml"))
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    config = args.config.resolve()
    cfg = load_config(config, ["train.rounds=1"])
    relative = config.relative_to(REPO) if config.is_relative_to(REPO) else config
    before = os.getloadavg()
    figures: dict[str, list[float]] = {
        key: [] for key in ("fedmc_round1_s", "flwr_round1_s", "superlink_start_s")
    }
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "FLWR_"))},
            "FLWR_HOME": str(Path(tmp) / "flwr-home"),
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
            "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        for k in range(args.repeats):
            results = Path(tmp) / f"fedmc-{k}"
            sets = ["--set", "train.rounds=1", "--set", f"results_dir={results}"]
            command = [str(BIN / "fedmc"), "run", "--config", str(config), *sets]
            first, _ = timed_run(command, results / cfg.name, env)
            figures["fedmc_round1_s"].append(first)

            results = Path(tmp) / f"flwr-{k}"
            figures["superlink_start_s"].append(fedmc(["start-superlink"], env))
            run_config = f"config='{relative}' overrides='train.rounds=1' results-dir='{results}'"
            nodes = f"num-supernodes={cfg.world.regions} client-resources-num-cpus=1"
            command = [
                str(BIN / "flwr"), "run", ".", "--stream",
                "--federation-config", nodes, "--run-config", run_config,
            ]  # fmt: skip
            try:
                first, _ = timed_run(command, results / cfg.name, env)
            finally:
                fedmc(["stop-superlink"], env)
            figures["flwr_round1_s"].append(first)
    after = os.getloadavg()
    fedmc_s, flwr_s, link_s = (
        np.array(figures[k]) for k in ("fedmc_round1_s", "flwr_round1_s", "superlink_start_s")
    )
    warm, cold = flwr_s / fedmc_s, (flwr_s + link_s) / fedmc_s
    print(f"{cfg.name}, one round, {args.repeats} repeats, alternating; {platform.node()}")
    print(f"load average before {before[0]:.2f}, after {after[0]:.2f}")
    print(f"{'repeat':>6} {'fedmc run':>10} {'flwr run .':>11} {'SuperLink':>10} "
          f"{'warm ratio':>11} {'cold ratio':>11}")  # fmt: skip
    for k in range(args.repeats):
        print(
            f"{k:>6} {fedmc_s[k]:>9.1f}s {flwr_s[k]:>10.1f}s {link_s[k]:>9.1f}s "
            f"{warm[k]:>11.2f} {cold[k]:>11.2f}"
        )
    print(
        f"median: flwr run . / fedmc run = {np.median(warm):.2f} with the SuperLink up, "
        f"{np.median(cold):.2f} with its start; goal <= {GOAL_RATIO}"
    )
    print(
        json.dumps(
            {
                "bench": "startup",
                "config": str(relative),
                "fedmc_round1_s": fedmc_s.round(2).tolist(),
                "flwr_round1_s": flwr_s.round(2).tolist(),
                "superlink_start_s": link_s.round(2).tolist(),
                "warm_ratio": round(float(np.median(warm)), 3),
                "cold_ratio": round(float(np.median(cold)), 3),
                "goal": GOAL_RATIO,
                "load_before": round(before[0], 2),
                "load_after": round(after[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
