# devicebench trainer: runs the workloads (`devicebench <workload> ...`) on a GPU host or the CPU.
#
#   docker build -f docker/trainer.Dockerfile -t devicebench-trainer .            # CUDA 13.0 wheels
#   docker build -f docker/trainer.Dockerfile --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 .
#   docker build -f docker/trainer.Dockerfile --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu .
#   docker build --network host -f docker/trainer.Dockerfile --build-arg WHEELHOUSE=http://127.0.0.1:8765/ .
#
# The last builds without a package index: `make docker-wheelhouse` puts every wheel both images install
# (torch as pinned here included) into wheelhouse-images/, served on loopback with
# `python3 -m http.server -d wheelhouse-images -b 127.0.0.1 8765` (the build shares the host's network).
#
# The PyTorch wheels carry their own CUDA runtime; the host needs only an NVIDIA driver new enough for
# that CUDA version and the NVIDIA container toolkit. Older drivers: pick an older CUDA build above.
# Nothing secret is in this image: the tracking URI and credentials come from the environment.
FROM python:3.11.14-slim-bookworm

ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130
ARG TORCH_VERSION=2.14.1
ARG TORCHVISION_VERSION=0.29.1
# A folder or URL of wheels to install from instead of the package indexes (empty: the indexes).
ARG WHEELHOUSE=

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DEVICEBENCH_DATA_DIR=/data \
    DEVICEBENCH_SPOOL_DIR=/var/lib/devicebench/spool \
    XDG_CACHE_HOME=/cache \
    TORCH_HOME=/cache/torch \
    MPLCONFIGDIR=/cache/matplotlib \
    GIT_PYTHON_REFRESH=quiet

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN groupadd --system --gid 10001 devicebench \
    && useradd --system --uid 10001 --gid devicebench --home-dir /home/devicebench --create-home \
        --shell /usr/sbin/nologin devicebench

# A C compiler: torch.compile's Triton builds a small C launcher per kernel with it (`compile=true`
# fails without one), and python:slim has none. Debian's packages follow the pinned base image's
# bookworm point release; pinning their exact versions would break the build at every security update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Torch first, from the chosen wheel index: the layer that takes long is cached across code changes.
RUN if [ -n "${WHEELHOUSE}" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="${WHEELHOUSE}"; fi \
    && pip install --index-url "${TORCH_INDEX}" \
        "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"

COPY pyproject.toml README.md ./
COPY src ./src
RUN if [ -n "${WHEELHOUSE}" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="${WHEELHOUSE}"; fi \
    && pip install . "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"

COPY MLproject conda.yaml ./
COPY experiments ./experiments

RUN mkdir -p /data /cache /var/lib/devicebench/spool \
    && chown -R devicebench:devicebench /data /cache /var/lib/devicebench /app

USER 10001:10001
VOLUME ["/data", "/cache", "/var/lib/devicebench/spool"]

ENTRYPOINT ["devicebench"]
CMD ["--help"]
