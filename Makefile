# devicebench: every target creates .venv first when it is missing or older than pyproject.toml.
# torch and torchvision come from this machine's local disk through pip (uv/poetry would download 3 GB).

PYTHON ?= python3.11
VENV := .venv
BIN := $(abspath $(VENV))/bin
PY := $(BIN)/python
export PATH := $(BIN):$(PATH)
export GIT_PYTHON_REFRESH := quiet

.PHONY: setup demo test lint format bench gpu-check compare clean help
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found; run with PYTHON=/path/to/python3.11" >&2; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,server]'
	@touch $@

setup: $(VENV)/.installed ## create .venv with the project, torch and the dev tools

demo: $(VENV)/.installed ## run the demo plan on the embedded SQLite store, offline, then print the report path
	$(BIN)/devicebench suite experiments/demo.yaml $(if $(filter real,$(DATA)),--data real,)

# Two workers, one test file each at a time: most tests wait on servers and subprocesses, and a file's
# module-scoped server stays with one worker. `pytest tests/x.py` alone runs serially.
test: $(VENV)/.installed ## run the test suite (real mlflow servers, real PostgreSQL where it answers)
	$(BIN)/pytest -n 2 --dist loadfile

lint: $(VENV)/.installed ## ruff check and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed ## apply ruff's formatting and fixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(VENV)/.installed ## print the benchmark figures, each a ratio measured in one run
	$(PY) -m benchmarks

gpu-check: $(VENV)/.installed ## on a GPU host: the GPU tests, the demo and a short CPU-vs-GPU plan on cuda (< 10 min)
	$(PY) -m benchmarks.gpu_check

compare: $(VENV)/.installed ## compare CPU and GPU runs in the configured store (ARGS="--since 7d ...")
	$(BIN)/devicebench compare $(ARGS)

clean: ## remove the embedded store, artifacts and reports made by runs (keeps .venv and data)
	rm -rf mlflow.db mlruns mlartifacts reports

-include docker/docker.mk
