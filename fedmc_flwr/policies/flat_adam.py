"""Adam over a network whose parameters live in one flat buffer.

torch's Adam on CPU updates one tensor at a time: about ten small ops per tensor, so for a
network of a dozen small tensors (35 k numbers) a step costs far more in dispatch than in
arithmetic. Adam's update is elementwise (each number reads only its own gradient and
moments), so running it once over a flat buffer that all the parameters view gives the
same numbers bit for bit, at the cost of one tensor's ops. The gradients live in one flat
buffer too: `zero_grad` hands every parameter a view of it, backward adds into those views,
so the step reads the buffer as it is, and `clip_grad_norm_` scales it with one multiply.

The step is torch's own single-tensor Adam (`torch.optim.adam._single_tensor_adam`, no
weight decay, no amsgrad), op for op, so the numbers are torch's bit for bit
(tests/test_flat_adam.py checks them against `torch.optim.Adam`). It is written out rather
than called because building any `torch.optim` optimizer imports `torch._dynamo` (2 to 4 s
of CPU: 4.4 s in a bare process, about 2 s in an actor that has Ray and Flower loaded),
which every process that trains would pay at its first round: each actor of a simulation
run, and each training message of the deployment engine.

The saved form stays per tensor (`adam.<i>.step`, `adam.<i>.exp_avg`, `adam.<i>.exp_avg_sq`),
so a learner's state reads the same whichever way it was trained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

MOMENT_KEYS = ("step", "exp_avg", "exp_avg_sq")
BETAS = (0.9, 0.999)
"""torch's default Adam betas."""
CLIP_EPS = 1e-6
"""What torch's `clip_grad_norm_` adds to the total norm before dividing by it."""
CLEAR_MARGIN = 1e-3
"""How far inside the bound, as a share of it, a float64 norm must be for the clip to be
skipped: float32's per-parameter norms err by ~1e-4 of the norm at most for 10^3 numbers."""


class FlatAdam:
    """torch.optim.Adam on one flat copy of `params`, which are rebound to view it."""

    def __init__(self, params: Sequence[nn.Parameter], lr: float, eps: float) -> None:
        self.lr = lr
        self._eps = eps
        self._params = list(params)
        self._flat = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in self._params]))
        self._flat.grad = torch.zeros_like(self._flat)
        self._spans: list[tuple[int, int]] = []
        self._grads: list[torch.Tensor] = []
        """Each parameter's view of the flat gradient, which `zero_grad` hands it."""
        offset = 0
        for p in self._params:
            self._spans.append((offset, offset + p.numel()))
            # Writes to the parameter (set_weights, load) now land in the buffer, and Adam's
            # writes to the buffer in the parameter.
            p.data = self._flat.data[offset : offset + p.numel()].view_as(p)
            self._grads.append(self._flat.grad[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        self._moments: dict[str, torch.Tensor] = {}
        """`MOMENT_KEYS`, over the flat buffer; empty until the first step, as torch's."""

    @property
    def updates(self) -> int:
        """Adam steps taken so far (0 before the first)."""
        return int(self._moments["step"]) if self._moments else 0

    def zero_grad(self) -> None:
        """Zero the flat gradient and make each parameter's gradient its view of it:
        backward adds into the views (as into any zeroed gradient: the same numbers), so
        the gradients are in the buffer with no copy."""
        self._flat.grad.zero_()
        for p, grad in zip(self._params, self._grads, strict=True):
            if p.grad is not grad:
                p.grad = grad

    def _gather(self) -> None:
        """Copy into the flat gradient each parameter's gradient that is not its view
        there (one set by hand, or left by a `zero_grad` of the network's own)."""
        for p, grad in zip(self._params, self._grads, strict=True):
            if p.grad is not grad:
                grad.copy_(p.grad)

    def clip_grad_norm_(self, max_norm: float) -> None:
        """`torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)` on the flat
        gradient, with its numbers bit for bit: each parameter's norm, the norm of those,
        and the same clamped coefficient, which scales every gradient by one multiply of
        the buffer rather than one per parameter.

        A gradient clearly inside the bound is left as it is, after one float64 norm of
        the buffer: torch's coefficient clamps to 1 there, and a multiply by 1 changes no
        number. Past a learner's first updates nearly every minibatch's gradient is inside
        (small_demo: after the first round, none clipped), and the per-parameter norms
        cost an op per parameter (18 for the two-tier network) where this costs one. The
        margin, `CLEAR_MARGIN` of the bound, is far wider than float32's rounding of the
        per-parameter norms; a non-finite norm fails the test and takes torch's path."""
        self._gather()
        with torch.no_grad():
            exact = float(torch.linalg.vector_norm(self._flat.grad, 2.0, dtype=torch.float64))
            if exact < (max_norm - CLIP_EPS) * (1.0 - CLEAR_MARGIN):
                return
            norms = [torch.linalg.vector_norm(grad, 2.0) for grad in self._grads]
            total_norm = torch.linalg.vector_norm(torch.stack(norms), 2.0)
            clip_coef = float(max_norm) / (total_norm + CLIP_EPS)
            self._flat.grad.mul_(torch.clamp(clip_coef, max=1.0))

    def step(self, correction: torch.Tensor | None = None) -> None:
        """One Adam step from the parameters' current gradients; `correction` (over the
        flat buffer, in the units of Adam's step direction) is added to the direction, so
        the parameters move by `-lr * (adam direction + correction)`: SCAFFOLD's
        correction of a local step (`federation/control_variates.py`)."""
        self._gather()
        grad = self._flat.grad
        if not self._moments:
            self._moments = {
                "step": torch.tensor(0.0, dtype=torch.float32),
                "exp_avg": torch.zeros_like(self._flat),
                "exp_avg_sq": torch.zeros_like(self._flat),
            }
        beta1, beta2 = BETAS
        step_t, exp_avg, exp_avg_sq = (self._moments[key] for key in MOMENT_KEYS)
        with torch.no_grad():
            step_t += 1
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step = step_t.item()
            step_size = self.lr / (1 - beta1**step)
            denom = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(self._eps)
            self._flat.addcdiv_(exp_avg, denom, value=-step_size)
            if correction is not None:
                self._flat.add_(correction, alpha=-self.lr)

    def state(self) -> dict[str, np.ndarray]:
        """Per-parameter moments in the saved form; empty before the first step."""
        moments = self._moments
        if not moments:
            return {}
        out: dict[str, np.ndarray] = {}
        for i, (p, (start, stop)) in enumerate(zip(self._params, self._spans, strict=True)):
            out[f"adam.{i}.step"] = moments["step"].numpy().copy()
            for key in MOMENT_KEYS[1:]:
                out[f"adam.{i}.{key}"] = moments[key][start:stop].view_as(p).numpy().copy()
        return out

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Adopt saved per-parameter moments; without them, start Adam afresh."""
        self._moments = {}
        if "adam.0.step" not in state:
            return
        count = len(self._params)
        missing = [
            f"adam.{i}.{key}"
            for i in range(count)
            for key in MOMENT_KEYS
            if f"adam.{i}.{key}" not in state
        ]
        if missing:
            raise ValueError(f"saved Adam moments lack {missing}")
        steps = {float(np.asarray(state[f"adam.{i}.step"])) for i in range(count)}
        if len(steps) != 1:
            raise ValueError(f"saved Adam steps differ between parameters: {sorted(steps)}")
        moments = {"step": torch.from_numpy(np.array(state["adam.0.step"]))}
        for key in MOMENT_KEYS[1:]:
            parts = [np.asarray(state[f"adam.{i}.{key}"]).reshape(-1) for i in range(count)]
            moments[key] = torch.from_numpy(np.concatenate(parts))
        self._moments = moments
