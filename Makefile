# Every target creates .venv itself on first use, from the lock file: exact versions of
# everything, torch's CPU build first from PyTorch's CPU wheel index (so that nothing can
# pull a CUDA build), then the project itself without resolving anything again.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements.lock
TORCH := torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
CONFIG ?= conf/small_demo.yaml

.PHONY: setup lock placement demo test lint baselines train plots results report bench clean

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet pip==26.3
	$(BIN)/pip install --quiet --no-deps --extra-index-url $(TORCH_INDEX) $(TORCH)
	$(BIN)/pip install --quiet -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

# After changing dependencies in pyproject.toml: resolve them afresh and pin the result.
lock: setup
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	{ sed -n '1,3p' $(LOCK); $(BIN)/pip freeze --exclude-editable | grep -v '^#'; } > $(LOCK).new
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

# The README's learning results: each federated variant through Flower and both references
# without federation (centralised, local-only; same env steps), once per training seed,
# then every policy paired against two-tier and SED on the test seeds.
SEEDS ?= 0 1 2 3 4
VARIANTS ?= small_demo ablation_shrink ablation_fedprox ablation_fedprox_shrink
RUNS := $(foreach s,$(SEEDS),$(foreach v,$(VARIANTS),results/$(v)-s$(s)) \
	results/small_demo-s$(s)-centralised results/small_demo-s$(s)-local)

results: setup
	for s in $(SEEDS); do \
	  for v in $(VARIANTS); do \
	    $(BIN)/fedmc run --config conf/$$v.yaml --set seed=$$s --set name=$$v-s$$s \
	      --resume || exit 1; \
	  done; \
	  for m in centralised local; do \
	    $(BIN)/fedmc train --config conf/small_demo.yaml --mode $$m --overwrite \
	      --set seed=$$s --set name=small_demo-s$$s || exit 1; \
	  done; \
	done
	$(MAKE) report

report: setup
	$(BIN)/fedmc report $(RUNS) --baseline two-tier --baseline sed --markdown

lint: setup
	$(BIN)/ruff check .

# OpenStack Placement for the hook's integration tests, in a virtualenv of its own so that
# its ~70 dependencies (oslo, SQLAlchemy, ...) stay out of the project's lock.
PLACEMENT_VENV := .venv-placement
PLACEMENT := openstack-placement==16.0.0

$(PLACEMENT_VENV)/.installed:
	$(PYTHON) -m venv $(PLACEMENT_VENV)
	$(PLACEMENT_VENV)/bin/pip install --quiet $(PLACEMENT)
	touch $@

placement: $(PLACEMENT_VENV)/.installed

test: setup placement
	$(BIN)/ruff check .
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python bench/bench_sim.py
	$(BIN)/python bench/bench_ppo.py
	$(BIN)/python bench/bench_federation.py
	$(BIN)/python bench/bench_serving.py
	$(BIN)/python bench/bench_engines.py
	$(BIN)/python bench/bench_scaling.py

clean:
	rm -rf $(VENV) $(PLACEMENT_VENV) .pytest_cache .ruff_cache
