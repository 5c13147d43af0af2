"""The PPO update's cut pieces against torch's own forms of them, side by side.

Each row times one piece of the update at small_demo's settings (a minibatch of
`envs * rollout / minibatches` rows, hidden width from the config, one torch thread) two
ways: the form torch offers, which the learner used before, and the learner's form. Both
forms give the same numbers bit for bit, which each row checks after timing:

- Adam: torch's per-tensor Adam (`foreach=False`) against `FlatAdam` (one flat buffer),
  30 steps of the same gradients; the parameters after them must be equal.
- gradient-norm clip: torch's `clip_grad_norm_` (`foreach=False`) against
  `FlatAdam.clip_grad_norm_`, at the bound (the same norms, then one multiply of the
  flat gradient that backward fills) and inside it (one float64 norm, nothing to
  multiply); the clipped gradients must be equal.
- pooling over nodes: the node scorer's update pass (forward and backward of one
  minibatch) with its pooling as torch's `mean(dim=1)` against `pool` (sum / N); logits,
  values and gradients must be equal.
- the epoch's shuffle (rollout's observations): indexing (`obs[order]`, a fresh array per
  epoch) against `index_select` into one array kept across epochs; the rows must be equal.

The two forms of a row alternate `--repeats` times and each reports its median, so the
host's drift between seconds hits both alike.

With `--compile`, a second table tries a candidate that was not taken: each network's
update pass compiled by `torch.compile` (inductor, C++ on CPU) against the eager pass, with
the time the first call takes to compile and whether the numbers stay the same.

Prints the table(s), then one JSON line.

    python bench/bench_update.py [--config conf/small_demo.yaml] [--repeats 15] [--compile]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from fedmc_flwr.config import load_config
from fedmc_flwr.policies import networks
from fedmc_flwr.policies.flat_adam import FlatAdam
from fedmc_flwr.policies.networks import build_network, pool
from fedmc_flwr.sim.layout import ObsLayout

Timed = Callable[[], object]


def alternate(first: Timed, second: Timed, repeats: int, number: int) -> tuple[float, float]:
    """Median seconds per call of each, timed in alternation."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - start) / number)
    return statistics.median(times[0]), statistics.median(times[1])


def update_pass(network: torch.nn.Module, obs: torch.Tensor) -> list[torch.Tensor]:
    """One forward and backward pass of actor and critic over a minibatch, as the update
    makes it (without the loss terms): its logits, values and every parameter's gradient."""
    network.zero_grad(set_to_none=True)
    logits, values = network(obs)
    (logits.sum() + values.sum()).backward()
    return [logits.detach(), values.detach(), *(p.grad for p in network.parameters())]


def _all_equal(first: list[torch.Tensor], second: list[torch.Tensor]) -> bool:
    return all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def _flat_network(kind: str, obs_dim: int, actions: int, hidden: int) -> nn.Module:
    """A flat network (`mlp`, `node-scorer`: one logit per node from the whole
    observation), the kinds whose update these pieces were cut from; neither reads the
    estate's split into regions."""
    return build_network(kind, obs_dim, actions, hidden, nodes_per_region=actions)


def _twins(kind: str, obs_dim: int, actions: int, hidden: int) -> tuple[nn.Module, nn.Module]:
    """Two networks of one kind with the same weights, each with its own parameters."""
    torch.manual_seed(0)
    first = _flat_network(kind, obs_dim, actions, hidden)
    second = _flat_network(kind, obs_dim, actions, hidden)
    second.load_state_dict(first.state_dict())
    return first, second


def _gradients(
    kind: str, obs_dim: int, actions: int, hidden: int
) -> tuple[nn.Module, nn.Module, FlatAdam]:
    """Twin networks holding the same random gradients: the first per tensor, the
    second in its `FlatAdam`'s flat buffer, where backward leaves them."""
    per_tensor_net, flat_net = _twins(kind, obs_dim, actions, hidden)
    flat = FlatAdam(list(flat_net.parameters()), lr=1e-4, eps=1e-5)
    flat.zero_grad()
    generator = torch.Generator().manual_seed(1)
    for p, q in zip(per_tensor_net.parameters(), flat_net.parameters(), strict=True):
        p.grad = torch.randn(p.shape, generator=generator)
        q.grad.copy_(p.grad)
    return per_tensor_net, flat_net, flat


def adam_row(kind: str, obs_dim: int, actions: int, hidden: int, repeats: int) -> dict:
    """Per-tensor Adam against FlatAdam on one network kind's parameters."""
    per_tensor_net, flat_net, flat = _gradients(kind, obs_dim, actions, hidden)
    per_tensor = torch.optim.Adam(per_tensor_net.parameters(), lr=1e-4, eps=1e-5, foreach=False)
    for _ in range(30):
        per_tensor.step()
        flat.step()
    same = _all_equal(list(per_tensor_net.parameters()), list(flat_net.parameters()))
    torch_s, ours_s = alternate(per_tensor.step, flat.step, repeats, 200)
    return {"piece": f"Adam step ({kind})", "torch_s": torch_s, "ours_s": ours_s, "same": same}


def clip_row(
    kind: str, obs_dim: int, actions: int, hidden: int, repeats: int, inside: bool
) -> dict:
    """torch's gradient-norm clip, per tensor, against `FlatAdam.clip_grad_norm_`.
    `inside`: the bound is ten times the gradients' norm, so nothing is clipped (FlatAdam
    checks one float64 norm and leaves the buffer); else the bound is 0.5 and each call
    clips what the last left, alike in both, which puts the norm at the bound (FlatAdam
    takes torch's path: the per-tensor norms, then one multiply of the flat buffer)."""
    per_tensor_net, flat_net, flat = _gradients(kind, obs_dim, actions, hidden)
    params = list(per_tensor_net.parameters())
    norm = float(torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in params])))
    bound = 10.0 * norm if inside else 0.5

    def torch_clip() -> None:
        nn.utils.clip_grad_norm_(params, bound, foreach=False)

    def flat_clip() -> None:
        flat.clip_grad_norm_(bound)

    torch_clip()
    flat_clip()
    grads = [p.grad for p in flat_net.parameters()]
    same = _all_equal([p.grad for p in params], grads)
    torch_s, ours_s = alternate(torch_clip, flat_clip, repeats, 200)
    where = "inside" if inside else "at"
    piece = f"clip, {where} the bound ({kind})"
    return {"piece": piece, "torch_s": torch_s, "ours_s": ours_s, "same": same}


def pool_row(obs_dim: int, actions: int, hidden: int, minibatch: int, repeats: int) -> dict:
    """The node scorer's update pass (forward and backward of a minibatch) with its
    pooling written as torch's mean, then as `pool`."""
    torch.manual_seed(0)
    network = _flat_network("node-scorer", obs_dim, actions, hidden)
    obs = torch.randn(minibatch, obs_dim, generator=torch.Generator().manual_seed(2))

    def mean(embeddings: torch.Tensor) -> torch.Tensor:
        return embeddings.mean(dim=1, keepdim=True)

    def pooled_by(pooling: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        with mock.patch.object(networks, "pool", pooling):
            return update_pass(network, obs)

    same = _all_equal(pooled_by(mean), pooled_by(pool))
    torch_s, ours_s = alternate(lambda: pooled_by(mean), lambda: pooled_by(pool), repeats, 3)
    return {"piece": "scorer pass, pooling", "torch_s": torch_s, "ours_s": ours_s, "same": same}


def shuffle_row(frames: int, obs_dim: int, repeats: int) -> dict:
    """An epoch's gather of the rollout's observations, fresh against reused."""
    generator = torch.Generator().manual_seed(3)
    obs = torch.randn(frames, obs_dim, generator=generator)
    order = torch.randperm(frames, generator=generator)
    kept = torch.empty_like(obs)
    same = torch.equal(obs[order], torch.index_select(obs, 0, order, out=kept))
    torch_s, ours_s = alternate(
        lambda: obs[order], lambda: torch.index_select(obs, 0, order, out=kept), repeats, 10
    )
    return {"piece": "epoch shuffle of obs", "torch_s": torch_s, "ours_s": ours_s, "same": same}


def compile_row(
    kind: str, obs_dim: int, actions: int, hidden: int, minibatch: int, repeats: int
) -> dict:
    """One network's update pass, eager against `torch.compile`d, from the same weights."""
    eager, twin = _twins(kind, obs_dim, actions, hidden)
    compiled = torch.compile(twin)
    obs = torch.randn(minibatch, obs_dim, generator=torch.Generator().manual_seed(4))
    start = time.perf_counter()
    theirs = update_pass(compiled, obs)
    compile_s = time.perf_counter() - start
    same = _all_equal(update_pass(eager, obs), theirs)
    eager_s, compiled_s = alternate(
        lambda: update_pass(eager, obs), lambda: update_pass(compiled, obs), repeats, 3
    )
    return {
        "piece": f"{kind} update pass",
        "eager_s": eager_s,
        "compiled_s": compiled_s,
        "compile_s": compile_s,
        "same": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/small_demo.yaml"))
    parser.add_argument("--repeats", type=int, default=15, help="alternations per row")
    parser.add_argument("--compile", action="store_true", help="also try torch.compile")
    args = parser.parse_args()
    cfg = load_config(args.config)
    torch.set_num_threads(cfg.ppo.torch_threads)
    ppo, world = cfg.ppo, cfg.world
    nodes = world.regions * world.nodes_per_region
    obs_dim = ObsLayout(nodes).size
    frames = ppo.num_envs * ppo.rollout_steps
    minibatch = frames // ppo.num_minibatches
    rows = [
        adam_row("mlp", obs_dim, nodes, ppo.hidden_size, args.repeats),
        adam_row("node-scorer", obs_dim, nodes, ppo.hidden_size, args.repeats),
        clip_row("mlp", obs_dim, nodes, ppo.hidden_size, args.repeats, inside=False),
        clip_row("mlp", obs_dim, nodes, ppo.hidden_size, args.repeats, inside=True),
        pool_row(obs_dim, nodes, ppo.hidden_size, minibatch, args.repeats),
        shuffle_row(frames, obs_dim, args.repeats),
    ]
    print(
        f"PPO update pieces on {cfg.name} (minibatch {minibatch}, {nodes} nodes, hidden "
        f"{ppo.hidden_size}, torch_threads={ppo.torch_threads}); load {os.getloadavg()[0]:.2f}"
    )
    print(f"{'piece':<28}{'torch us':>12}{'ours us':>12}{'speed-up':>10}{'same numbers':>14}")
    for row in rows:
        print(
            f"{row['piece']:<28}{row['torch_s'] * 1e6:>12,.1f}{row['ours_s'] * 1e6:>12,.1f}"
            f"{row['torch_s'] / row['ours_s']:>9.2f}x{'yes' if row['same'] else 'NO':>14}"
        )
    compiled = []
    if args.compile:
        compiled = [
            compile_row(kind, obs_dim, nodes, ppo.hidden_size, minibatch, args.repeats)
            for kind in ("mlp", "node-scorer")
        ]
        print(
            f"{'candidate':<28}{'eager us':>12}{'compiled us':>13}{'compile s':>11}"
            f"{'same numbers':>14}"
        )
        for row in compiled:
            print(
                f"{row['piece']:<28}{row['eager_s'] * 1e6:>12,.1f}{row['compiled_s'] * 1e6:>13,.1f}"
                f"{row['compile_s']:>11.1f}{'yes' if row['same'] else 'no':>14}"
            )
    print(
        json.dumps(
            {
                "bench": "update",
                "config": cfg.name,
                "minibatch": minibatch,
                "rows": [
                    {
                        "piece": row["piece"],
                        "torch_us": round(row["torch_s"] * 1e6, 1),
                        "ours_us": round(row["ours_s"] * 1e6, 1),
                        "speedup": round(row["torch_s"] / row["ours_s"], 2),
                        "same_numbers": row["same"],
                    }
                    for row in rows
                ],
                "compiled": [
                    {
                        "piece": row["piece"],
                        "eager_us": round(row["eager_s"] * 1e6, 1),
                        "compiled_us": round(row["compiled_s"] * 1e6, 1),
                        "compile_s": round(row["compile_s"], 1),
                        "same_numbers": row["same"],
                    }
                    for row in compiled
                ],
                "load_avg_1min": round(os.getloadavg()[0], 2),
                "cpu": platform.processor() or platform.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
