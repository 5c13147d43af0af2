"""`fedmc export`: a trained policy as one ONNX file that serves without torch.

The file holds the greedy policy exactly as `GreedyPolicy` acts: the observation
normaliser (in float64, as `normalise` computes it, so the network sees bit-identical
inputs), the actor MLP, the action mask (masked logits set to `MASKED_LOGIT`) and the
argmax. Inputs: `obs` [B, obs_dim] float32 and `mask` [B, A] bool; outputs: `action` [B]
int64 and `logits` [B, A] float32. The graph is written node by node from the torch
module's own layers, so nothing traces Python code and no exporter version can change it.
The estate's shape and region names travel as metadata, for the hooks that map an action
back to a region and node.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from fedmc_flwr.config import ExperimentConfig, load_config
from fedmc_flwr.policies.moments import MOMENT_ARRAYS, Moments
from fedmc_flwr.policies.ppo import (
    MASKED_LOGIT,
    OBS_CLIP,
    ActorCritic,
    standardised_features,
)
from fedmc_flwr.sim.signals import build_spec
from fedmc_flwr.sim.world import ObsLayout

OPSET = 17
"""ONNX opset of the exported graph (onnxruntime has served it since 1.12)."""


class ExportError(ValueError):
    """A checkpoint that cannot be exported, in one line."""


def read_checkpoint(path: Path) -> list[np.ndarray]:
    """The `w000, w001, ...` arrays of a federated checkpoint, in order."""
    if not path.is_file():
        raise ExportError(f"{path}: no such checkpoint")
    with np.load(path, allow_pickle=False) as data:
        keys = sorted(k for k in data.files if k.startswith("w") and k[1:].isdigit())
        if not keys:
            raise ExportError(f"{path}: not a federated checkpoint (no w000, w001, ... arrays)")
        return [data[k] for k in keys]


def checkpoint_config(checkpoint: Path) -> Path:
    """`results/<exp>/config.yaml` of `results/<exp>/checkpoints/round_NNN.npz`."""
    return checkpoint.resolve().parent.parent / "config.yaml"


def _actor_nodes(actor: nn.Sequential, x: str) -> tuple[list, list, str]:
    """Gemm/Tanh nodes and initialisers of the actor MLP applied to tensor `x`."""
    nodes, inits = [], []
    for k, layer in enumerate(actor):
        out = f"h{k}"
        if isinstance(layer, nn.Linear):
            w = layer.weight.detach().numpy().astype(np.float32)
            b = layer.bias.detach().numpy().astype(np.float32)
            inits += [numpy_helper.from_array(w, f"W{k}"), numpy_helper.from_array(b, f"b{k}")]
            nodes.append(helper.make_node("Gemm", [x, f"W{k}", f"b{k}"], [out], transB=1))
        elif isinstance(layer, nn.Tanh):
            nodes.append(helper.make_node("Tanh", [x], [out]))
        else:
            raise ExportError(f"cannot export actor layer {type(layer).__name__}")
        x = out
    return nodes, inits, x


def policy_graph(
    actor: nn.Sequential, moments: Moments, columns: np.ndarray, metadata: dict[str, str]
) -> onnx.ModelProto:
    """The greedy masked policy as an ONNX model (see the module docstring)."""
    obs_dim = len(columns)
    num_actions = actor[-1].out_features
    shift = np.where(columns, moments.mean, 0.0).astype(np.float64)
    scale = np.where(columns, 1.0 / np.sqrt(moments.var + 1e-8), 1.0).astype(np.float64)
    inits = [
        numpy_helper.from_array(shift, "shift"),
        numpy_helper.from_array(scale, "scale"),
        numpy_helper.from_array(np.array(-OBS_CLIP, dtype=np.float64), "lo"),
        numpy_helper.from_array(np.array(OBS_CLIP, dtype=np.float64), "hi"),
        numpy_helper.from_array(np.array(MASKED_LOGIT, dtype=np.float32), "masked"),
    ]
    nodes = [
        helper.make_node("Cast", ["obs"], ["obs64"], to=TensorProto.DOUBLE),
        helper.make_node("Sub", ["obs64", "shift"], ["centred"]),
        helper.make_node("Mul", ["centred", "scale"], ["scaled"]),
        helper.make_node("Clip", ["scaled", "lo", "hi"], ["clipped"]),
        helper.make_node("Cast", ["clipped"], ["x"], to=TensorProto.FLOAT),
    ]
    mlp, weights, raw = _actor_nodes(actor, "x")
    nodes += [
        *mlp,
        helper.make_node("Where", ["mask", raw, "masked"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["action"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "fedmc_greedy_policy",
        [
            helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, ["batch", num_actions]),
        ],
        [
            helper.make_tensor_value_info("action", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", num_actions]),
        ],
        inits + weights,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fedmc-flwr"
    )
    model.ir_version = 8  # the newest IR every supported onnxruntime reads
    helper.set_model_props(model, metadata)
    onnx.checker.check_model(model, full_check=True)
    return model


def load_actor(cfg: ExperimentConfig, weights: list[np.ndarray]) -> tuple[nn.Sequential, Moments]:
    """The actor and observation moments of a weight list laid out as `get_weights`."""
    spec = build_spec(cfg.world, cfg.reward)
    layout = ObsLayout(spec.num_nodes, spec.num_regions)
    model = ActorCritic(layout.size, spec.num_nodes, cfg.ppo.hidden_size)
    params = list(model.parameters())
    expected = len(params) + 2 * MOMENT_ARRAYS
    if len(weights) != expected:
        raise ExportError(f"checkpoint has {len(weights)} arrays, the config's network {expected}")
    with torch.no_grad():
        for k, (p, w) in enumerate(zip(params, weights, strict=False)):
            if tuple(np.shape(w)) != tuple(p.shape):
                raise ExportError(
                    f"checkpoint array w{k:03d} has shape {np.shape(w)}, "
                    f"the config's network {tuple(p.shape)}"
                )
            p.copy_(torch.from_numpy(np.asarray(w, dtype=np.float32)))
    stats = weights[len(params) : len(params) + MOMENT_ARRAYS]
    return model.actor.requires_grad_(False), Moments.from_arrays(stats)


def export_policy(cfg: ExperimentConfig, weights: list[np.ndarray], out: Path) -> Path:
    """Write the greedy policy of `weights` under `cfg`'s estate to `out`."""
    actor, moments = load_actor(cfg, weights)
    spec = build_spec(cfg.world, cfg.reward)
    columns = standardised_features(ObsLayout(spec.num_nodes, spec.num_regions))
    metadata = {
        "experiment": cfg.name,
        "regions": json.dumps(spec.region_names),
        "nodes_per_region": str(spec.nodes_per_region),
    }
    model = policy_graph(actor, moments, columns, metadata)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, out)
    return out


def export_checkpoint(checkpoint: Path, out: Path, config: Path | None = None) -> Path:
    """`fedmc export`: read a checkpoint and its run's config, write the ONNX policy."""
    cfg = load_config(config or checkpoint_config(checkpoint))
    return export_policy(cfg, read_checkpoint(checkpoint), out)
