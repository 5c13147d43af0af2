"""What a region client's reply says, in the flat scalar dict a NumPyClient can return.

One virtual client may serve several regions (fewer clients than regions), so every value
is keyed `<region>/<name>` and the key `regions` lists the regions the reply covers. An
evaluation travels whole: its per-seed values (every metric, the seeds and their start
phases) as raw little-endian bytes, so the server pools them for confidence intervals and
writes per_seed.csv exactly as a local evaluation would. A training reply carries, beside
the round's means, each PPO update's diagnostics the same way (`updates_metrics`), for the
server's TensorBoard log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from flwr.common import Scalar

from fedmc_flwr.config import FederationConfig
from fedmc_flwr.evaluation import EvalResult
from fedmc_flwr.policies.ppo import UPDATE_METRICS
from fedmc_flwr.sim.world import METRIC_NAMES

REGIONS = "regions"
UPDATES = "updates."
"""Prefix of the per-update diagnostics in a training reply."""


def policy_name(federation: FederationConfig) -> str:
    """The learner's name in metrics.csv, from what its federation does: `ppo-fedavg`,
    `ppo-shrink` (server shrink), `ppo-fedavgm`, `ppo-fedadam` or `ppo-fedexp` (the server
    optimiser), `ppo-fedprox` (client proximal term), `ppo-scaffold` (drift correction), or
    several, then what each region keeps for itself:
    `-own-stats` (its statistics), `-own-critic` (its critic), `-fine-tuned` (judged with
    its own network)."""
    client = ["fedprox"] if federation.proximal_mu > 0 else []
    client += ["scaffold"] if federation.drift_correction != "none" else []
    server = ["shrink"] if federation.strategy == "shrink" else []
    if federation.server_optimizer != "none":
        server.append(federation.server_optimizer)
    personal = (
        ["own-stats"] * federation.personal_statistics
        + ["own-critic"] * federation.local_critic
        + ["fine-tuned"] * federation.fine_tuned
        + ([f"mix{federation.global_share:g}"] if federation.global_share < 1 else [])
    )
    return "-".join(["ppo", *(client + server or ["fedavg"]), *personal])


def with_control(weights: Sequence[np.ndarray], control: np.ndarray | None) -> list[np.ndarray]:
    """A training message's arrays: the global weights, then, under SCAFFOLD, the
    federation's control variate as one flat float64 array (`control_variates`)."""
    return [*weights, *([] if control is None else [control])]


def split_control(
    arrays: Sequence[np.ndarray], federation: FederationConfig
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Inverse of `with_control`: the weights and the control variate (None without
    drift correction)."""
    if federation.drift_correction == "none":
        return list(arrays), None
    return list(arrays[:-1]), np.asarray(arrays[-1], dtype=np.float64)


def pack(region: int, values: Mapping[str, Scalar]) -> dict[str, Scalar]:
    """`values` under the region's prefix."""
    return {f"{region}/{name}": value for name, value in values.items()}


def covering(regions: list[int]) -> dict[str, Scalar]:
    """The `regions` entry of a reply."""
    return {REGIONS: ",".join(map(str, regions))}


def regions(metrics: Mapping[str, Scalar]) -> list[int]:
    """The regions a reply covers, in the order its weight lists come."""
    listed = str(metrics.get(REGIONS, ""))
    try:
        return [int(r) for r in listed.split(",") if r]
    except ValueError:
        raise ValueError(f"reply lists regions {listed!r}; expected comma-separated ints") from None


def unpack(metrics: Mapping[str, Scalar], region: int) -> dict[str, Scalar]:
    """One region's values, prefix removed."""
    prefix = f"{region}/"
    return {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)}


def _bytes(values: np.ndarray, dtype: str) -> bytes:
    return np.asarray(values, dtype=dtype).tobytes()


def _array(raw: Scalar, dtype: str) -> np.ndarray:
    if not isinstance(raw, bytes):
        raise TypeError(f"expected raw bytes, got {type(raw).__name__}")
    return np.frombuffer(raw, dtype=dtype).copy()


def eval_metrics(result: EvalResult) -> dict[str, Scalar]:
    """An evaluation as scalars (unprefixed; `pack` adds the region). Per-seed arrays travel
    as raw little-endian bytes (float64; the seeds as uint64), bit for bit."""
    return {
        "policy": result.policy,
        "seeds": result.seeds,
        "steps": result.steps,
        "split": result.split,
        "per_seed_reward": _bytes(result.per_seed_reward, "<f8"),
        "eval_seeds": _bytes(result.eval_seeds, "<u8"),
        "start_phases": _bytes(result.start_phases, "<f8"),
        **{f"per_seed.{name}": _bytes(v, "<f8") for name, v in result.per_seed.items()},
        "latency_p95_ms": result.latency_p95_ms,
        **{f"mean.{name}": result.means[name] for name in METRIC_NAMES},
    }


def eval_result(metrics: Mapping[str, Scalar], region: int) -> EvalResult:
    """Inverse of `pack(region, eval_metrics(result))`."""
    values = unpack(metrics, region)
    try:
        seeds = int(values["seeds"])
        result = EvalResult(
            policy=str(values["policy"]),
            region=region,
            seeds=seeds,
            steps=int(values["steps"]),
            per_seed_reward=_array(values["per_seed_reward"], "<f8"),
            means={name: float(values[f"mean.{name}"]) for name in METRIC_NAMES},
            latency_p95_ms=float(values["latency_p95_ms"]),
            split=str(values["split"]),
            eval_seeds=_array(values["eval_seeds"], "<u8"),
            start_phases=_array(values["start_phases"], "<f8"),
            per_seed={
                key[len("per_seed.") :]: _array(value, "<f8")
                for key, value in values.items()
                if key.startswith("per_seed.")
            },
        )
    except KeyError as exc:
        raise ValueError(f"region {region}'s evaluation lacks {exc.args[0]!r}") from None
    except TypeError as exc:
        raise ValueError(f"region {region}'s evaluation is malformed: {exc}") from None
    arrays = [result.per_seed_reward, *result.per_seed.values()]
    if any(len(a) != seeds for a in arrays):
        raise ValueError(f"region {region}'s evaluation: per-seed arrays are not {seeds} long")
    return result


def updates_metrics(updates: Sequence[Mapping[str, float]]) -> dict[str, Scalar]:
    """A learner's PPO updates (`PPOLearner.updates`) as scalars (unprefixed): one raw
    float64 array per diagnostic of `UPDATE_METRICS`, one entry per update."""
    return {
        f"{UPDATES}{name}": _bytes([u[name] for u in updates], "<f8") for name in UPDATE_METRICS
    }


def updates_of(values: Mapping[str, Scalar]) -> list[dict[str, float]]:
    """Inverse of `updates_metrics` on one region's values (`unpack`): [] when the reply
    carries none or carries them malformed (they only feed TensorBoard, never a result)."""
    try:
        arrays = {name: _array(values[f"{UPDATES}{name}"], "<f8") for name in UPDATE_METRICS}
    except (KeyError, TypeError, ValueError):
        return []
    if len({len(a) for a in arrays.values()}) != 1:
        return []
    count = len(arrays[UPDATE_METRICS[0]])
    return [{name: float(arrays[name][i]) for name in UPDATE_METRICS} for i in range(count)]
