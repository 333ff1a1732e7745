"""The project's own files agree with each other: dependencies, entry points, settings."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from devicebench.config import to_params
from devicebench.workloads import WORKLOADS, load

ROOT = Path(__file__).resolve().parents[1]


def test_conda_env_mirrors_pyproject_runtime_dependencies() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = pyproject["project"]["dependencies"]
    conda = yaml.safe_load((ROOT / "conda.yaml").read_text())
    pip_lists = [d["pip"] for d in conda["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert pip_lists, "conda.yaml has no pip section"
    assert sorted(pip_lists[0]) == sorted(deps)


def test_torch_is_pinned_to_the_release_that_imports_beside_torchvision() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "torch==2.14.1" in deps and "torchvision==0.29.1" in deps


def _mlproject() -> dict:
    return yaml.safe_load((ROOT / "MLproject").read_text())


@pytest.mark.parametrize("name", WORKLOADS)
def test_mlproject_entry_point_matches_the_workload_config(name: str) -> None:
    module = load(name)
    entry = _mlproject()["entry_points"][name]
    fields = [f.name for f in dataclasses.fields(module.Config)]
    assert list(entry["parameters"]) == fields
    defaults = to_params(module.Config())
    for key, spec in entry["parameters"].items():
        declared = str(spec["default"]).lower() if isinstance(spec["default"], bool) else str(spec["default"])
        parsed = module.Config.__dataclass_fields__[key]
        assert declared == defaults[key] or float(declared) == float(defaults[key]), (key, parsed)
        assert f"--{key} {{{key}}}" in entry["command"]


def test_every_setting_read_by_the_code_is_documented_in_env_example() -> None:
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    code = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    read = set(
        re.findall(
            r"""env(?:iron)?(?:\.get)?\(\s*["'](DEVICEBENCH_[A-Z0-9_]+|MLFLOW_TRACKING_[A-Z]+)""", code
        )
    )
    read |= set(re.findall(r"""_float\(env, "([A-Z_]+)\"""", code))
    assert read, "the pattern found no settings at all"
    missing = sorted(
        read
        - documented
        - {
            "DEVICEBENCH_DOTENV",
            "DEVICEBENCH_SUITE",
            "DEVICEBENCH_PARENT_RUN_ID",
            "DEVICEBENCH_RUN_NAME",
            "DEVICEBENCH_SUITE_ITEM",
            "MLFLOW_TRACKING_TOKEN",
        }
    )
    assert not missing, f"settings read by the code but not in .env.example: {missing}"


def test_env_file_is_ignored_by_git() -> None:
    ignored = (ROOT / ".gitignore").read_text().split()
    assert ".env" in ignored


def test_ci_runs_make_test_and_nothing_cleverer() -> None:
    lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[-1] == "make test"
