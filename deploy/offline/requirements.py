"""The requirements a GPU host without internet installs from a wheelhouse: pyproject's runtime
dependencies, the server extras and the test runner, minus torch and torchvision, which such a host keeps
(its own CUDA build: 2.11 on the H100 host of 2026-11-24). pyproject's bounded ranges admit the host's
torch, so pip leaves it in place instead of fetching another. Prints one requirement a line.

Usage: python deploy/offline/requirements.py [pyproject.toml]
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

HOST_KEEPS = ("torch", "torchvision")
# From the dev extras: what `make gpu-check` needs to run the GPU tests (not the linters or schema checks).
TEST_RUNNER = ("pytest", "pytest-timeout", "pytest-xdist")
BUILD = ("setuptools>=68", "wheel")  # pip builds devicebench itself (`pip install -e .`) from these offline


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def wheelhouse_requirements(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project.get("optional-dependencies", {})
    wanted = [
        *project["dependencies"],
        *extras.get("server", []),
        *(r for r in extras.get("dev", []) if _name(r) in TEST_RUNNER),
        *BUILD,
    ]
    return [r for r in wanted if _name(r) not in HOST_KEEPS]


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml")
    print("\n".join(wheelhouse_requirements(path)))
