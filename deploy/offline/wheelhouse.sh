#!/usr/bin/env bash
# Wheels for a GPU host without internet that keeps its own torch: everything devicebench needs but torch
# and torchvision (deploy/offline/requirements.py says what), for one Python version on x86_64 Linux, and
# devicebench's own wheel. Run from the project's root where pip reaches a package index (`make wheelhouse`).
# Usage: deploy/offline/wheelhouse.sh DEST [PYTHON_VERSION]     e.g. wheelhouse 3.12
set -euo pipefail
dest=${1:?usage: wheelhouse.sh DEST [PYTHON_VERSION]}
pyv=${2:-3.12}
python=${PYTHON:-python3}
reqs=$(mktemp)
trap 'rm -f "$reqs"' EXIT
"$python" deploy/offline/requirements.py pyproject.toml >"$reqs"
mkdir -p "$dest"
"$python" -m pip download --quiet --dest "$dest" --only-binary=:all: \
  --python-version "$pyv" --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform any --requirement "$reqs"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$dest" .
cp deploy/offline/install.sh "$dest/"
echo "wheelhouse: $(find "$dest" -name '*.whl' | wc -l) wheels for Python $pyv in $dest ($(du -sh "$dest" | cut -f1));" \
  "on the GPU host: bash $dest/install.sh $dest"
