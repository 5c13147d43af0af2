"""`fedmc export`: a trained policy as one ONNX file that serves without torch.

The file holds the greedy policy exactly as `GreedyPolicy` acts: the observation
normaliser (in float64, with the very shift and scale `ObservationNorm.affine` computes, so
the network sees bit-identical inputs), the actor of any network kind (`ppo.policy`),
the action mask (masked logits set to `MASKED_LOGIT`) and the argmax (for `two-tier`, tier
by tier: its most probable region, then that region's most probable node; its logits are
`log p(region) + log p(node | region)` of every node). Inputs: `obs`
[B, obs_dim] float32 and `mask` [B, A] bool; outputs: `action` [B] int64 and `logits`
[B, A] float32. The graph is written node by node from the torch module's own layers, so
nothing traces Python code and no exporter version can change it. The estate's shape and
region names travel as metadata, for the hooks that map an action back to a region and
node. Two-tier and node-scorer weights fit any estate, so their checkpoints export for
whichever estate the config names.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fedmc_flwr.config import ExperimentConfig, load_config
from fedmc_flwr.errors import InputError
from fedmc_flwr.integrations.extras import require
from fedmc_flwr.outputs import output_file
from fedmc_flwr.policies import privileged
from fedmc_flwr.policies.checkpoints import read_checkpoint, run_config
from fedmc_flwr.policies.moments import MOMENT_ARRAYS, Moments
from fedmc_flwr.policies.networks import (
    MASKED_LOGIT,
    ActorCritic,
    FlatMLP,
    NodeScorer,
    TwoTier,
    build_network,
)
from fedmc_flwr.policies.normalisers import OBS_CLIP, ObservationNorm
from fedmc_flwr.sim.layout import EXPECTED_DELAY, GLOBAL_WIDTH, NODE_WIDTH, ObsLayout
from fedmc_flwr.sim.signals import build_spec

OPSET = 17
"""ONNX opset of the exported graph (onnxruntime has served it since 1.12)."""

onnx = require("onnx", "exporting a policy")
TensorProto, helper, numpy_helper = onnx.TensorProto, onnx.helper, onnx.numpy_helper


class ExportError(InputError, ValueError):
    """A checkpoint that cannot be exported, in one line."""


class _Graph:
    """The nodes and initialisers of a graph under construction, with unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def op(self, kind: str, inputs: list[str], out: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def dense(self, stack: nn.Sequential, x: str, prefix: str) -> str:
        """A stack of Linear, Tanh and ReLU layers on `x` (any leading dimensions)."""
        for k, layer in enumerate(stack):
            out = f"{prefix}{k}"
            if isinstance(layer, nn.Linear):
                w = layer.weight.detach().numpy().astype(np.float32).T.copy()
                b = layer.bias.detach().numpy().astype(np.float32)
                product = self.op("MatMul", [x, self.const(f"{prefix}W{k}", w)], f"{out}mm")
                x = self.op("Add", [product, self.const(f"{prefix}b{k}", b)], out)
            elif isinstance(layer, nn.Tanh):
                x = self.op("Tanh", [x], out)
            elif isinstance(layer, nn.ReLU):
                x = self.op("Relu", [x], out)
            else:
                raise ExportError(f"cannot export layer {type(layer).__name__}")
        return x


def _split(graph: _Graph, x: str, num_nodes: int) -> None:
    """`x` as "node_flat" (the node rows, flat) and "globals" (the global features), and
    the constant "axis1" the per-node graphs reuse."""
    flat = num_nodes * NODE_WIDTH
    i64 = np.int64
    graph.op(
        "Slice",
        [
            x,
            graph.const("node_lo", np.array([0], i64)),
            graph.const("node_hi", np.array([flat], i64)),
            graph.const("axis1", np.array([1], i64)),
        ],
        "node_flat",
    )
    graph.op(
        "Slice",
        [x, "node_hi", graph.const("glob_hi", np.array([flat + GLOBAL_WIDTH], i64)), "axis1"],
        "globals",
    )


def _scorer_logits(graph: _Graph, scorer: NodeScorer, x: str, num_nodes: int) -> str:
    """`NodeScorer.logits` on `x`: node rows beside the globals, encoder, mean context,
    head, one logit per node."""
    i64 = np.int64
    _split(graph, x, num_nodes)
    rows = graph.op(
        "Reshape",
        ["node_flat", graph.const("rows_shape", np.array([-1, num_nodes, NODE_WIDTH], i64))],
        "node_rows",
    )
    graph.op("Unsqueeze", ["globals", "axis1"], "globals1")
    spread = graph.const("spread", np.array([1, num_nodes, 1], i64))
    graph.op("Expand", ["globals1", spread], "globals_n")
    graph.op("Concat", [rows, "globals_n"], "scorer_in", axis=2)
    embedding = graph.dense(scorer.actor_encoder, "scorer_in", "enc")
    graph.op("ReduceMean", [embedding], "context1", axes=[1], keepdims=1)
    graph.op("Expand", ["context1", spread], "context")
    graph.op("Concat", [embedding, "context"], "head_in", axis=2)
    scores = graph.dense(scorer.actor_head, "head_in", "head")
    return graph.op("Squeeze", [scores, graph.const("axis2", np.array([2], i64))], "raw")


def _two_tier(graph: _Graph, network: TwoTier, x: str, layout: ObsLayout) -> tuple[str, str]:
    """`TwoTier.masked_logits` (every node scored) and `TwoTier.greedy` (the most probable
    region, then its most probable node) on `x`: (logits, action)."""
    i64, f32 = np.int64, np.float32
    regions, per_region = layout.num_regions, layout.num_nodes // layout.num_regions
    _split(graph, x, layout.num_nodes)
    estate = graph.const("estate_shape", np.array([-1, regions, per_region, NODE_WIDTH], i64))
    nodes = graph.op("Reshape", ["node_flat", estate], "nodes")
    grid = graph.const("grid_shape", np.array([-1, regions, per_region], i64))
    graph.op("Reshape", ["mask", grid], "mask_rn")
    graph.op("Cast", ["mask_rn"], "mask_f", to=TensorProto.FLOAT)
    graph.op("ReduceMean", [nodes], "node_mean", axes=[2], keepdims=0)
    delay_at = graph.const("delay_at", np.array(EXPECTED_DELAY, i64))
    graph.op("Gather", [nodes, delay_at], "delay", axis=3)
    inf = graph.const("inf", np.array(np.inf, f32))
    graph.op("Where", ["mask_rn", "delay", inf], "valid_delay")
    graph.op("ReduceMin", ["valid_delay"], "least_delay", axes=[2], keepdims=1)
    graph.op("ReduceMax", ["mask_f"], "any_valid", axes=[2], keepdims=1)
    graph.op("Cast", ["any_valid"], "valid1", to=TensorProto.BOOL)
    zero = graph.const("zero", np.array(0.0, f32))
    graph.op("Where", ["valid1", "least_delay", zero], "delay_summary")
    graph.op("ReduceMean", ["mask_f"], "share", axes=[2], keepdims=1)
    graph.op("Unsqueeze", ["globals", "axis1"], "globals1")
    graph.op(
        "Expand",
        ["globals1", graph.const("per_region", np.array([1, regions, 1], i64))],
        "globals_r",
    )
    graph.op("Concat", ["node_mean", "delay_summary", "share", "globals_r"], "summaries", axis=2)
    axis2 = graph.const("axis2", np.array([2], i64))
    axis3 = graph.const("axis3", np.array([3], i64))
    masked = graph.const("masked", np.array(MASKED_LOGIT, dtype=f32))
    region_raw = graph.dense(network.region_scorer, "summaries", "region")
    graph.op("Squeeze", [region_raw, axis2], "region_raw")
    graph.op("Squeeze", ["valid1", axis2], "valid")
    graph.op("Where", ["valid", "region_raw", masked], "region_masked")
    graph.op("LogSoftmax", ["region_masked"], "region_logp", axis=-1)
    graph.op("Unsqueeze", ["globals1", "axis1"], "globals11")
    spread = graph.const("per_node", np.array([1, regions, per_region, 1], i64))
    graph.op("Expand", ["globals11", spread], "globals_rn")
    graph.op("Concat", [nodes, "globals_rn"], "rows", axis=3)
    node_raw = graph.dense(network.node_scorer, "rows", "node")
    graph.op("Squeeze", [node_raw, axis3], "node_raw")
    graph.op("Where", ["mask_rn", "node_raw", masked], "node_masked")
    graph.op("LogSoftmax", ["node_masked"], "node_logp", axis=-1)
    graph.op("Unsqueeze", ["region_logp", axis2], "region_logp1")
    graph.op("Add", ["region_logp1", "node_logp"], "joint")
    graph.op(
        "Reshape",
        ["joint", graph.const("flat_shape", np.array([-1, layout.num_nodes], i64))],
        "raw",
    )
    graph.op("ArgMax", ["region_logp"], "region", axis=1, keepdims=1)
    graph.op("GatherND", ["node_logp", "region"], "chosen_logp", batch_dims=1)
    graph.op("ArgMax", ["chosen_logp"], "node", axis=1, keepdims=0)
    graph.op("Squeeze", ["region", "axis1"], "region_b")
    width = graph.const("nodes_per_region", np.array(per_region, i64))
    graph.op("Mul", ["region_b", width], "first_node")
    action = graph.op("Add", ["first_node", "node"], "action")
    return "raw", action


def policy_graph(
    network: ActorCritic,
    norm: ObservationNorm,
    layout: ObsLayout,
    metadata: dict[str, str],
) -> onnx.ModelProto:
    """The greedy masked policy as an ONNX model (see the module docstring)."""
    shift, scale = norm.affine(layout.num_nodes)
    graph = _Graph()
    graph.op("Cast", ["obs"], "obs64", to=TensorProto.DOUBLE)
    graph.op("Sub", ["obs64", graph.const("shift", shift.astype(np.float64))], "centred")
    graph.op("Mul", ["centred", graph.const("scale", scale.astype(np.float64))], "scaled")
    lo = graph.const("lo", np.array(-OBS_CLIP, dtype=np.float64))
    hi = graph.const("hi", np.array(OBS_CLIP, dtype=np.float64))
    graph.op("Clip", ["scaled", lo, hi], "clipped")
    graph.op("Cast", ["clipped"], "x", to=TensorProto.FLOAT)
    if isinstance(network, TwoTier):
        raw, _ = _two_tier(graph, network, "x", layout)
        graph.op("Where", ["mask", raw, "masked"], "logits")
    else:
        if isinstance(network, FlatMLP):
            raw = graph.dense(network.actor, "x", "mlp")
        elif isinstance(network, NodeScorer):
            raw = _scorer_logits(graph, network, "x", layout.num_nodes)
        else:
            raise ExportError(f"cannot export network {type(network).__name__}")
        masked = graph.const("masked", np.array(MASKED_LOGIT, dtype=np.float32))
        graph.op("Where", ["mask", raw, masked], "logits")
        graph.op("ArgMax", ["logits"], "action", axis=1, keepdims=0)
    body = helper.make_graph(
        graph.nodes,
        "fedmc_greedy_policy",
        [
            helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", layout.size]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, ["batch", layout.num_nodes]),
        ],
        [
            helper.make_tensor_value_info("action", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", layout.num_nodes]),
        ],
        graph.inits,
    )
    model = helper.make_model(
        body, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fedmc-flwr"
    )
    model.ir_version = 8  # the newest IR every supported onnxruntime reads
    helper.set_model_props(model, metadata)
    onnx.checker.check_model(model, full_check=True)
    return model


def load_network(
    cfg: ExperimentConfig, weights: list[np.ndarray]
) -> tuple[ActorCritic, ObservationNorm]:
    """The network and observation normaliser of a weight list laid out as `get_weights`,
    for the estate and network kind `cfg` names."""
    spec = build_spec(cfg.world, cfg.reward)
    layout = ObsLayout(spec.num_nodes, spec.num_regions)
    network = build_network(
        cfg.ppo.policy,
        layout.size,
        spec.num_nodes,
        cfg.ppo.hidden_size,
        spec.nodes_per_region,
        cfg.ppo.scorer_depth,
        privileged.width(cfg.ppo),
    )
    params = list(network.parameters())
    expected = len(params) + 2 * MOMENT_ARRAYS
    if len(weights) != expected:
        raise ExportError(
            f"checkpoint has {len(weights)} arrays, the config's {cfg.ppo.policy} {expected}"
        )
    with torch.no_grad():
        for k, (p, w) in enumerate(zip(params, weights, strict=False)):
            if tuple(np.shape(w)) != tuple(p.shape):
                raise ExportError(
                    f"checkpoint array w{k:03d} has shape {np.shape(w)}, "
                    f"the config's {cfg.ppo.policy} {tuple(p.shape)}"
                )
            p.copy_(torch.from_numpy(np.asarray(w, dtype=np.float32)))
    norm = ObservationNorm()
    norm.start_from(Moments.from_arrays(weights[len(params) : len(params) + MOMENT_ARRAYS]))
    return network.requires_grad_(False), norm


def export_policy(cfg: ExperimentConfig, weights: list[np.ndarray], out: Path) -> Path:
    """Write the greedy policy of `weights` under `cfg`'s estate to `out`."""
    network, norm = load_network(cfg, weights)
    spec = build_spec(cfg.world, cfg.reward)
    metadata = {
        "experiment": cfg.name,
        "policy": cfg.ppo.policy,
        "regions": json.dumps(spec.region_names),
        "nodes_per_region": str(spec.nodes_per_region),
    }
    model = policy_graph(network, norm, ObsLayout(spec.num_nodes, spec.num_regions), metadata)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, out)
    return out


def export_checkpoint(checkpoint: Path, out: Path, config: Path | None = None) -> Path:
    """`fedmc export`: read a checkpoint and its run's config, write the ONNX policy. A
    path it could not write is refused first, before any of the work."""
    output_file(out, "--out")
    cfg = load_config(config or run_config(checkpoint))
    return export_policy(cfg, read_checkpoint(checkpoint), out)
