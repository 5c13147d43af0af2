"""The simulated multi-cloud world; importing it registers the Gymnasium env id.

`gymnasium.make("fedmc/MultiCloud-v0", ...)` builds `gym.MultiCloudEnv` (wrapped in a
time limit) and `gymnasium.make_vec("fedmc/MultiCloud-v0", num_envs=...)` builds
`gym.MultiCloudVectorEnv`; both load lazily, so importing the package stays cheap.
"""

from gymnasium.envs.registration import register, registry

ENV_ID = "fedmc/MultiCloud-v0"
DEFAULT_EPISODE_STEPS = 2000
"""Jobs per episode unless `max_episode_steps` says otherwise (one eval.steps run)."""

if ENV_ID not in registry:
    register(
        id=ENV_ID,
        entry_point="fedmc_flwr.sim.gym:MultiCloudEnv",
        vector_entry_point="fedmc_flwr.sim.gym:MultiCloudVectorEnv",
        max_episode_steps=DEFAULT_EPISODE_STEPS,
    )
