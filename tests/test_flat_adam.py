"""FlatAdam: torch's Adam over one flat buffer gives the per-tensor numbers bit for bit,
without `torch.optim`'s import of `torch._dynamo`."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO, TINY

from fedmc_flwr.policies.flat_adam import FlatAdam
from fedmc_flwr.policies.networks import build_network


def _network(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_network(kind, 5 * 11 + 2, 5, 16, nodes_per_region=5)


def _train(network: torch.nn.Module, step, zero_grad, set_lr, steps: int, seed: int) -> None:
    """Random gradients of varied magnitudes and a decaying step size, as PPO makes them."""
    generator = torch.Generator().manual_seed(seed)
    params = list(network.parameters())
    for k in range(steps):
        zero_grad()
        for p in params:
            scale = 10.0 ** int(torch.randint(-6, 2, (1,), generator=generator))
            p.grad = (p.grad if p.grad is not None else torch.zeros_like(p)) + scale * torch.randn(
                p.shape, generator=generator
            )
        set_lr(1e-2 * (1 - k / (2 * steps)))
        step()


def _flat_values(network: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in network.parameters()])


@pytest.mark.parametrize("kind", ["two-tier", "mlp", "node-scorer"])
def test_same_numbers_as_per_tensor_adam(kind: str) -> None:
    reference, flat = _network(kind), _network(kind)
    adam = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5, foreach=False)

    def set_reference_lr(lr: float) -> None:
        adam.param_groups[0]["lr"] = lr

    optimizer = FlatAdam(list(flat.parameters()), lr=1e-2, eps=1e-5)
    with torch.no_grad():  # a write to a parameter (set_weights, load) after the buffer is made
        for network in (reference, flat):
            next(network.parameters()).fill_(0.5)
    _train(reference, adam.step, lambda: adam.zero_grad(set_to_none=False), set_reference_lr, 60, 1)

    def set_flat_lr(lr: float) -> None:
        optimizer.lr = lr

    _train(flat, optimizer.step, optimizer.zero_grad, set_flat_lr, 60, 1)
    assert torch.equal(_flat_values(reference), _flat_values(flat))
    assert optimizer.updates == 60
    state = optimizer.state()  # the saved form is per tensor, as torch keeps it
    for i, p in enumerate(reference.parameters()):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(state[f"adam.{i}.{key}"], adam.state[p][key].numpy())


def test_saved_state_resumes_exactly() -> None:
    """Train, save, load into a fresh optimizer over a copy: both go on to the same numbers."""
    first, second = _network("mlp"), _network("mlp")
    a = FlatAdam(list(first.parameters()), lr=1e-2, eps=1e-5)
    assert a.state() == {} and a.updates == 0
    _train(first, a.step, a.zero_grad, lambda lr: setattr(a, "lr", lr), 20, 2)
    b = FlatAdam(list(second.parameters()), lr=1e-2, eps=1e-5)
    with torch.no_grad():
        for p, q in zip(second.parameters(), first.parameters(), strict=True):
            p.copy_(q)
    b.load_state(a.state())
    assert b.updates == 20
    _train(first, a.step, a.zero_grad, lambda lr: setattr(a, "lr", lr), 10, 3)
    _train(second, b.step, b.zero_grad, lambda lr: setattr(b, "lr", lr), 10, 3)
    assert torch.equal(_flat_values(first), _flat_values(second))


def test_inconsistent_or_partial_saved_moments_are_refused() -> None:
    network = _network("mlp")
    optimizer = FlatAdam(list(network.parameters()), lr=1e-2, eps=1e-5)
    _train(network, optimizer.step, optimizer.zero_grad, lambda lr: None, 2, 4)
    state = optimizer.state()
    state["adam.1.step"] = state["adam.1.step"] + 1
    with pytest.raises(ValueError, match="steps differ"):
        optimizer.load_state(state)
    del state["adam.2.exp_avg_sq"]
    with pytest.raises(ValueError, match=r"lack \['adam.2.exp_avg_sq'\]"):
        optimizer.load_state(state)


def test_a_training_round_in_a_fresh_process_never_imports_torch_dynamo() -> None:
    """The point of taking Adam's step here: every process that trains (an actor, a
    deployment-engine message) would otherwise import `torch._dynamo` at its first round."""
    probe = (
        "import sys\n"
        "from fedmc_flwr.config import learner_plan, load_config\n"
        "from fedmc_flwr.policies.ppo import PPOLearner\n"
        f"cfg = load_config({str(TINY)!r})\n"
        "PPOLearner(learner_plan(cfg, [0]), seed=0).train_round(cfg.ppo.rollout_steps)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clipping_and_backward_into_the_flat_gradient_match_torch(max_norm: float) -> None:
    """Backward adds into the views `zero_grad` hands out, and `clip_grad_norm_` scales
    the buffer once: the clipped gradients and the step after them are torch's bit for
    bit (clipped, and unclipped where the coefficient clamps to 1)."""
    reference, flat = _network("two-tier"), _network("two-tier")
    adam = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5, foreach=False)
    optimizer = FlatAdam(list(flat.parameters()), lr=1e-2, eps=1e-5)
    generator = torch.Generator().manual_seed(5)
    for _ in range(3):
        summaries = torch.randn(32, 5, 15, generator=generator)
        rows = torch.randn(32, 5, 13, generator=generator)
        batch = {
            "summaries": summaries,
            "valid": torch.ones(32, 5, dtype=torch.bool),
            "rows": rows,
            "node_mask": torch.rand(32, 5, generator=generator) > 0.2,
        }
        actions = torch.randint(0, 25, (32,), generator=generator)
        adam.zero_grad(set_to_none=False)
        optimizer.zero_grad()
        for network in (reference, flat):
            logp, entropy, values = network.evaluate(batch, actions)
            (logp.mean() + 0.01 * entropy.mean() + values.pow(2).mean()).backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm, foreach=False)
        optimizer.clip_grad_norm_(max_norm)
        for p, q in zip(reference.parameters(), flat.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)
        adam.step()
        optimizer.step()
    assert torch.equal(_flat_values(reference), _flat_values(flat))


@pytest.mark.parametrize("bound_over_norm", [0.5, 0.9995, 1.0, 1.0005, 1.0015, 2.0])
def test_a_gradient_near_or_inside_the_bound_is_clipped_as_torch_clips_it(
    bound_over_norm: float,
) -> None:
    """A gradient clearly inside the bound is left as it is without torch's per-tensor
    norms; one near the bound, on either side, takes torch's path. Either way the
    gradients are torch's bit for bit."""
    reference, flat = _network("two-tier"), _network("two-tier")
    optimizer = FlatAdam(list(flat.parameters()), lr=1e-2, eps=1e-5)
    generator = torch.Generator().manual_seed(9)
    for network in (reference, flat):
        network.zero_grad()
    optimizer.zero_grad()
    for p, q in zip(reference.parameters(), flat.parameters(), strict=True):
        noise = torch.randn(p.shape, generator=generator)
        p.grad = noise.clone()
        q.grad.copy_(noise)
    norm = float(
        torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in reference.parameters()]))
    )
    bound = norm * bound_over_norm
    torch.nn.utils.clip_grad_norm_(reference.parameters(), bound, foreach=False)
    optimizer.clip_grad_norm_(bound)
    for p, q in zip(reference.parameters(), flat.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
