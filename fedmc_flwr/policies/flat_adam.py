"""Adam over a network whose parameters live in one flat buffer.

torch's Adam on CPU updates one tensor at a time: about ten small ops per tensor, so for a
network of a dozen small tensors (35 k numbers) a step costs far more in dispatch than in
arithmetic. Adam's update is elementwise (each number reads only its own gradient and
moments), so running it once over a flat buffer that all the parameters view gives the
same numbers bit for bit, at the cost of one tensor's ops. The gradients are gathered into
the buffer's gradient after they are clipped, which the learner does per tensor as before.

The saved form stays per tensor (`adam.<i>.step`, `adam.<i>.exp_avg`, `adam.<i>.exp_avg_sq`),
so a learner's state reads the same whichever way it was trained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

MOMENT_KEYS = ("step", "exp_avg", "exp_avg_sq")


class FlatAdam:
    """torch.optim.Adam on one flat copy of `params`, which are rebound to view it."""

    def __init__(self, params: Sequence[nn.Parameter], lr: float, eps: float) -> None:
        self._params = list(params)
        self._flat = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in self._params]))
        self._flat.grad = torch.zeros_like(self._flat)
        self._spans: list[tuple[int, int]] = []
        offset = 0
        for p in self._params:
            self._spans.append((offset, offset + p.numel()))
            # Writes to the parameter (set_weights, load) now land in the buffer, and Adam's
            # writes to the buffer in the parameter.
            p.data = self._flat.data[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        self._adam = torch.optim.Adam([self._flat], lr=lr, eps=eps, foreach=False)

    @property
    def lr(self) -> float:
        return float(self._adam.param_groups[0]["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        self._adam.param_groups[0]["lr"] = value

    @property
    def updates(self) -> int:
        """Adam steps taken so far (0 before the first)."""
        moments = self._adam.state.get(self._flat)
        return int(moments["step"]) if moments else 0

    def zero_grad(self) -> None:
        """Zero the parameters' own gradients in place (backward adds to them)."""
        for p in self._params:
            if p.grad is not None:
                p.grad.zero_()

    def step(self) -> None:
        """One Adam step from the parameters' current gradients."""
        torch.cat([p.grad.reshape(-1) for p in self._params], out=self._flat.grad)
        self._adam.step()

    def state(self) -> dict[str, np.ndarray]:
        """Per-parameter moments in the saved form; empty before the first step."""
        moments = self._adam.state.get(self._flat)
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
        self._adam.state.clear()
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
        self._adam.state[self._flat] = moments
