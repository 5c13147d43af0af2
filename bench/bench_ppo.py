"""Training frames per second of our PPO learner against Stable-Baselines3 PPO.

All train on the same world, in the same process, with the same settings: `--envs`
parallel worlds, the config's rollout length, minibatch size, epochs and hidden width,
observation and reward normalisation, and the same pinned torch thread count. Ours runs
once per network kind (`ppo.policy`: the two-tier network, the default; the flat MLP,
which SB3's MlpPolicy matches with its two tanh layers for actor and critic; the node
scorer). Our learner steps the batched
`MultiCloudSim` directly; SB3 steps the Gymnasium env `fedmc/MultiCloud-v0` (a
batch-of-one view of the same world) in its `DummyVecEnv`, wrapped in `VecNormalize`. Each
is warmed up with one rollout and update, then timed over `--rollouts` rollouts and
updates; a frame is one env step.

Beside each of our networks, in the same run, the bound its update sets: the frames per
second of the update's network passes alone (forward and backward of actor and critic over
as many minibatches of the same size, of a real rollout's stored inputs, with nothing
else: no loss terms, no optimizer, no collection). Training can never run faster than
that; past it, only fewer or cheaper passes help, which changes what is learned. The
two are timed in turns, a rollout and update of training, then the passes of one
rollout, and so on: on a shared machine whose speed drifts by 10% or more from one minute
to the next, timing one after the other made their ratio drift as much.

The two-tier network acts through its compiled path (`policies/acting.py`); the row
"two-tier, torch acting" runs the same learner acting through the torch network's own
forward instead (`acting.TorchActor`, what the flat MLP and the node scorer use), so the
compiled path's gain is measured side by side. Targets of the default network: at least
45,000 frames/s, 2.5x SB3's, and 0.6x its own update passes alone, on a quiet machine
(the 1-minute load average, printed, under 1.5). The next target, 0.7x its update passes
alone, is printed beside it: how far along the learner is, not yet held.

Prints a table; then, per learner, the milliseconds of one rollout and update spent in
collection and in the update, its passes alone beside them, and the rest of the round
(the profile of what lies between training and its bound); then one JSON line of the
figures.

    python bench/bench_ppo.py [--config conf/small_demo.yaml] [--envs 64] [--rollouts 6]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest import mock

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from fedmc_flwr.config import ExperimentConfig, PPOConfig, learner_plan, load_config
from fedmc_flwr.policies import ppo as ppo_module
from fedmc_flwr.policies.acting import TorchActor
from fedmc_flwr.policies.networks import KINDS, ActorCritic
from fedmc_flwr.policies.ppo import TRAIN_METRICS, PPOLearner
from fedmc_flwr.sim import ENV_ID

DEFAULT_KIND = PPOConfig().policy
TARGET_FRAMES_PER_S = 45_000
TARGET_RATIO = 2.5
TARGET_OF_PASSES = 0.6
QUIET_LOAD = 1.5
"""The default network's targets: frames/s, its frames/s over SB3's and over its own
update passes alone; and the load average under which the machine counts as quiet."""
NEXT_OF_PASSES = 0.7
"""The next target of the default network's frames/s over its update passes alone
(issue 48): printed, and in the JSON, but not yet part of `targets_met`."""
TORCH_ACTING = "two-tier, torch acting"


def _learner(cfg: ExperimentConfig, kind: str) -> PPOLearner:
    """A learner of network `kind` on every region, at the config's settings."""
    # only the two-tier network has a privileged critic
    privileged_critic = cfg.ppo.privileged_critic and kind == "two-tier"
    ppo = replace(cfg.ppo, policy=kind, privileged_critic=privileged_critic)
    cfg = replace(cfg, ppo=ppo)
    return PPOLearner(learner_plan(cfg, list(range(cfg.world.regions))), cfg.seed)


def update_pass(model: ActorCritic, batch: dict[str, torch.Tensor]) -> None:
    """Forward and backward of actor and critic over one minibatch, without loss terms."""
    model.zero_grad(set_to_none=True)
    logp, _, values = model.evaluate(batch, batch["actions"])
    (logp.sum() + values.sum()).backward()


def passes_of_one_rollout(cfg: ExperimentConfig, kind: str) -> Callable[[], None]:
    """The update's forward and backward passes alone over one rollout's worth of
    minibatches (see above), on a minibatch of a real rollout's stored inputs."""
    learner = _learner(cfg, kind)
    model, ppo = learner.model, cfg.ppo
    frames = ppo.num_envs * ppo.rollout_steps
    learner.norm.update(learner.obs)
    rollout = learner._collect(ppo.rollout_steps, np.zeros(len(TRAIN_METRICS)))
    batch = {key: value[: frames // ppo.num_minibatches].clone() for key, value in rollout.items()}

    def passes() -> None:
        for _ in range(ppo.update_epochs * ppo.num_minibatches):
            update_pass(model, batch)

    return passes


@dataclass(frozen=True)
class Measured:
    """One learner's figures: training and update-pass frames/s, and the seconds a rollout
    and update spent collecting, updating (`PPOLearner._collect`, `_update`) and in the
    passes alone, each per rollout."""

    training: float
    passes: float
    collection_s: float
    update_s: float
    passes_s: float


def frames_per_second(
    cfg: ExperimentConfig, rollouts: int, kind: str, torch_acting: bool = False
) -> Measured:
    """Frames per second of PPOLearner.train_round, one rollout and update at a time, and
    of its update passes alone; with `torch_acting`, acting through the torch forward
    rather than the compiled path. The two are timed in turns, a rollout of each, so that
    the host's drift in speed (a shared machine's) hits both alike and their ratio holds.
    The learner's collection and update are timed inside its rounds: what is left of a
    round beyond them is its bookkeeping."""
    learner = _learner(cfg, kind)
    passes = passes_of_one_rollout(cfg, kind)
    frames = cfg.ppo.num_envs * cfg.ppo.rollout_steps
    spent = dict.fromkeys(("training", "passes", "collection", "update"), 0.0)

    def timed(method: Callable[..., Any], key: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - start

        return run

    with mock.patch.object(ppo_module, "actor_of", TorchActor) if torch_acting else nullcontext():
        learner.train_round(cfg.ppo.rollout_steps)  # warm-up
        passes()
        with (
            mock.patch.object(learner, "_collect", timed(learner._collect, "collection")),
            mock.patch.object(learner, "_update", timed(learner._update, "update")),
        ):
            for _ in range(rollouts):
                timed(learner.train_round, "training")(cfg.ppo.rollout_steps)
                timed(passes, "passes")()
    return Measured(
        training=frames * rollouts / spent["training"],
        passes=frames * rollouts / spent["passes"],
        collection_s=spent["collection"] / rollouts,
        update_s=spent["update"] / rollouts,
        passes_s=spent["passes"] / rollouts,
    )


def _profile(measured: Measured, frames: int) -> dict[str, float]:
    """Milliseconds of one rollout and update: collection, update, passes alone, and the
    round's rest (its training time less collection and update)."""
    round_s = frames / measured.training
    rest_s = round_s - measured.collection_s - measured.update_s
    seconds = (measured.collection_s, measured.update_s, measured.passes_s, rest_s)
    keys = ("collection", "update", "passes", "rest")
    return {key: round(1000 * value, 2) for key, value in zip(keys, seconds, strict=True)}


def sb3_frames_per_second(cfg: ExperimentConfig, config_path: Path, rollouts: int) -> float:
    """Frames per second of SB3 PPO.learn at the same settings, on the Gymnasium env."""
    ppo = cfg.ppo
    envs = VecNormalize(
        make_vec_env(
            lambda: gym.make(ENV_ID, config=config_path),
            n_envs=ppo.num_envs,
            seed=cfg.seed,
        ),
        gamma=ppo.gamma,
    )
    batch = ppo.num_envs * ppo.rollout_steps
    model = PPO(
        "MlpPolicy",
        envs,
        learning_rate=ppo.learning_rate,
        n_steps=ppo.rollout_steps,
        batch_size=batch // ppo.num_minibatches,
        n_epochs=ppo.update_epochs,
        gamma=ppo.gamma,
        gae_lambda=ppo.gae_lambda,
        clip_range=ppo.clip_coef,
        ent_coef=ppo.ent_coef,
        vf_coef=ppo.vf_coef,
        max_grad_norm=ppo.max_grad_norm,
        policy_kwargs={
            "net_arch": {"pi": [ppo.hidden_size] * 2, "vf": [ppo.hidden_size] * 2},
            "activation_fn": torch.nn.Tanh,
        },
        seed=cfg.seed,
        device="cpu",
        verbose=0,
    )
    model.learn(total_timesteps=batch)  # warm-up
    start = time.perf_counter()
    model.learn(total_timesteps=batch * rollouts, reset_num_timesteps=False)
    return batch * rollouts / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/small_demo.yaml"))
    parser.add_argument("--envs", type=int, default=64, help="parallel worlds of each learner")
    parser.add_argument("--rollouts", type=int, default=6, help="timed rollouts + updates")
    args = parser.parse_args()
    cfg = load_config(args.config, [f"ppo.num_envs={args.envs}"])
    threads = cfg.ppo.torch_threads
    torch.set_num_threads(threads)

    measured = {kind: frames_per_second(cfg, args.rollouts, kind) for kind in KINDS}
    measured[TORCH_ACTING] = frames_per_second(cfg, args.rollouts, DEFAULT_KIND, True)
    kinds = {kind: m.training for kind, m in measured.items()}
    bounds = {kind: m.passes for kind, m in measured.items()}
    sb3 = sb3_frames_per_second(cfg, args.config.resolve(), args.rollouts)
    load = os.getloadavg()[0]
    ours = kinds[DEFAULT_KIND]
    ratio = ours / sb3
    of_passes = ours / bounds[DEFAULT_KIND]
    ppo = cfg.ppo
    settings = (
        f"envs={ppo.num_envs} rollout={ppo.rollout_steps} "
        f"minibatch={ppo.num_envs * ppo.rollout_steps // ppo.num_minibatches} "
        f"epochs={ppo.update_epochs} hidden={ppo.hidden_size}x2 torch_threads={threads}"
    )
    quiet = "quiet" if load < QUIET_LOAD else f"NOT quiet (>= {QUIET_LOAD})"
    print(f"PPO training frames/s on {cfg.name} ({settings}); load {load:.2f}, {quiet}")
    head = f"{'learner':<34}{'frames/s':>10}{'x SB3':>8}{'passes alone':>14}{'of passes':>11}"
    print(head)
    for kind, rate in kinds.items():
        bound = bounds[kind]
        print(
            f"{f'fedmc PPO {kind}':<34}{rate:>10,.0f}{rate / sb3:>7.2f}x{bound:>14,.0f}"
            f"{rate / bound:>10.2f}x"
        )
    print(f"{'stable-baselines3 PPO':<34}{sb3:>10,.0f}{1.0:>7.2f}x")
    print("\nms of one rollout and update: collection, the update (its passes alone beside it),")
    print("and the rest of the round")
    print(f"{'learner':<34}{'collection':>11}{'update':>9}{'passes':>9}{'rest':>7}")
    profile = {kind: _profile(m, ppo.num_envs * ppo.rollout_steps) for kind, m in measured.items()}
    for kind, ms in profile.items():
        print(
            f"{f'fedmc PPO {kind}':<34}{ms['collection']:>11.1f}{ms['update']:>9.1f}"
            f"{ms['passes']:>9.1f}{ms['rest']:>7.1f}"
        )
    met = ours >= TARGET_FRAMES_PER_S and ratio >= TARGET_RATIO and of_passes >= TARGET_OF_PASSES
    next_met = of_passes >= NEXT_OF_PASSES
    print(
        f"{DEFAULT_KIND} (the default): {ours:,.0f} frames/s, {ratio:.2f}x SB3, {of_passes:.2f}x "
        f"its update passes alone, {ours / kinds[TORCH_ACTING]:.2f}x its torch acting; targets "
        f">= {TARGET_FRAMES_PER_S:,} frames/s, >= {TARGET_RATIO}x SB3, >= {TARGET_OF_PASSES}x "
        f"passes: {'met' if met else 'NOT met'}; next >= {NEXT_OF_PASSES}x passes: "
        f"{'met' if next_met else 'not yet'} ({of_passes / NEXT_OF_PASSES:.2f} of it)"
    )
    print(
        json.dumps(
            {
                "bench": "ppo",
                "config": cfg.name,
                "envs": ppo.num_envs,
                "rollout_steps": ppo.rollout_steps,
                "minibatch": ppo.num_envs * ppo.rollout_steps // ppo.num_minibatches,
                "epochs": ppo.update_epochs,
                "hidden": ppo.hidden_size,
                "torch_threads": threads,
                "default_kind": DEFAULT_KIND,
                "frames_per_s": {kind: round(rate, 1) for kind, rate in kinds.items()},
                "update_passes_frames_per_s": {k: round(v, 1) for k, v in bounds.items()},
                "ms_per_rollout": profile,
                "sb3_frames_per_s": round(sb3, 1),
                "ratio": round(ratio, 2),
                "of_update_passes": round(of_passes, 2),
                "next_of_update_passes": NEXT_OF_PASSES,
                "next_met": next_met,
                "compiled_over_torch_acting": round(ours / kinds[TORCH_ACTING], 2),
                "targets_met": met,
                "load_avg_1min": round(load, 2),
                "quiet": load < QUIET_LOAD,
                "cpu": platform.processor() or platform.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
