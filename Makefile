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

.PHONY: setup demo test test-e2e lint format bench gpu-check wheelhouse compare screenshots clean help
.DEFAULT_GOAL := help

# A target's first `## ` line wins: `ui`'s recipe is in docker/docker.mk, its help after `demo` here.
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '!seen[$$1]++ {printf "  %-14s %s\n", $$1, $$2}'


# Bytecode is written as modules are first imported, into this project's own .venv, whatever the shell
# says: where PYTHONDONTWRITEBYTECODE is set (some CI images set it) nothing was ever cached, and every
# process compiled torch and MLflow again (25 s, not 7 s, to import both; `make test` took 18 min).
# Hence `pip install --no-compile`: pip compiles ~17,000 files one at a time (3:05 on a 2-core VM), most
# of which no command here imports; testbed/bytecode.py then imports what devicebench, the tests and
# a server use, in two processes at once (13.5 s), so that three test workers do not each compile it again.
export PYTHONDONTWRITEBYTECODE :=

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "make: no Python 3.11-3.13 found; run with PYTHON=/path/to/python3.12" >&2; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[dev,server]'
	$(PY) -m testbed.bytecode
	@touch $@

setup: $(VENV)/.installed ## create .venv with the project, torch and the dev tools

demo: $(VENV)/.installed ## run the demo plan on the embedded SQLite store, offline, then print links to its report run and runs in the MLflow UI
	$(BIN)/devicebench suite experiments/demo.yaml $(if $(filter real,$(DATA)),--data real,)

ui: ## open the MLflow UI on the embedded store (sqlite:///mlflow.db) at 127.0.0.1:5000, or the port MLFLOW_UI_PORT names (the printed links follow it)

# Four workers on two cores, one test file each at a time: tests wait on servers and subprocesses, and a
# worker that waits leaves its core to another (a whole `make test` here: 11:54 with three, 10:06 with four
# and the cores 99% busy, 2026-11-29; 8:35 with three, 9:22 with two on an earlier VM); a file's
# module-scoped server stays with one worker. `pytest tests/x.py` alone runs serially.
# OMP_WAIT_POLICY=PASSIVE: three workers' torch threads on two cores; an OpenMP thread that spins while it
# waits for its team spins on a core another worker needs (4:53 and 569 CPU-s with spinning, 4:30 and
# 521 CPU-s without, one run each here, 2026-11-25). The tests that time things compare within a run.
PYTEST := OMP_WAIT_POLICY=PASSIVE $(BIN)/pytest -n 4 --dist loadfile --no-loadscope-reorder --durations=15

# Two targets, one suite: the journeys across cold processes (marked e2e: `mlflow run`, the demo plan, a
# server killed mid-run, a tuning search, a multi-process job) cost half of the suite's CPU in a twentieth
# of its tests; `make test` is the rest (unit tests, real servers and PostgreSQL, commands forked warm) and
# stays under 5 minutes on a 2-core host. `.ci/run` runs both, and the container test.
test: $(VENV)/.installed ## run the tests but the end-to-end journeys (real mlflow servers, real PostgreSQL where it answers)
	$(PYTEST) -m 'not e2e'

test-e2e: $(VENV)/.installed ## run the end-to-end journeys: `mlflow run`, the demo plan, servers killed mid-run, tuning, multi-process jobs
	$(PYTEST) -m e2e

lint: $(VENV)/.installed ## ruff check and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed ## apply ruff's formatting and fixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(VENV)/.installed ## print the benchmark figures, each a ratio measured in one run
	$(PY) -m benchmarks

gpu-check: $(VENV)/.installed ## on a GPU host: the GPU tests, the demo, a short CPU-vs-GPU plan, a run's fixed cost and the overhead bench on cuda (aim: 10 min on an H100; STEPS="tests demo" runs some, BUDGET=540 ends all within 540 s, LOGS=dir keeps the log and table)
	$(PY) -m benchmarks.gpu_check $(if $(BUDGET),--budget $(BUDGET)) $(if $(LOGS),--logs $(LOGS)) $(STEPS)

# Wheels for a GPU host without internet that keeps its own torch (README: On a GPU host without internet).
# Needs only pip and a package index here, not .venv. PYV: the host's Python; DEST: where the wheels go.
wheelhouse: ## wheels for an offline GPU host that keeps its torch (PYV=3.12 DEST=wheelhouse; HAVE=host.txt, its pip list --format=freeze: only what it lacks)
	PYTHON=$(or $(PYTHON),python3) bash deploy/offline/wheelhouse.sh $(or $(DEST),wheelhouse) $(or $(PYV),3.12) $(HAVE)

compare: $(VENV)/.installed ## compare CPU and GPU runs in the configured store (ARGS="--since 7d ...")
	$(BIN)/devicebench compare $(ARGS)

screenshots: $(VENV)/.installed ## README pictures: a fresh demo in a real `mlflow ui`, checked and shot by headless Chromium
	$(PY) -m testbed.screenshots $(ARGS)

clean: ## remove the embedded store, artifacts and reports made by runs (keeps .venv and data)
	rm -rf mlflow.db mlruns mlartifacts reports

-include docker/docker.mk
