"""Serving an exported policy with onnxruntime: no torch in the process.

A platform's dispatcher or hook runs where a 700 MB deep-learning stack is unwelcome, so
this module imports numpy and onnxruntime only (a test checks that torch stays out of
`sys.modules`). `OnnxPolicy` serves the same `act(obs, mask)` interface as every other
dispatcher, so it drops into the evaluation and the hooks unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from fedmc_flwr.errors import InputError


class PolicyFileError(InputError, ValueError):
    """A policy file that cannot serve: no ONNX model, not a `fedmc export`, or exported
    for another estate than the one it is asked to act on; one line."""


class OnnxPolicy:
    """The greedy policy of a `fedmc export` file.

    `threads` is onnxruntime's intra-op thread count: 1 by default, because a batch of one
    observation finishes before a second thread would have started, and a serving process
    shares its cores with the rest of the platform.
    """

    def __init__(self, path: str | Path, name: str = "ppo-onnx", threads: int = 1) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.name = name
        self.path = Path(path)
        try:
            self._session = ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own classes, one per failure kind
            raise PolicyFileError(
                f"{self.path}: not a readable ONNX policy ({type(exc).__name__})"
            ) from None
        meta = self._session.get_modelmeta().custom_metadata_map
        try:
            self.region_names: list[str] = json.loads(meta["regions"])
            self.nodes_per_region = int(meta["nodes_per_region"])
            if not (
                isinstance(self.region_names, list)
                and all(isinstance(name, str) for name in self.region_names)
                and self.region_names
                and self.nodes_per_region > 0
            ):
                raise ValueError
        except (KeyError, ValueError):
            raise PolicyFileError(
                f"{self.path}: an ONNX model without fedmc export's estate metadata "
                "(regions, nodes_per_region); write the policy with fedmc export"
            ) from None
        self.num_actions = len(self.region_names) * self.nodes_per_region

    def run(self, obs: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[B] int64 actions and [B, A] float32 masked logits."""
        feeds = {
            "obs": np.ascontiguousarray(obs, dtype=np.float32),
            "mask": np.ascontiguousarray(mask, dtype=np.bool_),
        }
        action, logits = self._session.run(None, feeds)
        return action, logits

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """[B, obs_dim] observations and [B, A] masks -> [B] int64 actions."""
        return self.run(obs, mask)[0]
