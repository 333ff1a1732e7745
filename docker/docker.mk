# Docker, the tracking server and the UI. Included by the top-level Makefile, which defines
# VENV, PY and the $(VENV)/.installed stamp that creates the venv.

COMPOSE ?= docker compose --env-file .env -f docker/compose.yaml
NIGHTLY_PLAN ?= experiments/nightly.yaml

.PHONY: docker-env docker-build docker-up docker-down docker-nightly docker-wheelhouse test-containers server ui

# Compose reads every password and URI from .env; refuse with one line when it is missing.
docker-env:
	@test -f .env || { echo "no .env: cp .env.example .env, then set POSTGRES_PASSWORD in it" >&2; exit 2; }

docker-build: docker-env ## build the trainer (CUDA) and tracking-server images
	$(COMPOSE) --profile gpu --profile cpu build

docker-up: docker-env ## start PostgreSQL and the MLflow server (http://127.0.0.1:5000; MLFLOW_PORT in .env moves it)
	$(COMPOSE) up -d --wait postgres mlflow

docker-down: docker-env ## stop the stack (volumes, so runs and artifacts, are kept)
	$(COMPOSE) --profile gpu --profile cpu down

docker-nightly: docker-env ## run the nightly suite in the GPU trainer against the compose server
	$(COMPOSE) --profile gpu run --rm -T trainer suite $(NIGHTLY_PLAN)

# Every wheel both images install, for Python 3.11 (their base image's), into DEST: build with
# --network host --build-arg WHEELHOUSE=http://127.0.0.1:PORT/ while it is served on loopback (README, Docker).
docker-wheelhouse: ## wheels to build the images without a package index (DEST=wheelhouse/images)
	IMAGES=1 PYTHON=$(or $(PYTHON),python3) bash deploy/offline/wheelhouse.sh $(or $(DEST),wheelhouse/images) 3.11

# Not part of `make test` (minutes, and an engine): the images built as shipped, the stack run end to end.
test-containers: $(VENV)/.installed ## build both images and run the compose stack end to end (a container engine, or root on Debian)
	$(PY) -m testbed.containers

# The same server as the compose `mlflow` service, from the same script, on the store in .env
# (MLFLOW_BACKEND_STORE_URI: a PostgreSQL URI, or the embedded sqlite:///mlflow.db by default).
# .env is read as devicebench reads it (devicebench.config.dotenv_exec), never sourced as shell: a `$` in a
# password stays one password, and a backquote or `$(...)` in a value is text, not a command.
DOTENV_EXEC = $(PY) -m devicebench.config.dotenv_exec

server: $(VENV)/.installed ## start the MLflow tracking server locally (settings from .env)
	$(DOTENV_EXEC) bash docker/mlflow-server.sh

# MLFLOW_UI_PORT from the environment or .env: the port the links `demo` and `compare` print name.
# MLflow's job runner (seven consumers, ~2.8 GB, for GenAI features devicebench does not use) stays off
# unless the environment or .env says MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true. The single quotes keep
# make's shell from expanding anything: bash expands the variables after .env is loaded.
ui: $(VENV)/.installed ## open the MLflow UI on the embedded store (sqlite:///mlflow.db)
	$(DOTENV_EXEC) bash -c 'export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="$${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"; \
		exec mlflow ui --backend-store-uri sqlite:///mlflow.db --workers 1 --host 127.0.0.1 --port "$${MLFLOW_UI_PORT:-5000}"'
