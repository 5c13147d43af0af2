"""An exported policy and the configs a hook needs, written into a test's directory."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from fedmc_flwr.config import ExperimentConfig, PPOConfig, WorldConfig, learner_plan, to_yaml
from fedmc_flwr.integrations.export import export_policy
from fedmc_flwr.policies.ppo import PPOLearner

REGIONS = ["us-east1", "europe-west9", "northamerica-northeast1"]
NODES = 2


def exported_policy(folder: Path) -> tuple[Path, Path]:
    """(experiment config, policy.onnx) of a fresh learner on a 3 x 2 estate: hooks act on
    whatever the policy decides, so its weights need no training."""
    torch.set_num_threads(1)
    cfg = ExperimentConfig(
        name="hooks-test",
        world=WorldConfig(regions=len(REGIONS), nodes_per_region=NODES),
        ppo=PPOConfig(num_envs=3),
    )
    experiment = folder / "experiment.yaml"
    experiment.write_text(to_yaml(cfg))
    weights = PPOLearner(learner_plan(cfg, range(len(REGIONS))), seed=0).get_weights()
    return experiment, export_policy(cfg, weights, folder / "policy.onnx")


def integration_config(folder: Path, experiment: Path, section: str, **values: object) -> Path:
    """An integration config for `section` with a short rollout."""
    path = folder / f"{section}.yaml"
    body = {"experiment": str(experiment), "steps": 20, "worlds": 2, section: values}
    path.write_text(yaml.safe_dump(body))
    return path


def apply_argv(hook: str, policy: Path, config: Path) -> list[str]:
    """`fedmc hooks apply` of `hook` with a policy and an integration config."""
    return ["hooks", "apply", "--hook", hook, "--policy", str(policy), "--config", str(config)]
