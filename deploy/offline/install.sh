#!/usr/bin/env bash
# On a GPU host without internet, from the project's root: a .venv that sees the host's own torch and
# torchvision (--system-site-packages), and devicebench with everything else from the wheelhouse, offline.
# pyproject's torch range admits the host's build, so pip keeps it: nothing is downloaded or replaced.
# Usage: bash WHEELDIR/install.sh WHEELDIR        then: make gpu-check
set -euo pipefail
wheels=${1:?usage: install.sh WHEELDIR}
python=${PYTHON:-python3}
"$python" -c 'import torch, torchvision' 2>/dev/null \
  || { echo "install.sh: $python has no torch/torchvision to keep; install the host's CUDA build first" >&2; exit 2; }
test -x .venv/bin/python || "$python" -m venv --system-site-packages .venv
.venv/bin/python -m pip install --quiet --no-index --find-links "$wheels" --no-compile -e '.[server]' \
  pytest pytest-timeout pytest-xdist
touch .venv/.installed
.venv/bin/python -c 'import devicebench, mlflow, torch; print("devicebench ready: mlflow", mlflow.__version__,
  "torch", torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "(no CUDA)")'
