# devicebench tracking server: MLflow with the PostgreSQL driver and the basic-auth app.
#
#   docker build -f docker/server.Dockerfile -t devicebench-mlflow .
#
# Without a package index (an offline host): `make docker-wheelhouse`, serve it on loopback
# (python3 -m http.server -d wheelhouse-images -b 127.0.0.1 8765) and build with
#   docker build --network host --build-arg WHEELHOUSE=http://127.0.0.1:8765/ ...
#
# The command line lives in docker/mlflow-server.sh (the same script `make server` runs); it is
# configured entirely by environment variables, so nothing secret is baked into this image.
FROM python:3.11.14-slim-bookworm

ARG MLFLOW_VERSION=3.17.2
ARG PSYCOPG2_VERSION=2.9.13
# SQLAlchemy 2.1 (MLflow 3.17's) maps postgresql:// to psycopg 3; psycopg2 serves postgresql+psycopg2://.
ARG PSYCOPG_VERSION=3.3.9
# A folder or URL of wheels to install from instead of the package index (empty: the index).
ARG WHEELHOUSE=

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MLFLOW_HOST=0.0.0.0 \
    MLFLOW_PORT=5000 \
    MLFLOW_ARTIFACTS_DESTINATION=/mlflow/artifacts

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN if [ -n "${WHEELHOUSE}" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="${WHEELHOUSE}"; fi \
    && pip install "mlflow[auth]==${MLFLOW_VERSION}" "psycopg[binary]==${PSYCOPG_VERSION}" \
        "psycopg2-binary==${PSYCOPG2_VERSION}"

RUN groupadd --system --gid 10001 mlflow \
    && useradd --system --uid 10001 --gid mlflow --home-dir /mlflow --create-home \
        --shell /usr/sbin/nologin mlflow \
    && mkdir -p /mlflow/artifacts \
    && chown -R mlflow:mlflow /mlflow

COPY --chmod=0755 docker/mlflow-server.sh /usr/local/bin/mlflow-server.sh

WORKDIR /mlflow
USER 10001:10001
VOLUME ["/mlflow/artifacts"]
EXPOSE 5000

HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=6 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('MLFLOW_PORT', '5000')}/health\", timeout=4)"]

ENTRYPOINT ["/usr/local/bin/mlflow-server.sh"]
