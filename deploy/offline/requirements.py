"""The requirements a GPU host without internet installs from a wheelhouse: pyproject's runtime
dependencies, the server extras and the test runner, minus torch and torchvision, which such a host keeps
(its own CUDA build: 2.11 on the H100 host of 2026-11-24). pyproject's bounded ranges admit the host's
torch, so pip leaves it in place instead of fetching another. Prints one requirement a line.

`--build` prints only what pip builds devicebench with (pyproject's build-system requires): `pip install
-e .` builds it in an isolated environment that sees none of the host's packages, so those and what
they need are always in the wheelhouse, whatever the host has (wheelhouse.sh).

`--images` prints what the two Docker images install beyond that, at the versions their Dockerfiles pin
(torch and torchvision included): `make docker-wheelhouse` builds them without a package index.

Usage: python deploy/offline/requirements.py [--build | --images] [pyproject.toml]
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

HOST_KEEPS = ("torch", "torchvision")
# From the dev extras: what `make gpu-check` needs to run the GPU tests (not the linters or schema checks).
TEST_RUNNER = ("pytest", "pytest-timeout", "pytest-xdist")


# The Dockerfiles' ARG that pins each package the images install by name.
IMAGE_PINS = {
    "TORCH_VERSION": "torch",
    "TORCHVISION_VERSION": "torchvision",
    "MLFLOW_VERSION": "mlflow[auth]",
    "PSYCOPG_VERSION": "psycopg[binary]",
    "PSYCOPG2_VERSION": "psycopg2-binary",
}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def build_requirements(pyproject: Path) -> list[str]:
    return list(tomllib.loads(pyproject.read_text())["build-system"]["requires"])


def wheelhouse_requirements(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project.get("optional-dependencies", {})
    wanted = [
        *project["dependencies"],
        *extras.get("server", []),
        *(r for r in extras.get("dev", []) if _name(r) in TEST_RUNNER),
        *build_requirements(pyproject),
    ]
    return [r for r in wanted if _name(r) not in HOST_KEEPS]


def image_requirements(pyproject: Path) -> list[str]:
    """The packages docker/*.Dockerfile install by name, pinned as their ARG lines say."""
    pins: dict[str, str] = {}
    for dockerfile in sorted((pyproject.parent / "docker").glob("*.Dockerfile")):
        pins.update(re.findall(r"^ARG ([A-Z0-9_]+_VERSION)=(\S+)$", dockerfile.read_text(), re.MULTILINE))
    missing = sorted(set(IMAGE_PINS) - set(pins))
    if missing:
        sys.exit(f"requirements: no ARG {', '.join(missing)} in docker/*.Dockerfile")
    return [f"{package}=={pins[arg]}" for arg, package in IMAGE_PINS.items()]


if __name__ == "__main__":
    args = sys.argv[1:]
    path = Path(next((a for a in args if not a.startswith("--")), "pyproject.toml"))
    if "--build" in args:
        print("\n".join(build_requirements(path)))
    elif "--images" in args:
        print("\n".join(image_requirements(path)))
    else:
        print("\n".join(wheelhouse_requirements(path)))
