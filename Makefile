# Two commands from a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint setup ci-study clean

setup: $(STAMP)

# torch first, pinned to the CPU build that lies on this machine kind's disk: an unpinned
# torch pulled in by the `kernels` extra would otherwise fetch a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[kernels,ray,dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/kvsched run --out runs/seed
	@echo "report: runs/seed/report.html"

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -n 2 tests

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf runs .pytest_cache .ruff_cache
