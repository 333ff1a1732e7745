"""The requirements a GPU host without internet installs from a wheelhouse: pyproject's runtime
dependencies, the server extras and the test runner, minus torch and torchvision, which such a host keeps
(its own CUDA build: 2.11 on the H100 host of 2026-11-24). pyproject's bounded ranges admit the host's
torch, so pip leaves it in place instead of fetching another. Prints one requirement a line.

`--build` prints only what pip builds devicebench with (pyproject's build-system requires): `pip install
-e .` builds it in an isolated environment that sees none of the host's packages, so those and what
they need are always in the wheelhouse, whatever the host has (wheelhouse.sh).

Usage: python deploy/offline/requirements.py [--build] [pyproject.toml]
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

HOST_KEEPS = ("torch", "torchvision")
# From the dev extras: what `make gpu-check` needs to run the GPU tests (not the linters or schema checks).
TEST_RUNNER = ("pytest", "pytest-timeout", "pytest-xdist")


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


if __name__ == "__main__":
    args = sys.argv[1:]
    build = "--build" in args
    path = Path(next((a for a in args if a != "--build"), "pyproject.toml"))
    print("\n".join(build_requirements(path) if build else wheelhouse_requirements(path)))
