# Every target creates .venv itself on first use (torch's CPU build is installed first,
# pinned, so that nothing pulls a CUDA build).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= conf/small_demo.yaml

.PHONY: setup demo test lint baselines train plots bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/fedmc run --config $(CONFIG)

baselines: setup
	$(BIN)/fedmc baselines --config $(CONFIG)

train: setup
	$(BIN)/fedmc train --config $(CONFIG) --mode centralised

plots: setup
	$(BIN)/fedmc plot results/small_demo/metrics.csv

lint: setup
	$(BIN)/ruff check .

test: setup
	$(BIN)/ruff check .
	$(BIN)/pytest -q

bench: setup
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	$(BIN)/python bench/bench_sim.py
	$(BIN)/python bench/bench_ppo.py
	$(BIN)/python bench/bench_federation.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
