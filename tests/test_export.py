"""The ONNX export: same actions and logits as the torch policy, served without torch."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from fedmc_flwr.cli import main
from fedmc_flwr.config import ExperimentConfig, PPOConfig, WorldConfig, learner_plan, to_yaml
from fedmc_flwr.integrations.export import ExportError, export_checkpoint
from fedmc_flwr.integrations.serving import OnnxPolicy
from fedmc_flwr.policies.checkpoints import write_weights
from fedmc_flwr.policies.networks import KINDS, MASKED_LOGIT
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.sim.layout import ObsLayout
from fedmc_flwr.sim.world import MultiCloudSim

ENVS, STEPS = 50, 200  # 10,000 observations


@pytest.fixture(scope="module", params=KINDS)
def trained(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[PPOLearner, Path]:
    """A briefly trained learner of each network kind and its global weights as a
    federated run checkpoints them, next to the run's config.yaml."""
    torch.set_num_threads(1)
    cfg = ExperimentConfig(
        name="export-test",
        world=WorldConfig(regions=3, nodes_per_region=4),
        ppo=PPOConfig(
            num_envs=8, rollout_steps=32, num_minibatches=2, update_epochs=2, policy=request.param
        ),
    )
    learner = PPOLearner(learner_plan(cfg, [0, 1, 2]), seed=5)
    learner.train_round(96)
    run = tmp_path_factory.mktemp("run")
    (run / "config.yaml").write_text(to_yaml(cfg))
    path = run / "checkpoints" / "round_001.npz"
    write_weights(path, learner.get_weights())
    return learner, path


def world_observations(
    learner: PPOLearner, world: WorldConfig | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """ENVS x STEPS observations and masks of `world` (the learner's own by default),
    dispatched by the torch policy."""
    world = world or learner.cfg.world
    sim = MultiCloudSim(world, learner.cfg.reward, np.arange(ENVS) % world.regions)
    obs, mask = sim.reset(np.arange(ENVS, dtype=np.uint64) + 1000)
    policy = learner.policy().on_estate(world.nodes_per_region)
    seen_obs, seen_mask = [], []
    for _ in range(STEPS):
        seen_obs.append(obs)
        seen_mask.append(mask)
        result = sim.step(policy.act(obs, mask))
        obs, mask = result.obs, result.mask
    return np.concatenate(seen_obs), np.concatenate(seen_mask)


def test_exported_policy_matches_torch_on_10000_world_observations(trained, tmp_path) -> None:
    learner, ckpt = trained
    out = export_checkpoint(ckpt, tmp_path / "policy.onnx")
    obs, mask = world_observations(learner)
    assert len(obs) == 10_000 and (~mask).any(), "the sample must include masked nodes"
    served = OnnxPolicy(out)
    actions, logits = served.run(obs, mask)
    with torch.inference_mode():
        x = torch.from_numpy(learner.norm(obs))
        expected = learner.model.masked_logits(x, torch.from_numpy(mask)).numpy()
    np.testing.assert_array_equal(actions, learner.policy().act(obs, mask))
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5)
    assert (logits[~mask] == np.float32(MASKED_LOGIT)).all()


def test_serving_never_imports_torch(trained, tmp_path) -> None:
    out = export_checkpoint(trained[1], tmp_path / "policy.onnx")
    code = (
        "import sys, numpy as np\n"
        "from fedmc_flwr.integrations.serving import OnnxPolicy\n"
        f"p = OnnxPolicy({str(out)!r})\n"
        f"obs = np.zeros((2, {ObsLayout(12).size}), np.float32)\n"
        "print(p.act(obs, np.ones((2, 12), bool)))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_mlp_export_refuses_another_estate_the_others_serve_it(trained, tmp_path) -> None:
    """The flat MLP's shapes are its estate's; the two-tier and node-scorer weights fit
    any estate, and their export there acts as their torch copy does."""
    learner, ckpt = trained
    other = tmp_path / "other.yaml"
    world = WorldConfig(regions=2, nodes_per_region=5)
    other.write_text(to_yaml(replace(learner.cfg, world=world)))
    if learner.cfg.ppo.policy == "mlp":
        with pytest.raises(ExportError, match="shape"):
            export_checkpoint(ckpt, tmp_path / "p.onnx", config=other)
        return
    served = OnnxPolicy(export_checkpoint(ckpt, tmp_path / "p.onnx", config=other))
    obs, mask = world_observations(learner, world)
    assert obs.shape[1] == ObsLayout(10).size
    policy = learner.policy().on_estate(world.nodes_per_region)
    np.testing.assert_array_equal(served.act(obs, mask), policy.act(obs, mask))


def test_cli_export_writes_the_file_and_fails_in_one_line(trained, tmp_path, capsys) -> None:
    out = tmp_path / "cli.onnx"
    assert main(["export", "--checkpoint", str(trained[1]), "--out", str(out)]) == 0
    assert out.is_file()
    assert main(["export", "--checkpoint", str(tmp_path / "none.npz"), "--out", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
