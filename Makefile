# Two commands from a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NATIVE := $(VENV)/.native

.PHONY: run test lint setup ci-study ci-baseline clean

setup: $(STAMP) $(NATIVE)

# torch first, pinned to the CPU build that lies on this machine kind's disk: an unpinned
# torch pulled in by the `kernels` extra would otherwise fetch a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[kernels,ray,dev]'
	touch $(STAMP)

# The simulator's hot modules compiled with mypyc and its C extensions (sim/native.py,
# scripts/build_native.py), again whenever a simulator source changes; a failed build leaves
# the sources in use.
$(NATIVE): $(STAMP) $(wildcard sim/*.py sim/*/*.py sim/*.c)
	$(BIN)/python scripts/build_native.py
	touch $(NATIVE)

run: $(STAMP) $(NATIVE)
	$(BIN)/kvsched run --out runs/seed

# Tests that patch a compiled class (marked `pure`) run in a second pass on the sources.
test: $(STAMP) $(NATIVE)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -n 2 tests
	KVSCHED_PURE=1 $(BIN)/pytest -n 2 -m pure tests
	$(MAKE) --no-print-directory ci-study

# The CI regression gate: a short deterministic seed study, checked against the committed
# baseline (hit rate, P99 TTFT/TPOT/E2E, throughput per arm; exit 1 names what regressed).
CI_STUDY := baselines/seed_study.yaml
CI_BASELINE := baselines/seed.json
CI_RUN := runs/ci-seed
ci-study: $(STAMP) $(NATIVE)
	$(BIN)/python -m kvsched.cli run --config $(CI_STUDY) --out $(CI_RUN) --quiet
	$(BIN)/python -m kvsched.cli check $(CI_RUN) --baseline $(CI_BASELINE)

# Rewrite the baseline on purpose (after a change that is meant to move the numbers).
ci-baseline: $(STAMP)
	$(BIN)/python -m kvsched.cli run --config $(CI_STUDY) --out $(CI_RUN) --quiet
	$(BIN)/python -m kvsched.cli check $(CI_RUN) --baseline $(CI_BASELINE) --update

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

clean:
	rm -rf runs .pytest_cache .ruff_cache .mypy_cache $(NATIVE)
	$(PY) scripts/build_native.py --clean
