"""PPO learner of one region (or of all regions pooled) on the batched MultiCloudSim.

The algorithm follows CleanRL's ppo.py: an actor-critic (`networks.py`, `ppo.policy`: the
two-tier network, the flat MLP or the node scorer), GAE, the clipped surrogate, a value loss, an
entropy bonus, per-minibatch advantage normalisation, a global gradient-norm clip and
several epochs of minibatches over each rollout. Dispatching is a continuing task (an
estate never ends), so nothing is ever terminal: every rollout bootstraps from the value of
the observation it stops at. Each training world is still restarted from a fresh seed every
`episode_steps` jobs (a truncation, through which the value also bootstraps), so the
learner sees the same mix of quiet starts and busy hours as the held-out episodes rather
than one ever-longer day. Logits of masked actions are set to a large negative number, so
the sampled, the greedy and the trained distributions never put weight on a node that is
down or full. Rewards are scaled by the running standard deviation of the discounted
return, so the critic's gradient cannot swamp the actor's under the shared gradient-norm
clip. Both running statistics (observations, returns) travel with the weights as pooled
moments, so every region reads inputs and targets in the same units.

Everything a federated client must carry between rounds (weights, Adam moments, the running
observation normaliser, the torch RNG, the worlds' state and the counters) is one flat dict
of numpy arrays, so it can be saved with `np.savez` and read back without pickle.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from fedmc_flwr.config import LearnerPlan, PPOConfig
from fedmc_flwr.policies import privileged
from fedmc_flwr.policies.acting import Decision, actor_of, uniforms
from fedmc_flwr.policies.advantages import gae
from fedmc_flwr.policies.base import Policy
from fedmc_flwr.policies.flat_adam import FlatAdam
from fedmc_flwr.policies.heap import keep_freed_memory
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.moments import MOMENT_ARRAYS, Moments
from fedmc_flwr.policies.networks import ActorCritic, build_network
from fedmc_flwr.policies.normalisers import ObservationNorm, RunningNorm
from fedmc_flwr.seeds import training_seed
from fedmc_flwr.sim import state_file
from fedmc_flwr.sim.mixed import MixedSim, world_batch
from fedmc_flwr.sim.world import MultiCloudSim

NOISE_BYTES = 4 * 2**20
"""Uniforms a rollout draws at once, at most: all of small_demo's rollout in one draw
(2.3 KB a step), one step's at a time for a flat network on a 10,000-node estate."""
STATISTICS = ("observation", "return")
"""The running moments a weight list carries after the network's arrays, in this order."""

TRAIN_METRICS = ("reward", "latency_ms", "slo_violation_rate", "cost_usd", "carbon_g", "energy_kwh")
"""Training means per job that train_round reports, in METRIC_NAMES order after reward."""
LOSS_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
ROUND_METRICS = (*TRAIN_METRICS, *LOSS_METRICS, "explained_variance")
"""What a metrics.csv train row carries of train_round's output (timings go elsewhere)."""
UPDATE_METRICS = (
    *LOSS_METRICS,
    "explained_variance",
    "learning_rate",
    "steps_per_second",
    "env_steps",
)
"""What each PPO update (one rollout and its epochs over it) reports in
`PPOLearner.updates`: its mean losses, the critic's explained variance, the step size, the
environment steps per second of rollout and update, and the environment steps it
collected. train_round's figures are the round's means of these; TensorBoard plots each."""


def proximal_term(
    params: Sequence[torch.Tensor], anchor: Sequence[torch.Tensor], mu: float
) -> torch.Tensor:
    """FedProx's mu/2 * ||w - w_anchor||^2; `anchor` holds constants (no gradient flows)."""
    total = torch.zeros((), dtype=params[0].dtype)
    for p, a in zip(params, anchor, strict=True):
        total = total + (p - a.detach()).pow(2).sum()
    return 0.5 * mu * total


def ppo_loss(
    model: ActorCritic,
    batch: dict[str, torch.Tensor],
    ppo: PPOConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped-surrogate loss of one minibatch and its diagnostics. The batch holds
    the network's stored inputs (`ActorCritic.sample`) beside the rollout's columns."""
    logp, entropy, values = model.evaluate(batch, batch["actions"])
    entropy = entropy.mean()
    logratio = logp - batch["logprobs"]
    ratio = logratio.exp()
    adv = batch["advantages"]
    if ppo.norm_adv and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    gain = -adv
    pg_loss = torch.max(gain * ratio, gain * ratio.clamp(1 - ppo.clip_coef, 1 + ppo.clip_coef))
    pg_loss = pg_loss.mean()
    v_loss = 0.5 * (values - batch["returns"]).pow(2).mean()
    loss = pg_loss - ppo.ent_coef * entropy + ppo.vf_coef * v_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > ppo.clip_coef).float().mean()
        figures = torch.stack([pg_loss, v_loss, entropy, approx_kl, clipfrac]).tolist()
    return loss, dict(zip(LOSS_METRICS, figures, strict=True))


LossFunction = Callable[
    [ActorCritic, dict[str, torch.Tensor], PPOConfig], tuple[torch.Tensor, dict[str, float]]
]
"""A minibatch's loss and its `LOSS_METRICS` diagnostics."""


def imitation_loss(
    model: ActorCritic, batch: dict[str, torch.Tensor], ppo: PPOConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """Behaviour cloning of one minibatch: the teacher's actions' cross-entropy, beside
    the value loss of the teacher's returns, so the critic starts where the actor does.
    Its diagnostics fill `LOSS_METRICS`: the cross-entropy is the policy loss; no ratio
    is taken (approx_kl and clipfrac are 0)."""
    logp, entropy, values = model.evaluate(batch, batch["actions"])
    nll = -logp.mean()
    v_loss = 0.5 * (values - batch["returns"]).pow(2).mean()
    loss = nll + ppo.vf_coef * v_loss
    with torch.no_grad():
        stats = {
            "policy_loss": float(nll),
            "value_loss": float(v_loss),
            "entropy": float(entropy.mean()),
            "approx_kl": 0.0,
            "clipfrac": 0.0,
        }
    return loss, stats


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns): how much of the return the critic explains."""
    var = float(returns.var())
    return float("nan") if var == 0 else 1.0 - float((returns - values).var()) / var


class GreedyPolicy:
    """Argmax over masked logits of a frozen network and normaliser (serves `Policy`),
    through the network's fastest acting path (`acting.py`).

    A two-tier or node-scorer copy acts on an estate of any size (the normaliser is per
    feature)."""

    def __init__(self, name: str, network: ActorCritic, norm: ObservationNorm) -> None:
        self.name = name
        self._network = network
        self._actor = actor_of(network)
        self._affine = norm.feature_affine()

    def on_estate(self, nodes_per_region: int) -> GreedyPolicy:
        """The same policy on an estate of another shape (zero-shot transfer)."""
        twin = copy.copy(self)
        twin._network = self._network.on_estate(nodes_per_region)
        twin._actor = actor_of(twin._network)
        return twin

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return self._actor.greedy(obs, mask, self._affine).astype(np.int64, copy=False)


def weights_of_state(state: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """`PPOLearner.get_weights`' arrays from a saved learner state (`PPOLearner.save`):
    what a policy needs to act, without the training state (optimizer, worlds), whose
    layout may have changed since it was saved."""
    params = sorted((k for k in state if k.startswith("param.")), key=lambda k: int(k[6:]))
    moments = [
        state[f"{prefix}.total.{key}"]
        for prefix in ("norm", "return_norm")
        for key in ("count", "mean", "var")
    ]
    return [np.asarray(state[key], dtype=np.float32) for key in params] + moments


def _torch_seed(seed: int) -> int:
    return int(np.random.SeedSequence([seed, 0x7047]).generate_state(1, np.uint64)[0] >> 1)


class PPOLearner:
    """One PPO agent and its batch of worlds, driven a round at a time (`train_round`) by
    a region's client (`federation/client_app.py`) and by `fedmc train`
    (`experiments/training.py`): weights in and out as ordered numpy arrays
    (`get_weights`, `set_weights`), its greedy policy for held-out evaluation (`policy`),
    and its whole state saved and restored bit for bit (`state`, `load_state`)."""

    def __init__(self, plan: LearnerPlan, seed: int) -> None:
        cfg, regions = plan.cfg, plan.regions
        torch.set_num_threads(cfg.ppo.torch_threads)
        keep_freed_memory()  # every minibatch reuses the last one's pages (`heap.py`)
        self.cfg = cfg
        self.ppo = cfg.ppo
        self.planned = plan.planned_steps
        """Time steps per env the learner plans to take, which its learning rate anneals over."""
        ingress = np.array([regions[k % len(regions)] for k in range(cfg.ppo.num_envs)])
        self._worlds = world_batch(plan.worlds, cfg.reward, ingress)
        """The worlds, started (reset from their seeds) on first use: see `sim`."""
        self.seed = seed
        torch_seed = _torch_seed(seed)
        self.generator = torch.Generator().manual_seed(torch_seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(torch_seed)
            self.model = build_network(
                cfg.ppo.policy,
                self._worlds.obs_dim,
                self._worlds.num_actions,
                cfg.ppo.hidden_size,
                self._worlds.nodes_per_region,
                cfg.ppo.scorer_depth,
                privileged.width(cfg.ppo),
            )
        self.params = list(self.model.parameters())
        self.optimizer = FlatAdam(self.params, lr=self.ppo.learning_rate, eps=1e-5)
        self.norm = ObservationNorm()
        self.return_norm = RunningNorm(1)
        self.discounted = np.zeros(cfg.ppo.num_envs)
        self.episodes = np.zeros(cfg.ppo.num_envs, dtype=np.int64)
        self._started = False
        self._obs, self._mask = self._worlds.obs, self._worlds.mask
        # Episodes start staggered, so restarts spread evenly over time.
        offsets = np.arange(cfg.ppo.num_envs) * cfg.ppo.episode_steps // cfg.ppo.num_envs
        self.elapsed = offsets.astype(np.int64)
        self.global_step = 0
        self.updates: list[dict[str, float]] = []
        """The last train_round's PPO updates, in order (`UPDATE_METRICS` each)."""
        self.control: np.ndarray | None = None
        """The region's control variate under SCAFFOLD (`federation/control_variates.py`):
        flat over the network's parameters, float64; saved with the learner's state."""

    # --- the worlds -------------------------------------------------------------------

    @property
    def sim(self) -> MultiCloudSim | MixedSim:
        """The learner's batch of worlds, each started from its first training seed when
        first asked for (`_start`)."""
        self._start()
        return self._worlds

    @property
    def obs(self) -> np.ndarray:
        """[B, D] the worlds' current observations."""
        self._start()
        return self._obs

    @property
    def mask(self) -> np.ndarray:
        """[B, A] the worlds' current action masks."""
        self._start()
        return self._mask

    def _start(self) -> None:
        """Reset the worlds from their first training seeds, once. Late, not in the
        constructor: a learner whose saved state is loaded next (a region's client in
        every round after its first) or that only evaluates never needs it, and on a
        10,000-node estate the reset's warm-up is a quarter of a second of work that the
        loaded state replaces. The worlds depend on nothing but their seeds, so a late
        start gives the same worlds."""
        if not self._started:
            env_seeds = [training_seed(self.seed, k, 0) for k in range(self.ppo.num_envs)]
            self._obs, self._mask = self._worlds.reset(np.array(env_seeds, dtype=np.uint64))
            self._started = True

    # --- weights that travel ----------------------------------------------------------

    def get_weights(self) -> list[np.ndarray]:
        """The network's arrays (float32), then the observation and return moments (float64,
        `STATISTICS` groups of `[count, mean, var]`): all the policy needs to act."""
        arrays = [p.detach().numpy().astype(np.float32, copy=True) for p in self.params]
        return [*arrays, *self.norm.total.arrays(), *self.return_norm.total.arrays()]

    def get_update(self) -> list[np.ndarray]:
        """What a region sends after a round: like `get_weights`, but the moments are only
        those of what it saw since `set_weights`, for the server to pool (never twice)."""
        arrays = self.get_weights()[: len(self.params)]
        return [*arrays, *self.norm.fresh.arrays(), *self.return_norm.fresh.arrays()]

    def critic_arrays(self) -> dict[int, np.ndarray]:
        """The critic's arrays by their index in `get_weights` (every network names its
        critic's modules `critic...`), to keep a region's own critic (`local_critic`)."""
        return {
            k: p.detach().numpy().copy()
            for k, (name, p) in enumerate(self.model.named_parameters())
            if name.startswith("critic")
        }

    def set_weights(self, weights: list[np.ndarray]) -> None:
        """Adopt global weights and pooled moments (the layout of `get_weights`)."""
        expected = self.get_weights()
        if len(weights) != len(expected):
            raise ValueError(f"expected {len(expected)} weight arrays, got {len(weights)}")
        for i, (new, old) in enumerate(zip(weights, expected, strict=True)):
            if np.shape(new) != old.shape:
                raise ValueError(f"weight {i}: shape {np.shape(new)}, expected {old.shape}")
            if not np.all(np.isfinite(new)):
                raise ValueError(f"weight {i}: contains NaN or inf")
        with torch.no_grad():
            for p, new in zip(self.params, weights[: len(self.params)], strict=True):
                p.copy_(torch.from_numpy(np.asarray(new, dtype=np.float32)))
        stats = weights[len(self.params) :]
        self.norm.start_from(Moments.from_arrays(stats[:MOMENT_ARRAYS]))
        self.return_norm.start_from(Moments.from_arrays(stats[MOMENT_ARRAYS:]))

    def policy(self, name: str = "ppo") -> GreedyPolicy:
        network = copy.deepcopy(self.model).requires_grad_(False)
        return GreedyPolicy(name, network, self.norm)

    # --- training ---------------------------------------------------------------------

    def train_round(
        self,
        steps_per_env: int,
        proximal_mu: float = 0.0,
        imitate: bool = False,
        correction: np.ndarray | None = None,
    ) -> dict[str, float]:
        """`steps_per_env` steps in each world: PPO, after `ppo.imitation_steps` of
        imitating `ppo.imitation_teacher` if `imitate` (a learner's first round from
        scratch; see PPOConfig.imitation_steps). `correction`, flat over the network's
        parameters, is added to every Adam step's direction (`FlatAdam.step`); the output's
        `step_size_sum` is the sum of the learning rates of the round's Adam steps, which
        scales the round's move back to a mean step direction."""
        if steps_per_env <= 0:
            raise ValueError(f"steps_per_env must be > 0, got {steps_per_env}")
        if proximal_mu < 0:
            raise ValueError(f"proximal_mu must be >= 0, got {proximal_mu}")
        start = time.perf_counter()
        anchor = [p.detach().clone() for p in self.params]
        shift = None if correction is None else torch.as_tensor(correction, dtype=torch.float32)
        step_size_sum = 0.0
        if self.norm.total.count == 0:  # the learner's very first observation
            self.norm.update(self.obs)
        job_sums = np.zeros(len(TRAIN_METRICS))
        losses = {name: 0.0 for name in LOSS_METRICS}
        updates = 0
        ev_sum, ev_count = 0.0, 0
        done = 0
        self.updates = []
        imitated = min(self.ppo.imitation_steps, steps_per_env) if imitate else 0
        teacher = (
            DISPATCHERS[self.ppo.imitation_teacher](self.sim, seed=self.seed) if imitated else None
        )
        while done < steps_per_env:
            limit = imitated if done < imitated else steps_per_env
            length = min(self.ppo.rollout_steps, limit - done)
            update_start = time.perf_counter()
            self._set_learning_rate(self.global_step // self.sim.num_envs + done)
            imitating = done < imitated
            rollout = self._collect(length, job_sums, teacher if imitating else None)
            loss = imitation_loss if imitating else ppo_loss
            stats, n = self._update(rollout, anchor, proximal_mu, loss, shift)
            step_size_sum += n * self.optimizer.lr
            for name in LOSS_METRICS:
                losses[name] += stats[name]
            updates += n
            ev = explained_variance(rollout["values"], rollout["returns"])
            if not np.isnan(ev):
                ev_sum, ev_count = ev_sum + ev, ev_count + 1
            done += length
            frames = length * self.sim.num_envs
            self.updates.append(
                {name: stats[name] / n for name in LOSS_METRICS}
                | {
                    "explained_variance": ev,
                    "learning_rate": self.optimizer.lr,
                    "steps_per_second": frames / (time.perf_counter() - update_start),
                    "env_steps": float(frames),
                }
            )
        env_steps = steps_per_env * self.sim.num_envs
        self.global_step += env_steps
        elapsed = time.perf_counter() - start
        out = {name: losses[name] / updates for name in LOSS_METRICS}
        out["explained_variance"] = ev_sum / ev_count if ev_count else float("nan")
        out["steps_per_second"] = env_steps / elapsed
        out["env_steps"] = float(env_steps)
        out["step_size_sum"] = step_size_sum
        for name, total in zip(TRAIN_METRICS, job_sums, strict=True):
            out[name] = float(total / env_steps)
        return out

    def _set_learning_rate(self, steps_done: int) -> None:
        """CleanRL's linear decay to 0 over the learner's planned steps per env, if enabled."""
        lr = self.ppo.learning_rate
        if self.ppo.anneal_lr:
            lr *= max(0.0, 1.0 - steps_done / self.planned)
        self.optimizer.lr = lr

    def _collect(
        self, length: int, job_sums: np.ndarray, teacher: Policy | None = None
    ) -> dict[str, torch.Tensor]:
        """Run `length` batched steps through the network's acting path (`acting.py`),
        drawing each action, or taking the `teacher`'s; store what the update needs,
        flattened to [T*B]: the network's own inputs of each step (`ActorCritic.sample`)
        beside the actions, log-probabilities, values and GAE's advantages and returns."""
        b = self.sim.num_envs
        inputs: dict[str, np.ndarray] = {}
        act_buf = np.empty((length, b), dtype=np.int64)
        logp_buf = np.empty((length, b), dtype=np.float32)
        val_buf = np.empty((length + 1, b), dtype=np.float32)
        rew_buf = np.empty((length, b), dtype=np.float32)
        cut_buf = np.zeros((length, b), dtype=np.bool_)
        bootstrap = np.zeros((length, b), dtype=np.float32)
        actor = actor_of(self.model)  # the weights the last update left
        width = actor.noise_width(self.sim.num_actions)
        chunk = max(1, NOISE_BYTES // (4 * b * width))  # steps whose uniforms are drawn at once
        hidden = self._privileged()
        for t in range(length):
            if t % chunk == 0:  # the same numbers as a draw a step
                noise = uniforms((min(chunk, length - t), b, width), self.generator)
            draw = noise[t % chunk]
            affine = self.norm.feature_affine()
            forced = None if teacher is None else teacher.act(self._obs, self._mask)
            # each decision after the first is written straight into the rollout's rows
            rows = {key: value[t] for key, value in inputs.items()}
            into = Decision(act_buf[t], logp_buf[t], val_buf[t], rows) if inputs else None
            step = actor.decide(self._obs, self._mask, affine, draw, hidden, forced, into)
            if not inputs:  # the first: its arrays give the rollout's shapes
                inputs = {
                    key: np.empty((length, *value.shape), dtype=value.dtype)
                    for key, value in step.inputs.items()
                }
                for key, value in step.inputs.items():
                    inputs[key][t] = value
                act_buf[t], logp_buf[t], val_buf[t] = step.action, step.logprob, step.value
            result = self.sim.step(step.action)
            rew_buf[t] = self._scale_rewards(result.reward)
            job_sums[0] += result.reward.sum()
            job_sums[1:] += result.metrics.sum(axis=0)
            self._obs, self._mask = result.obs, result.mask
            self.elapsed += 1
            ended = np.flatnonzero(self.elapsed >= self.ppo.episode_steps)
            hidden = self._privileged()
            if len(ended):
                final = None if hidden is None else hidden[ended]
                value = actor.value(self._obs[ended], self._mask[ended], affine, final)
                bootstrap[t, ended] = value
                cut_buf[t, ended] = True
                self._restart(ended)
                hidden = self._privileged()
            self.norm.update(self._obs)
        last = actor.value(self._obs, self._mask, self.norm.feature_affine(), hidden)
        val_buf[length] = last
        values = val_buf[:length]
        next_values = np.where(cut_buf, bootstrap, val_buf[1:])
        gamma, lam = self.ppo.gamma, self.ppo.gae_lambda
        advantages = gae(rew_buf, values, next_values, cut_buf, gamma, lam)
        columns = inputs | {
            "actions": act_buf,
            "logprobs": logp_buf,
            "values": values,
            "advantages": advantages,
            "returns": advantages + values,
        }
        return {
            key: torch.from_numpy(value.reshape(length * b, *value.shape[2:]))
            for key, value in columns.items()
        }

    def _privileged(self) -> np.ndarray | None:
        """What a privileged critic reads of the worlds now (None without one)."""
        return privileged.privileged_inputs(self.sim) if self.ppo.privileged_critic else None

    def _restart(self, envs: np.ndarray) -> None:
        """Start the listed envs' next episodes, each from its own fresh seed."""
        self.episodes[envs] += 1
        seeds = [training_seed(self.seed, int(k), int(self.episodes[k])) for k in envs]
        self._obs, self._mask = self.sim.reset_envs(envs, np.array(seeds, dtype=np.uint64))
        self.elapsed[envs] = 0
        self.discounted[envs] = 0.0

    def _scale_rewards(self, reward: np.ndarray) -> np.ndarray:
        """Reward / running std of the discounted return (gym's NormalizeReward)."""
        self.discounted = self.discounted * self.ppo.gamma + reward
        self.return_norm.update(self.discounted[:, None])
        return reward / np.sqrt(self.return_norm.total.var[0] + 1e-8)

    def _update(
        self,
        rollout: dict[str, torch.Tensor],
        anchor: list[torch.Tensor],
        proximal_mu: float,
        loss_of: LossFunction = ppo_loss,
        correction: torch.Tensor | None = None,
    ) -> tuple[dict[str, float], int]:
        """Epochs of `loss_of` (PPO's, or imitation's) over one rollout, each Adam step
        corrected by `correction` (`FlatAdam.step`); returns summed diagnostics and the
        update count.

        Each epoch gathers the rollout once in its shuffled order and slices minibatches
        from it (views, no copy): the same minibatches as gathering each one by its
        indices, with one gather per array and epoch instead of one per minibatch. Every
        epoch gathers into the same arrays: fresh ones (6.5 MB of observations on
        small_demo) would be new pages to fault in each time. The rollout's values are
        not gathered: no loss reads them (its returns and advantages hold them)."""
        size = rollout["actions"].shape[0]
        minibatch = max(1, size // self.ppo.num_minibatches)
        sums = {name: 0.0 for name in LOSS_METRICS}
        count = 0
        columns = {key: value for key, value in rollout.items() if key != "values"}
        shuffled = {key: torch.empty_like(value) for key, value in columns.items()}
        for _ in range(self.ppo.update_epochs):
            order = torch.randperm(size, generator=self.generator)
            for key, value in columns.items():
                torch.index_select(value, 0, order, out=shuffled[key])
            for lo in range(0, size - minibatch + 1, minibatch):
                batch = {key: value[lo : lo + minibatch] for key, value in shuffled.items()}
                loss, stats = loss_of(self.model, batch, self.ppo)
                if proximal_mu > 0:
                    loss = loss + proximal_term(self.params, anchor, proximal_mu)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.clip_grad_norm_(self.ppo.max_grad_norm)
                self.optimizer.step(correction)
                for name in LOSS_METRICS:
                    sums[name] += stats[name]
                count += 1
        return sums, count

    # --- state that survives ------------------------------------------------------------

    def state(self) -> dict[str, np.ndarray]:
        """Everything `load_state` needs to resume bit for bit, copied."""
        return self._state(self.sim.get_state())

    def _state(self, worlds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`state` with the worlds' arrays as given: copies for `state`, the worlds' own
        arrays where they are only read (`save`, the shapes `load_state` checks), which
        on a 10,000-node estate spares a copy of some 30 MB."""
        state: dict[str, np.ndarray] = {}
        for i, p in enumerate(self.params):
            state[f"param.{i}"] = p.detach().numpy().copy()
        state |= self.optimizer.state()
        state |= self.norm.state("norm") | self.return_norm.state("return_norm")
        state["discounted"] = self.discounted.copy()
        state["episodes"] = self.episodes.copy()
        state["elapsed"] = self.elapsed.copy()
        state["torch_rng"] = self.generator.get_state().numpy().copy()
        for key, value in worlds.items():
            state[f"sim.{key}"] = value
        state["global_step"] = np.array(self.global_step, dtype=np.int64)
        if self.control is not None:
            state["control"] = self.control.copy()
        return state

    def load_state(self, state: dict[str, np.ndarray], adopt: bool = False) -> None:
        """Resume from `state()` output. `adopt`: the worlds take its arrays as their own
        rather than copies (`MultiCloudSim.set_state`), for a caller that hands them over
        (`load`, whose arrays were just read)."""
        expected = self._state(self._worlds.state._asdict())  # shapes only: never started
        missing = sorted(set(expected) - set(state) - {k for k in expected if "adam." in k})
        if missing:
            raise ValueError(f"learner state lacks {missing}")
        for key, value in state.items():
            if key in expected and np.shape(value) != expected[key].shape:
                raise ValueError(
                    f"state {key!r}: shape {np.shape(value)}, expected {expected[key].shape}"
                )
        with torch.no_grad():
            for i, p in enumerate(self.params):
                p.copy_(torch.from_numpy(np.array(state[f"param.{i}"])))
        self.optimizer.load_state(state)
        self.norm.load("norm", state)
        self.return_norm.load("return_norm", state)
        self.discounted = np.array(state["discounted"], dtype=np.float64)
        self.episodes = np.array(state["episodes"], dtype=np.int64)
        self.elapsed = np.array(state["elapsed"], dtype=np.int64)
        self.generator.set_state(torch.from_numpy(np.array(state["torch_rng"])))
        worlds = {k[4:]: v for k, v in state.items() if k.startswith("sim.")}
        self._worlds.set_state(worlds, adopt=adopt)
        self._obs, self._mask = self._worlds.obs.copy(), self._worlds.mask.copy()
        self._started = True
        self.global_step = int(state["global_step"])
        control = state.get("control")
        self.control = None if control is None else np.array(control, dtype=np.float64)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            np.savez(handle, **self._state(state_file.compact(self.sim.state._asdict())))

    def load(self, path: str | Path) -> None:
        """Resume from a `save`d file; its worlds' queues are expanded back into rings
        (`state_file`), and a file that holds whole rings loads as it is."""
        with np.load(Path(path), allow_pickle=False) as data:
            saved = {key: data[key] for key in data.files}
        worlds = state_file.expand({k[4:]: v for k, v in saved.items() if k.startswith("sim.")})
        rest = {key: value for key, value in saved.items() if not key.startswith("sim.")}
        self.load_state(rest | {f"sim.{key}": value for key, value in worlds.items()}, adopt=True)
