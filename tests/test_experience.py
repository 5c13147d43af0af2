"""Regions whose experience differs: who trains on which worlds (`train.experience`), a
region whose workload drifts (`train.drift`), the three settings' configs, their checks,
and how "What federating buys" and "What federating costs" read such sweeps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import CONF, SMALL_DEMO, TINY_WORLD
from test_training import SHORT_TRAINING

from fedmc_flwr.analysis import results_doc
from fedmc_flwr.analysis.federating import (
    experience_groups,
    federating_costs,
    federating_gains,
    watched_region,
)
from fedmc_flwr.config import (
    ConfigError,
    at_round,
    learner_plan,
    load_config,
    region_steps,
    region_world,
    to_yaml,
    training_world,
)
from fedmc_flwr.evaluation import evaluate
from fedmc_flwr.experiments import training
from fedmc_flwr.federation import client_app
from fedmc_flwr.federation.server_app import initial_weights
from fedmc_flwr.policies.checkpoints import round_checkpoint, write_weights
from fedmc_flwr.policies.heuristics import DISPATCHERS
from fedmc_flwr.policies.ppo import PPOLearner
from fedmc_flwr.results import PER_SEED_COLUMNS, PER_SEED_VALUES
from fedmc_flwr.sim.mixed import MixedSim
from fedmc_flwr.sim.signals import region_catalogue
from fedmc_flwr.sim.world import MultiCloudSim
from fedmc_flwr.sweeps import load_sweep

RARE = CONF / "rare_events.yaml"
DRIFT = CONF / "drift_region.yaml"
MANY = CONF / "many_small_regions.yaml"
SMALL_LEARNER = ["ppo.num_envs=6", "ppo.rollout_steps=16", "eval.seeds=2", "eval.steps=50"]
SHORT = [*SHORT_TRAINING[len(TINY_WORLD) :], "world.nodes_per_region=2", "ppo.num_envs=6"]
"""`test_training`'s short training on three regions (the settings' own estates)."""


def _judged_world(cfg, region: int) -> MultiCloudSim:
    """The sim `evaluate` builds for `region`, caught from its policy factory."""
    built = []

    def first_dispatcher(sim: MultiCloudSim):
        built.append(sim)
        return DISPATCHERS["sed"](sim)

    evaluate(first_dispatcher, cfg, region, steps=1)
    return built[0]


def test_rare_events_train_only_region_0_on_outages_and_judge_every_region_on_them() -> None:
    cfg = load_config(RARE, SMALL_LEARNER)
    for region, trained_rate in ((0, 0.01), (1, 0.0), (2, 0.0)):
        learner = PPOLearner(
            learner_plan(cfg, [region]), seed=0
        )  # a federated client's and a local learner's
        assert isinstance(learner.sim, MultiCloudSim)
        assert learner.sim.spec.outage_rate == trained_rate
        assert _judged_world(cfg, region).spec.outage_rate == 0.01
    assert [words for words, _ in experience_groups(cfg)] == [
        "never trained on these worlds",
        "trained on these worlds",
    ]
    assert [members for _, members in experience_groups(cfg)] == [[1, 2], [0]]


def test_the_centralised_learner_steps_each_region_in_that_regions_training_world() -> None:
    """Each of its envs moves exactly as in a batch of its region's training world alone,
    and not as in the world it is judged on (where outages strike the other regions too)."""
    cfg = training.matched_config(load_config(RARE, SMALL_LEARNER), "centralised")
    learner = PPOLearner(learner_plan(cfg, [0, 1, 2]), seed=0)
    assert isinstance(learner.sim, MixedSim)
    ingress = learner.sim.state.ingress.copy()
    seeds = np.arange(100, 106, dtype=np.uint64)
    learner.sim.reset(seeds)
    alone = {
        region: MultiCloudSim(training_world(cfg, region), cfg.reward, ingress[ingress == region])
        for region in range(3)
    }
    judged = MultiCloudSim(region_world(cfg.world, 1), cfg.reward, ingress[ingress == 1])
    for region, sim in alone.items():
        sim.reset(seeds[ingress == region])
    judged.reset(seeds[ingress == 1])
    rng = np.random.default_rng(0)
    differs = False
    for _ in range(300):
        mask = learner.sim.mask
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in mask])
        mixed = learner.sim.step(actions)
        for region, sim in alone.items():
            own = sim.step(actions[ingress == region])
            np.testing.assert_array_equal(mixed.obs[ingress == region], own.obs)
            np.testing.assert_array_equal(mixed.reward[ingress == region], own.reward)
        other = judged.step(actions[ingress == 1])
        differs |= not np.array_equal(other.obs, mixed.obs[ingress == 1])
    assert differs  # the judged world is another world: the check above can tell them apart
    state = learner.sim.get_state()
    learner.sim.set_state(state)
    np.testing.assert_array_equal(learner.sim.obs, state["obs"])


def test_a_drifting_region_trains_on_its_old_workload_until_the_round_of_the_change() -> None:
    cfg = load_config(DRIFT, SMALL_LEARNER)
    rates = {}
    for rnd in (1, 3, 4, 8):
        learner = PPOLearner(learner_plan(at_round(cfg, rnd), [0]), seed=0)
        rates[rnd] = learner.sim.spec.arrival_rate[0]
        other = PPOLearner(learner_plan(at_round(cfg, rnd), [1]), seed=0).sim.spec.arrival_rate[1]
        assert other == _judged_world(cfg, 1).spec.arrival_rate[1]
    judged = _judged_world(cfg, 0).spec.arrival_rate[0]
    assert rates[1] == rates[3] == pytest.approx(judged * 0.35 / 0.85)
    assert rates[4] == rates[8] == judged
    assert watched_region(cfg) == 0
    assert training_world(cfg, 0, 3).load == 0.35 and training_world(cfg, 0, 4).load == 0.85


def test_fedmc_train_moves_its_learners_into_the_new_workload_state_and_all(tmp_path) -> None:
    cfg = load_config(DRIFT, [*SHORT, "train.rounds=3", "train.drift.round=2"])
    for mode in training.MODES:
        learners = training._learners(cfg, mode)
        client = "all" if mode == "centralised" else region_catalogue(3)[0].name
        learners[client].train_round(8)
        assert training._into_round(cfg, mode, learners, 3) is learners
        moved = training._into_round(cfg, mode, learners, 2)
        before, after = learners[client], moved[client]
        assert after.global_step == before.global_step
        for key, value in before.state().items():
            np.testing.assert_array_equal(after.state()[key], value)
        envs = after.sim.state.ingress == 0
        assert after.sim.spec.arrival_rate[0] == pytest.approx(
            before.sim.spec.arrival_rate[0] * 0.85 / 0.35
        )
        assert envs.any()


def test_a_federated_client_trains_in_its_rounds_world(tmp_path, monkeypatch) -> None:
    cfg = load_config(DRIFT, [*SHORT, "train.rounds=3", "train.drift.round=3"])
    seen = []

    class Watched(PPOLearner):
        def train_round(self, *args, **kwargs):
            seen.append(self.sim.spec.arrival_rate[0])
            return super().train_round(*args, **kwargs)

    monkeypatch.setattr(client_app, "PPOLearner", Watched)
    weights = initial_weights(cfg)
    for rnd in (1, 2, 3):
        weights, _ = client_app.train_region(cfg, 0, weights, rnd, tmp_path)
    judged = _judged_world(cfg, 0).spec.arrival_rate[0]
    assert seen == pytest.approx([judged * 0.35 / 0.85] * 2 + [judged])


def test_many_small_regions_are_ten_regions_of_a_tenth_of_the_steps() -> None:
    cfg = load_config(MANY, SMALL_LEARNER)
    demo = load_config(SMALL_DEMO)
    assert cfg.world.regions == 10 and cfg.world.nodes_per_region == 2
    assert {region_steps(cfg, r) for r in range(10)} == {demo.train.steps_per_round // 10}
    sim = PPOLearner(learner_plan(cfg, [7]), seed=0).sim
    assert (sim.num_regions, sim.nodes_per_region) == (10, 2)
    assert experience_groups(cfg) == [] and watched_region(cfg) is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.experience=[{outage_rate: 0.0}]"], r"train.experience has 1 entries.*expected 3"),
        (
            ["train.experience=[{outage_rate: 1.5}, {}, {}]"],
            r"train.experience\[0\].outage_rate = 1.5 is not allowed; expected a probability",
        ),
        (["train.experience=[{}, {load: 1.2}, {}]"], r"train.experience\[1\].load = 1.2"),
        (["train.experience=[{}, {}, {slo_ms: 10}]"], r"slo_ms: not a config key"),
        (
            ["train.experience=[{region_outage: [1, 2]}, {}, {}]"],
            r"train.experience\[0\].region_outage = \[1.0, 2.0\] is not allowed; expected 3",
        ),
        (
            ["train.experience=[{outage_rate: 0.5, region_outage: [3, 3, 3]}, {}, {}]"],
            r"train.experience\[0\] makes the chance per job .* 1.5",
        ),
        (["train.drift.round=1", "train.drift.before.load=0.3"], r"train.drift.round = 1"),
        (["train.drift.round=9", "train.drift.before.load=0.3"], r"from 2 to train.rounds \(8\)"),
        (
            ["train.drift.round=3", "train.drift.region=3", "train.drift.before.load=0.3"],
            r"train.drift.region = 3 is not allowed; expected 0 to 2",
        ),
        (["train.drift.round=3"], r"train.drift.before sets nothing"),
        (
            ["train.drift.round=3", "train.drift.before.burstiness=1.0"],
            r"train.drift.before.burstiness = 1.0 is not allowed",
        ),
    ],
)
def test_bad_experience_and_drift_are_one_line_config_errors(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(SMALL_DEMO, overrides)
    assert str(SMALL_DEMO.name) in str(caught.value) and "\n" not in str(caught.value)


# --- reading a sweep: synthetic cells on disk, no training ----------------------------------

VARIANTS = {"ppo-fedavg": "federated", "ppo-local": "local", "ppo-centralised": "centralised"}
EVAL_SEEDS = 4
SENT = [np.zeros(10, dtype=np.float32), np.zeros(3, dtype=np.float64)]
"""The round checkpoint of a synthetic federated cell: 64 bytes."""


def _sweep(tmp_path, config, name: str):
    path = tmp_path / "sweeps" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = {
        "name": name,
        "experiment": str(config),
        "seeds": [0, 1, 2],
        "set": [f"eval.seeds={EVAL_SEEDS}"],
        "results_dir": str(tmp_path / "results"),
        "variants": {v: {"kind": kind} for v, kind in VARIANTS.items()},
    }
    path.write_text(yaml.safe_dump(spec))
    return load_sweep(path)


def _fill(sweep, reward) -> None:
    """Each cell's files, `reward(policy, region, round)` on every world (a dispatcher's
    at round 0, the same in every cell) plus a learner's small noise per world and seed;
    each region trains 2 s a round, a federated round takes 3 s."""
    rng = np.random.default_rng(0)
    for cell in sweep.cells:
        cfg, out = cell.cfg, cell.out_dir
        out.mkdir(parents=True)
        (out / "config.yaml").write_text(to_yaml(cfg))
        names = [r.name for r in region_catalogue(cfg.world.regions)]
        rows, timing = [], []
        for rnd in range(cfg.train.rounds + 1):
            for policy in ["sed"] if rnd == 0 else [cell.variant]:
                for k, client in enumerate(names):
                    for world in range(EVAL_SEEDS):
                        noise = 0.0 if rnd == 0 else rng.normal(0, 1e-3)  # dispatchers: alike
                        value = reward(policy, k, rnd) + 0.01 * world + noise
                        rows.append(
                            {
                                **dict.fromkeys(PER_SEED_VALUES, 0.0),
                                "experiment": cfg.name,
                                "train_seed": cfg.seed,
                                "round": rnd,
                                "split": "test",
                                "client": client,
                                "policy": policy,
                                "eval_seed": world,
                                "start_phase": world / EVAL_SEEDS,
                                "train_steps": rnd * 100,
                                "jobs": 10,
                                "reward": value,
                            }
                        )
            if rnd:
                timing += [
                    {"experiment": cfg.name, "round": rnd, "phase": "train", "client": c}
                    | {"wall_time_s": 2.0}
                    for c in names
                ]
                if cell.kind == "federated":
                    timing.append(
                        {"experiment": cfg.name, "round": rnd, "phase": "train", "client": "all"}
                        | {"wall_time_s": 3.0}
                    )
        pd.DataFrame(rows, columns=PER_SEED_COLUMNS).to_csv(out / "per_seed.csv", index=False)
        pd.DataFrame(timing).to_csv(out / "timing.csv", index=False)
        if cell.kind == "federated":
            write_weights(round_checkpoint(out, cfg.train.rounds), SENT)


def test_the_table_reads_never_trained_regions_apart_from_trained_ones(tmp_path) -> None:
    """FedAvg beats local-only by 0.05 on the two regions that never trained on outages and
    loses 0.05 on the one that did: reading the wrong regions flips a sign."""
    sweep = _sweep(tmp_path, RARE, "rare")
    lead = {"ppo-fedavg": 0.0, "ppo-local": -0.05, "ppo-centralised": -0.02, "sed": -0.5}

    def reward(policy: str, region: int, rnd: int) -> float:
        return -lead[policy] if region == 0 and policy != "sed" else lead[policy]

    _fill(sweep, reward)
    never, trained = federating_gains(sweep)
    assert never.scope == "europe-west9, northamerica-northeast1 (never trained on these worlds)"
    assert trained.scope == "us-east1 (trained on these worlds)"
    assert never.versus_local.mean == pytest.approx(0.05, abs=2e-3)
    assert never.versus_local.verdict() == "better"
    assert never.versus_centralised.mean == pytest.approx(0.02, abs=2e-3)
    assert never.pooled_versus_local.mean == pytest.approx(0.03, abs=2e-3)  # pooling's gain
    assert trained.versus_local.mean == pytest.approx(-0.05, abs=2e-3)
    assert trained.pooled_versus_local.mean == pytest.approx(-0.03, abs=2e-3)
    assert trained.versus_local.verdict() == "worse"
    (cost,) = federating_costs(sweep)
    assert (cost.bytes_each_way, cost.round_s, cost.slowest_region_s, cost.regions_s) == (
        64,
        3.0,
        2.0,
        6.0,
    )


def test_the_drift_is_judged_on_its_region_from_the_round_of_the_change(tmp_path) -> None:
    """us-east1's load rises in round 4: FedAvg beats SED there again from round 6 (3
    rounds), local-only from round 7 (4 rounds); the other regions beat SED throughout, so
    reading them would say 1 round."""
    sweep = _sweep(tmp_path, DRIFT, "drift")
    after = {
        "ppo-fedavg": {4: -1.2, 5: -1.1},
        "ppo-local": {4: -1.3, 5: -1.3, 6: -1.3},
        "ppo-centralised": {4: -1.25},
    }

    def reward(policy: str, region: int, rnd: int) -> float:
        if policy == "sed":
            return -1.0
        if region != 0:
            return -0.5
        late = {"ppo-fedavg": -0.9, "ppo-local": -0.95, "ppo-centralised": -0.92}[policy]
        return after[policy].get(rnd, late if rnd > 3 else -0.9)

    _fill(sweep, reward)
    (gain,) = federating_gains(sweep)
    assert gain.scope == "us-east1"
    assert gain.versus_local.mean == pytest.approx(0.05, abs=2e-3)
    assert gain.versus_centralised.mean == pytest.approx(0.02, abs=2e-3)
    assert gain.first_versus_local.mean == pytest.approx(0.1, abs=2e-3)
    fed, local = gain.race["ppo-fedavg"], gain.race["ppo-local"]
    assert (fed.rounds, fed.seconds, local.rounds, local.seconds) == (3, 6.0, 4, 8.0)


def test_the_federating_sections_render_measured_rows_and_keep_published_ones(tmp_path) -> None:
    sweep = _sweep(tmp_path, RARE, "rare")
    _fill(sweep, lambda policy, region, rnd: -0.5 if policy == "sed" else -0.4)
    _sweep(tmp_path, DRIFT, "drift")  # no cells
    sweeps_dir = tmp_path / "sweeps"
    out = tmp_path / "results.md"
    published = "| `drift` | `ppo-fedavg` | 5 | 19,708 | 15.9 | 9.7 | 23.8 | 1.64 |"
    out.write_text(f"# Results\n\n## What federating costs\n\n{published}\n")
    results_doc.write_results([], out, sweeps_dir, federating=["rare", "drift"], optimum_dir=None)
    page = results_doc.published_sections(out.read_text())
    buys, costs = page["## What federating buys"], page["## What federating costs"]
    assert "| `rare` | `ppo-fedavg` | us-east1 (trained on these worlds) | 3 |" in buys
    assert "| `drift` | | not measured yet:" in buys
    assert "| `rare` | `ppo-fedavg` | 3 | 64 | 3.0 | 2.0 | 6.0 | 1.50 |" in costs
    assert published in costs and "Rows of `drift` are kept as last published" in costs


def test_experience_and_drift_survive_the_saved_config(tmp_path) -> None:
    """A sweep finds its cells finished by loading their saved config.yaml: the new keys
    must come back as they were."""
    experience = "train.experience=[{}, {}, {burstiness: 0.1}]"
    cfg = load_config(DRIFT, [f"results_dir={tmp_path}", experience])
    saved = tmp_path / "config.yaml"
    saved.write_text(to_yaml(cfg))
    assert load_config(saved) == cfg
    assert cfg.train.drift.before.load == 0.35 and cfg.train.experience[2].burstiness == 0.1
