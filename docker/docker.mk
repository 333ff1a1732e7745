# Docker, the tracking server and the UI. Included by the top-level Makefile, which defines
# VENV, PY and the $(VENV)/.installed stamp that creates the venv.

COMPOSE ?= docker compose --env-file .env -f docker/compose.yaml
NIGHTLY_PLAN ?= experiments/nightly.yaml

.PHONY: docker-env docker-build docker-up docker-down docker-nightly server ui

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

# The same server as the compose `mlflow` service, from the same script, on the store in .env
# (MLFLOW_BACKEND_STORE_URI: a PostgreSQL URI, or the embedded sqlite:///mlflow.db by default).
server: $(VENV)/.installed ## start the MLflow tracking server locally (settings from .env)
	set -a; if [ -f .env ]; then . ./.env; fi; set +a; \
	PATH="$(abspath $(VENV))/bin:$$PATH" exec bash docker/mlflow-server.sh

# MLFLOW_UI_PORT from the environment or .env: the port the links `demo` and `compare` print name.
ui: $(VENV)/.installed ## open the MLflow UI on the embedded store (sqlite:///mlflow.db)
	set -a; if [ -f .env ]; then . ./.env; fi; set +a; \
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/mlflow ui \
		--backend-store-uri sqlite:///mlflow.db --workers 1 --host 127.0.0.1 --port $${MLFLOW_UI_PORT:-5000}
