"""The project's own files agree with each other: dependencies, entry points, settings."""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path

import pytest
import yaml

from devicebench.config.fields import to_params
from devicebench.config.mlproject import entry_text
from devicebench.config.workloads import CONFIGS
from devicebench.run.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def test_conda_env_mirrors_pyproject_runtime_dependencies() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = pyproject["project"]["dependencies"]
    conda = yaml.safe_load((ROOT / "conda.yaml").read_text())
    pip_lists = [d["pip"] for d in conda["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert pip_lists, "conda.yaml has no pip section"
    assert sorted(pip_lists[0]) == sorted(deps)


def test_torch_is_a_bounded_range_that_admits_this_machine_and_the_gpu_hosts_builds() -> None:
    """No `==` pin: on a GPU host `pip install -e .` would replace its own CUDA torch, or fail offline.
    Both builds the code ran on are admitted; 2.13.0 (its CPU file breaks PyPI's torchvision here) and
    anything past the tested range are not."""
    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = {r.name: r.specifier for r in map(Requirement, deps)}
    assert all("==" not in str(reqs[name]) for name in ("torch", "torchvision"))
    assert {v for v in ("2.11.0", "2.13.0", "2.14.1", "2.15.0") if reqs["torch"].contains(v)} == {
        "2.11.0",
        "2.14.1",
    }
    assert {v for v in ("0.26.0", "0.29.1", "0.30.0") if reqs["torchvision"].contains(v)} == {
        "0.26.0",
        "0.29.1",
    }


def _mlproject() -> dict:
    return yaml.safe_load((ROOT / "MLproject").read_text())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_mlproject_entry_point_matches_the_workload_config(name: str) -> None:
    """Each default spelled exactly as the CLI logs it: `mlflow run` logs MLproject's value first (and
    the CLI then leaves a param that exists alone), so `0` against the CLI's `0.0` set the same work
    apart in MLflow's compare view. Integers are declared `int`, floats `float`.
    MLproject's entry is the text written from the config class (`python -m devicebench.config.mlproject
    <workload>` prints it), so a field is typed and defaulted in one place."""
    assert entry_text(name) in (ROOT / "MLproject").read_text()
    cls, entry = CONFIGS[name], _mlproject()["entry_points"][name]
    logged, hints = to_params(cls()), typing.get_type_hints(cls)
    for key, spec in entry["parameters"].items():  # and YAML reads it back as the CLI logs it
        assert str(spec["default"]) == logged[key], key
        assert spec["type"] == {int: "int", float: "float"}.get(hints[key], "string"), key


def test_no_mlproject_default_is_an_empty_string() -> None:
    """`mlflow run` logs values shell-quoted: an empty default became the literal `''`."""
    empty = [
        (entry, key)
        for entry, spec in _mlproject()["entry_points"].items()
        for key, param in spec["parameters"].items()
        if str(param.get("default")).strip() == ""
    ]
    assert not empty


@pytest.mark.parametrize(("name", "argv"), [("compare", ["compare"]), ("suite", ["suite", "plan.yaml"])])
def test_compare_and_suite_defaults_are_the_clis(name: str, argv: list[str]) -> None:
    """What `mlflow run -e compare` passes when nothing is set is what the CLI assumes: the same word.
    Not compared: compare's `experiment` (MLproject's `all` is every experiment; the CLI's default is
    the configured one) and suite's `plan` (the CLI needs one)."""
    args = build_parser(name).parse_args(argv)
    params = _mlproject()["entry_points"][name]["parameters"]
    checked = {k: str(v["default"]) for k, v in params.items() if k not in ("experiment", "plan")}
    assert checked == {k: str(getattr(args, k)) for k in checked}


def test_every_setting_read_by_the_code_is_documented_in_env_example() -> None:
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    code = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    read = set(
        re.findall(
            r"""env(?:iron)?(?:\.get)?\(\s*["'](DEVICEBENCH_[A-Z0-9_]+|MLFLOW_TRACKING_[A-Z]+)""", code
        )
    )
    read |= set(re.findall(r"""_(?:float|price)\(env, "([A-Z_]+)\"""", code))
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
    """The developer's commands: `make test`, the end-to-end journeys, then the container test, which may
    not skip in CI."""
    lines = [
        ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith("#")
    ]
    makes = [ln for ln in lines if "make " in ln and not ln.startswith("echo")]
    assert makes == [
        "make test",
        "make test-e2e",
        "DEVICEBENCH_CONTAINERS_REQUIRED=1 make test-containers",
    ], makes


def test_the_offline_wheelhouse_asks_for_everything_but_the_hosts_torch(tmp_path: Path) -> None:
    """`make wheelhouse`: every runtime dependency, the server extras and the test runner, never torch or
    torchvision (a GPU host keeps its own CUDA build); install.sh refuses a Python without torch to keep."""
    import subprocess
    import sys

    from packaging.requirements import Requirement

    out = subprocess.run(
        [sys.executable, "deploy/offline/requirements.py", "pyproject.toml"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\n")  # fmt: skip
    names = {Requirement(r).name for r in out if r}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {Requirement(r).name for r in project["dependencies"]}
    assert names >= runtime - {"torch", "torchvision"} and not names & {"torch", "torchvision"}
    assert {"psycopg", "pytest", "pytest-xdist", "setuptools"} <= names
    no_torch = tmp_path / "python"
    no_torch.write_text("#!/bin/sh\nexit 1\n")  # a Python that cannot import torch
    no_torch.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(ROOT / "deploy/offline/install.sh"), str(tmp_path)],
        cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHON": str(no_torch)}, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2 and "no torch/torchvision to keep" in proc.stderr
    assert not (tmp_path / ".venv").exists()


def test_a_wheelhouse_for_a_host_leaves_out_what_it_has_and_pins_its_versions(tmp_path: Path) -> None:
    """`make wheelhouse HAVE=host.txt`: a lent GPU machine takes 64 MiB of files and the whole wheelhouse
    is ~190 MB, most of it numpy, scipy, pyarrow and pandas, which its image has. The host's versions
    become constraints (pins), its packages' wheels are removed whatever the listing's form, and
    devicebench's own wheel always stays; what pip builds it with is asked for apart (its isolated build
    sees no host package), and wheelhouse.sh downloads that again after pruning. (The downloads need a
    package index: not run here.)"""
    import subprocess
    import sys

    sys.path.insert(0, str(ROOT / "deploy" / "offline"))
    try:
        from host_packages import host_names, host_pins, prune
    finally:
        sys.path.pop(0)

    listing = "\n".join(
        [
            "numpy==2.5.2",
            "PyYAML==6.0.2  # pip list --format=freeze spells names as installed",
            "Py_Cpuinfo",
            "setuptools==80.9.0",
            "devicebench==0.1.0",
            "-e git+https://example.invalid/x.git#egg=x",
            "torch @ file:///opt/torch/torch-2.11.0-cp312.whl",
            "",
        ]
    )
    assert host_pins(listing) == ["numpy==2.5.2", "PyYAML==6.0.2", "setuptools==80.9.0", "devicebench==0.1.0"]
    assert host_names(listing) == {"numpy", "pyyaml", "py-cpuinfo", "setuptools", "devicebench", "torch"}
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    kept = ["mlflow_skinny-3.17.2-py3-none-any.whl", "devicebench-0.1.0-py3-none-any.whl", "install.sh"]
    gone = ["numpy-2.5.2-cp312-cp312-manylinux_2_28_x86_64.whl", "pyyaml-6.0.2-cp312-cp312-any.whl"]
    gone += ["py_cpuinfo-9.0.0-py3-none-any.whl", "setuptools-80.9.0-py3-none-any.whl"]
    for name in kept + gone:
        (wheels / name).write_text("")
    assert sorted(p.name for p in prune(host_names(listing), wheels)) == sorted(gone)
    assert sorted(p.name for p in wheels.iterdir()) == sorted(kept)
    build = subprocess.run(
        [sys.executable, "deploy/offline/requirements.py", "--build", "pyproject.toml"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert build == tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]

    proc = subprocess.run(
        ["bash", "deploy/offline/wheelhouse.sh", str(tmp_path / "out"), "3.12", str(tmp_path / "nope.txt")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    said = f"wheelhouse: HAVE '{tmp_path / 'nope.txt'}' is not a readable file"
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"{said} (the host's pip list --format=freeze)"
    ]
    assert not (tmp_path / "out").exists()


def test_the_readme_cites_only_files_in_the_repository() -> None:
    """Issue 41: the README pointed at `../shared/evidence/...`, which a clone does not have. Every
    picture and link it gives by path is a file (or folder) of this repository."""
    text = (ROOT / "README.md").read_text()
    paths = [t for t in re.findall(r"\]\(([^)#\s]+)", text) if "://" not in t]
    assert any(p.endswith(".png") for p in paths), "the README shows its pictures"
    for path in paths:
        assert not path.startswith(("/", "..")) and (ROOT / path).exists(), path
    quoted = re.findall(r"`((?:docs|experiments|deploy|docker|benchmarks|tests|src)/[\w./-]+)`", text)
    assert quoted, "the README names files in backticks too"
    missing = [p for p in quoted if not (ROOT / p.rstrip("/")).exists()]
    assert not missing, missing
    assert "../shared" not in text


# Files a run writes (report.md) or a command is told to write (out/gpu-check.md), not files to read.
_WRITTEN_DOCS = {"report.md", "gpu-check.md"}


def test_the_rules_the_code_cites_are_documents_of_this_repository() -> None:
    """The code and the plans cite the measurement, pricing and serving rules by file: each such file is
    in this repository (docs/), never a document a clone does not have."""
    sources = [*(ROOT / "src").rglob("*.py"), *(ROOT / "experiments").glob("*.yaml")]
    sources += [ROOT / "ARCHITECTURE.md", ROOT / "README.md"]
    cited = {
        (src.relative_to(ROOT), name)
        for src in sources
        for name in re.findall(r"[\w./-]+\.md\b", src.read_text())
        if Path(name).name not in _WRITTEN_DOCS
    }
    assert any(name == "docs/design.md" for _, name in cited), "the code cites its rules"
    missing = [(str(src), name) for src, name in cited if not (ROOT / name).is_file()]
    assert not missing, missing
