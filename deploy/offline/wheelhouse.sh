#!/usr/bin/env bash
# Wheels for a GPU host without internet that keeps its own torch: everything devicebench needs but torch
# and torchvision (deploy/offline/requirements.py says what), for one Python version on x86_64 Linux, and
# devicebench's own wheel. Run from the project's root where pip reaches a package index (`make wheelhouse`).
# HAVE: the host's `python3 -m pip list --format=freeze` (deploy/offline/host_packages.py): the wheels are
# resolved against its versions and those it has are left out (~190 MB for Python 3.12 without it).
# IMAGES=1: also what docker/*.Dockerfile install (torch included, as they pin it), for building the images
# without a package index (`make docker-wheelhouse`; the Dockerfiles' WHEELHOUSE build argument).
# Usage: deploy/offline/wheelhouse.sh DEST [PYTHON_VERSION] [HAVE]     e.g. wheelhouse 3.12 host.txt
set -euo pipefail
dest=${1:?usage: wheelhouse.sh DEST [PYTHON_VERSION] [HAVE]}
pyv=${2:-3.12}
have=${3:-}
python=${PYTHON:-python3}
if [ -n "$have" ] && [ ! -r "$have" ]; then
  echo "wheelhouse: HAVE '$have' is not a readable file (the host's pip list --format=freeze)" >&2
  exit 2
fi
reqs=$(mktemp)
pins=$(mktemp)
trap 'rm -f "$reqs" "$pins"' EXIT
"$python" deploy/offline/requirements.py pyproject.toml >"$reqs"
if [ "${IMAGES:-}" = 1 ]; then "$python" deploy/offline/requirements.py --images pyproject.toml >>"$reqs"; fi
if [ -n "$have" ]; then "$python" deploy/offline/host_packages.py pins "$have" >"$pins"; fi
# Every glibc from 2.17 to 2.28 (bookworm has 2.36): pip matches platform tags exactly, and torch's CUDA
# libraries are tagged 2_17, 2_18 and 2_27 among them.
platforms=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
for minor in $(seq 17 28); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
download() {  # wheels for the host's Python on x86_64 Linux into DEST; the arguments say which
  "$python" -m pip download --quiet --dest "$dest" --only-binary=:all: \
    --python-version "$pyv" --implementation cp "${platforms[@]}" "$@"
}
mkdir -p "$dest"
download --requirement "$reqs" --constraint "$pins"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$dest" .
if [ -n "$have" ]; then
  "$python" deploy/offline/host_packages.py prune "$have" "$dest"
  # what pip builds devicebench with, and what that needs, whatever the host has: the build is isolated
  "$python" deploy/offline/requirements.py --build pyproject.toml >"$reqs"
  download --requirement "$reqs"
fi
cp deploy/offline/install.sh "$dest/"
echo "wheelhouse: $(find "$dest" -name '*.whl' | wc -l) wheels for Python $pyv in $dest ($(du -sh "$dest" | cut -f1));" \
  "on the GPU host: bash $dest/install.sh $dest"
