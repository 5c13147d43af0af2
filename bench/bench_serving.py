"""Serving latency of the exported policy (onnxruntime) next to the torch policy.

Both serve the same greedy policy (`GreedyPolicy.act` in torch, `OnnxPolicy.act` from the
`fedmc export` file) on the same world observations and masks, in one process, each with
one thread. Batch 1: `--calls` single-observation calls, each timed alone, p50 and p99 in
microseconds (a dispatcher answers one job at a time). Batch 1024: observations per
second over `--batches` calls. The weights are a checkpoint's (`--checkpoint`) or a fresh
learner's: latency does not depend on their values.

Prints a table, then one JSON line of the figures.

    python bench/bench_serving.py [--config conf/small_demo.yaml] [--checkpoint FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from fedmc_flwr.config import learner_plan, load_config
from fedmc_flwr.integrations.export import export_policy
from fedmc_flwr.integrations.serving import OnnxPolicy
from fedmc_flwr.policies.checkpoints import read_checkpoint
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sim.world import MultiCloudSim

TARGET_P99_US = 100.0
BIG_BATCH = 1024

Act = Callable[[np.ndarray, np.ndarray], np.ndarray]


def batch1_latency_us(act: Act, obs: np.ndarray, mask: np.ndarray, calls: int) -> np.ndarray:
    """Microseconds of each of `calls` single-observation calls (after 200 warm-up calls)."""
    for k in range(200):
        act(obs[k : k + 1], mask[k : k + 1])
    out = np.empty(calls)
    for k in range(calls):
        j = k % len(obs)
        x, m = obs[j : j + 1], mask[j : j + 1]
        start = time.perf_counter_ns()
        act(x, m)
        out[k] = (time.perf_counter_ns() - start) / 1000.0
    return out


def big_batch_rate(act: Act, obs: np.ndarray, mask: np.ndarray, batches: int) -> float:
    """Observations per second at batch BIG_BATCH."""
    act(obs, mask)
    start = time.perf_counter()
    for _ in range(batches):
        act(obs, mask)
    return batches * len(obs) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="conf/small_demo.yaml")
    parser.add_argument("--checkpoint", type=Path, default=None)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.config)
    learner = PPOLearner(learner_plan(cfg, list(range(cfg.world.regions))), cfg.seed)
    if args.checkpoint is not None:
        learner.set_weights(read_checkpoint(args.checkpoint))
    sim = MultiCloudSim(cfg.world, cfg.reward, np.arange(BIG_BATCH) % cfg.world.regions)
    obs, mask = sim.reset(np.arange(BIG_BATCH, dtype=np.uint64))
    with tempfile.TemporaryDirectory() as tmp:
        path = export_policy(cfg, learner.get_weights(), Path(tmp) / "policy.onnx")
        servers = {"torch": learner.policy().act, "onnxruntime": OnnxPolicy(path).act}
        latency = {n: batch1_latency_us(a, obs, mask, args.calls) for n, a in servers.items()}
        rate = {n: big_batch_rate(a, obs, mask, args.batches) for n, a in servers.items()}

    shape = f"{cfg.world.regions}x{cfg.world.nodes_per_region}"
    print(f"greedy policy serving, {shape} estate, obs_dim {sim.obs_dim}, 1 thread each")
    print(f"{'runtime':<13}{'B=1 p50 us':>12}{'B=1 p99 us':>12}{f'B={BIG_BATCH} obs/s':>16}")
    figures: dict[str, object] = {"bench": "serving", "estate": shape, "calls": args.calls}
    for name in servers:
        p50, p99 = np.percentile(latency[name], [50, 99])
        print(f"{name:<13}{p50:>12.1f}{p99:>12.1f}{rate[name]:>16,.0f}")
        key = name.replace("onnxruntime", "onnx")
        figures |= {
            f"{key}_b1_p50_us": round(p50, 1),
            f"{key}_b1_p99_us": round(p99, 1),
            f"{key}_b{BIG_BATCH}_obs_per_s": round(rate[name]),
        }
    onnx_p99 = float(figures["onnx_b1_p99_us"])  # type: ignore[arg-type]
    met = "met" if onnx_p99 < TARGET_P99_US else "MISSED"
    print(f"onnxruntime batch-1 p99 {onnx_p99:.1f} us (target < {TARGET_P99_US:.0f} us: {met})")
    figures |= {
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_average_1min": os.getloadavg()[0],
        "target_met": onnx_p99 < TARGET_P99_US,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
