# devicebench: every target creates .venv first when it is missing or older than pyproject.toml.
# torch and torchvision come from this machine's local disk through pip (uv/poetry would download 3 GB).

# The newest interpreter that runs and is 3.11-3.13 (torch 2.14.1 and MLflow 3.17 support these); a
# version manager's shim that names an uninstalled version fails the check and is passed over.
# PYTHON=/path/to/python overrides. Ubuntu 24.04 has 3.12, Debian 12 and this project's images 3.11.
PY_CANDIDATES := python3.13 python3.12 python3.11 python3
ifeq ($(origin PYTHON),undefined)
PYTHON := $(firstword $(foreach p,$(PY_CANDIDATES),$(shell $(p) -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' >/dev/null 2>&1 && echo $(p))))
endif
VENV := .venv
BIN := $(abspath $(VENV))/bin
PY := $(BIN)/python
export PATH := $(BIN):$(PATH)
export GIT_PYTHON_REFRESH := quiet

.PHONY: setup demo test lint format bench gpu-check compare screenshots clean help
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# --no-compile, then compileall on every core: pip compiles ~17,000 files one at a time (3:05 on a 2-core
# VM); this takes 1:17 + 0:52. The bytecode must exist up front: where PYTHONDONTWRITEBYTECODE is set
# nothing is cached on import, and every process then compiles torch and MLflow again (25 s, not 8 s,
# to import both). Packages' own test folders are left out; a few files not in this interpreter's syntax
# (torch's test helpers) fail and are skipped.
$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "make: no Python 3.11-3.13 found; run with PYTHON=/path/to/python3.12" >&2; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[dev,server]'
	-@$(PY) -m compileall -qq -j 0 -x '/tests?/' "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	@touch $@

setup: $(VENV)/.installed ## create .venv with the project, torch and the dev tools

demo: $(VENV)/.installed ## run the demo plan on the embedded SQLite store, offline, then print the report path
	$(BIN)/devicebench suite experiments/demo.yaml $(if $(filter real,$(DATA)),--data real,)

# Two workers, one test file each at a time: most tests wait on servers and subprocesses, and a file's
# module-scoped server stays with one worker. `pytest tests/x.py` alone runs serially.
test: $(VENV)/.installed ## run the test suite (real mlflow servers, real PostgreSQL where it answers)
	$(BIN)/pytest -n 2 --dist loadfile --durations=15

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

screenshots: $(VENV)/.installed ## README pictures: a fresh demo in a real `mlflow ui`, checked and shot by headless Chromium
	$(PY) -m testbed.screenshots $(ARGS)

clean: ## remove the embedded store, artifacts and reports made by runs (keeps .venv and data)
	rm -rf mlflow.db mlruns mlartifacts reports

-include docker/docker.mk
