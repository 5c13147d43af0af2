# Every target creates .venv itself on first use, from the lock file: exact versions of
# everything and nothing else (--no-deps: the lock is complete), torch's CPU build first
# (its +cpu version, so that nothing can pull a CUDA build), then the project itself
# without resolving anything again. torch comes from the registries pip is configured with
# where they hold the CPU build (a mirror, a wheel folder: so it works offline), else from
# PyTorch's CPU wheel index, which PyPI's users need (PyPI holds the CUDA build alone).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements.lock
TORCH := torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
CONFIG ?= conf/small_demo.yaml

.PHONY: setup lock placement demo test test-fast lint baselines train plots results transfers optimum speedup attacks report bench scaling clean
.PHONY: notebook

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet pip==26.3
	$(BIN)/pip install --quiet --no-deps $(TORCH) 2>/dev/null || { \
	  echo "$(TORCH) is not on the package registries here: from $(TORCH_INDEX)"; \
	  $(BIN)/pip install --quiet --no-deps --index-url $(TORCH_INDEX) $(TORCH); }
	$(BIN)/pip install --quiet --no-deps -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

# After changing dependencies in pyproject.toml: resolve them afresh and pin the result,
# setuptools too (--all), which --no-deps would otherwise leave at the venv's own, older
# than the wheel's build needs (pip is pinned above).
# Left out: rfc3987-syntax (and lark, which only it needs), an optional IRI checker that
# Jupyter's jsonschema[format-nongpl] asks for. Installed, jsonschema imports it, and it
# builds Earley parsers for two seconds of CPU in every process that imports Ray: some ten
# per Flower simulation run, 18 s of its start on two cores. Without it jsonschema skips
# IRI formats, which nothing here validates.
UNLOCKED := ^(rfc3987-syntax|lark)==
lock: setup
	$(BIN)/pip install --quiet -e ".[hooks,dev,bench]"
	{ sed -n '1,3p' $(LOCK); $(BIN)/pip freeze --all --exclude-editable | grep -v -E '^#|^pip==|$(UNLOCKED)'; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)

setup: $(STAMP)

# The demo replaces its own earlier results; `fedmc run --resume` continues a killed run.
demo: setup
	$(BIN)/fedmc run --config $(CONFIG) --overwrite

baselines: setup
	$(BIN)/fedmc baselines --config $(CONFIG)

train: setup
	$(BIN)/fedmc train --config $(CONFIG) --mode centralised

plots: setup
	$(BIN)/fedmc plot results/small_demo/metrics.csv

# The expected results (docs/results.md, and the README's headline table): the two-tier
# network's width and depth and the learner's training aids on validation worlds
# (conf/sweeps/two_tier_tuning.yaml, learner_tuning.yaml), the default learner federated,
# centralised and local-only over training seeds 0-4 (default.yaml), at 4x the demo's
# budget (plateau.yaml), the exact optimum of small queueing systems (`make optimum`), the same on real datacentre workloads (trace_dc.yaml), each seed's
# federated policy zero-shot on bigger estates (TRANSFERS),
# the node scorer federated and centralised (node_scorer.yaml), a region that joins late
# and one with a tenth of the steps (late_region.yaml, data_poor_region.yaml), and on each
# non-IID setting FedAvg against both forms of FedProx (fedprox_*.yaml) and against the
# two personalised variants, local-only and centralised (personal_*.yaml), and where the
# regions' experience differs: events only one region trains on, each region in turn
# (outages: rare_events*.yaml; unmasked slowdowns: rare_slowdowns*.yaml), a
# region whose load drifts (drift_region.yaml) and ten small regions (many_small_regions.yaml,
# with tries against its regions' own learners: many_small_regions_tries.yaml),
# with why averaging fell short there (federating_diagnosis.yaml, federating_tries.yaml,
# rare_slowdowns_tries.yaml) and SCAFFOLD's drift correction against FedAvg
# (drift_correction.yaml, drift_correction_busy_region.yaml).
# Finished cells are skipped, so an interrupted `make results` continues; `make report`
# summarises and writes the docs again without running anything.
SWEEPS ?= two_tier_tuning learner_tuning default plateau trace_dc node_scorer late_region data_poor_region \
	fedprox_balanced fedprox_busy_region fedprox_skewed_prices_carbon fedprox_outages \
	personal_balanced personal_busy_region personal_skewed_prices_carbon personal_outages \
	rare_events rare_events_at1 rare_events_at2 rare_slowdowns rare_slowdowns_at1 rare_slowdowns_at2 \
	rare_slowdowns_at1_rollout32 rare_slowdowns_tries drift_region many_small_regions \
	many_small_regions_tries many_small_regions_steps federating_diagnosis federating_tries \
	drift_correction drift_correction_busy_region default_fedexp default_mix busy_region_mix \
	rare_slowdowns_fedexp rare_slowdowns_transfer rare_slowdowns_spread declared_size declared_size_error \
	declared_size_estate declared_size_estate_lognormal
TRANSFERS ?= 10x20 20x50
SEEDS ?= 0 1 2 3 4
# Two cells at once fill a 2-core machine (a federated cell leaves one core idle half of
# each round); the cells' results do not depend on it.
JOBS ?= 2
RESULTS_DOC = $(BIN)/python -m fedmc_flwr.analysis.results_doc --sweeps $(SWEEPS) \
	--transfers $(TRANSFERS) --readme README.md

results: setup
	for s in $(SWEEPS); do $(BIN)/fedmc sweep --config conf/sweeps/$$s.yaml --jobs $(JOBS) || exit 1; done
	$(MAKE) transfers
	$(MAKE) optimum
	$(MAKE) speedup
	$(BIN)/fedmc plot results/sweeps/default
	$(RESULTS_DOC)

# The speed-up of federation: 1, 2, 4 and 8 identical regions, the steps per region until
# the federated policy beats SED (fedmc speedup; finished cells are kept), under FedAvg
# and with the server's own step, fixed and FedExP's; and the same experience pooled; the
# fixed step and the pooled learner again on every other region's worlds; the fixed step
# with regions of 8 envs; a federation whose regions take a larger step than one alone
# (`together`), the pooled learner at that step, and that federation on two other regions.
# The page shows the same files (results_doc.SPEEDUPS).
SPEEDUPS = speedup speedup_server_step speedup_fedexp speedup_one_update_fedexp \
	speedup_one_update_server_step speedup_pooled \
	speedup_one_update_server_step_region1 speedup_pooled_region1 \
	speedup_one_update_server_step_region2 speedup_pooled_region2 \
	speedup_one_update_server_step_region6 speedup_pooled_region6 \
	speedup_one_update_server_step_region3 speedup_pooled_region3 \
	speedup_one_update_server_step_region7 speedup_pooled_region7 \
	speedup_one_update_server_step_region5 speedup_pooled_region5 \
	speedup_one_update_server_step_region8 speedup_pooled_region8 \
	speedup_one_update_server_step_region4 speedup_pooled_region4 \
	speedup_one_update_server_step_region9 speedup_pooled_region9 \
	speedup_one_update_server_step_envs8 \
	speedup_together speedup_pooled_together speedup_together_region1 speedup_together_region2
speedup: setup
	for plan in $(SPEEDUPS); do $(BIN)/fedmc speedup --config conf/$$plan.yaml || exit 1; done

# The exact optimum of small queueing systems against SED, JSQ and the CLI's learner
# (bench/bench_optimum.py; the table about an hour on a quiet 2-core machine, the learner
# about two minutes a case and seed, JOBS at once). A part already measured is kept:
# remove its folder under results/optimum/ to measure it again.
PART ?= table learner
optimum: setup
	for p in $(PART); do \
	  test -f results/optimum/$$p/summary.md || \
	    $(BIN)/python bench/bench_optimum.py --part $$p --jobs $(JOBS) || exit 1; \
	done

# The attack table of docs/security.md: every attack against every robust rule, 5 and 10
# regions, 20% and 40% hostile, paired against clean FedAvg (bench/bench_attacks.py).
attacks: setup
	$(BIN)/python bench/bench_attacks.py --doc docs/security.md

# Each training seed's federated policy of the default sweep (its last round), unchanged, on
# conf/transfer_<target>.yaml's held-out worlds beside every dispatcher there.
transfers: setup
	for t in $(TRANSFERS); do \
	  out=results/transfers/transfer_$$t; \
	  for s in $(SEEDS); do \
	    $(BIN)/fedmc transfer --config conf/transfer_$$t.yaml --set results_dir=$$out \
	      --checkpoint results/sweeps/default/ppo-fedavg-s$$s/checkpoints/round_008.npz || exit 1; \
	  done; \
	  $(BIN)/fedmc report $$out/transfer_$$t-transfer-ppo-fedavg-s* --baseline sed \
	    --baseline myopic-expected --markdown > $$out/summary.md || exit 1; \
	done

report: setup
	for s in $(SWEEPS); do \
	  $(BIN)/fedmc sweep --config conf/sweeps/$$s.yaml --summary-only || exit 1; \
	done
	$(RESULTS_DOC)

# notebooks/explore.ipynb in Jupyter Notebook (the lock pins it), from the repository root.
notebook: setup
	$(BIN)/jupyter notebook notebooks/explore.ipynb

# ruff, and the layers of docs/design.md ([tool.importlinter] in pyproject.toml).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# OpenStack Placement for the hook's integration tests, in a virtualenv of its own so that
# its ~70 dependencies (oslo, SQLAlchemy, ...) stay out of the project's lock.
PLACEMENT_VENV := .venv-placement
PLACEMENT := openstack-placement==16.0.0

$(PLACEMENT_VENV)/.installed:
	$(PYTHON) -m venv $(PLACEMENT_VENV)
	$(PLACEMENT_VENV)/bin/pip install --quiet $(PLACEMENT)
	touch $@

placement: $(PLACEMENT_VENV)/.installed

# Two pytest workers, each taking whole test files (so a module's fixtures run once), in
# conftest's order: one worker runs the files of tests/simulation/ (those that start
# Flower's simulation engine) one after another, while the other runs the deployment
# engine's files and the CPU-bound ones; the quick files end the suite. The Flower tests spend much of their
# time waiting on processes starting and stopping, so on two cores two workers finish
# sooner than one (a third finishes no sooner: the Flower runs then contend for the
# cores). TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2
PYTEST = $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: lint placement
	$(PYTEST)

# The edit-test loop: every test that neither starts Flower nor takes long (pyproject's
# markers), in about a minute.
test-fast: setup placement
	$(PYTEST) -m "not slow and not flower"

bench: setup
	$(BIN)/python bench/bench_sim.py
	$(BIN)/python bench/bench_ppo.py
	$(BIN)/python bench/bench_update.py
	$(BIN)/python bench/bench_federation.py
	$(BIN)/python bench/bench_serving.py
	$(BIN)/python bench/bench_engines.py
	$(BIN)/python bench/bench_scaling.py

# The scaling table of docs/benchmarks.md, written there by the run itself: a federated
# round's training and evaluation time and peak memory on five estates, 3 x 6 to 100 x 100
# and 1 x 1000 (bench/bench_scaling.py; conf/huge.yaml's learner, each region's held-out
# evaluation cut to 2 seeds x 100 steps, as is the dispatchers' before round 1, which at
# 100 x 100 is most of the run otherwise).
scaling: setup
	$(BIN)/python bench/bench_scaling.py --table docs/benchmarks.md --set eval.seeds=2 --set eval.steps=100

clean:
	rm -rf $(VENV) $(PLACEMENT_VENV) .pytest_cache .ruff_cache
