"""The run schema is defined once: workload names, the tag prefix, MLflow's limits and gflops live in
schema.py, and a second spelling anywhere in src/ is a test failure rather than a future drift."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devicebench import schema
from devicebench.config.workloads import WORKLOADS

SRC = Path(__file__).resolve().parents[1] / "src" / "devicebench"


def _code(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring nodes (module, class, function): prose may name tags and workloads."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _is_module_path(text: str) -> bool:
    """`devicebench.workloads.` (importlib) names code, not a tag."""
    rel = text.removeprefix("devicebench.").split(":")[0].rstrip(".").replace(".", "/")
    return (SRC / rel).is_dir() or (SRC / f"{rel}.py").is_file()


def _sources() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py")) if p.name != "schema.py"]


def test_no_tag_is_spelled_with_a_literal_prefix() -> None:
    stray = []
    for path in _sources():
        tree = _code(path)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and node.value.startswith(schema.TAG_PREFIX)
                and not _is_module_path(node.value.split()[0].split("`")[0])
            ):
                stray.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value[:60]!r}")
    assert not stray, "spell tags with schema.tag() / TAG_PREFIX:\n" + "\n".join(stray)


METRIC_NAME = re.compile(r"^[a-z]+/[a-z0-9_]+$")
METRICS = {
    v: k for k, v in vars(schema).items() if k.isupper() and isinstance(v, str) and METRIC_NAME.match(v)
}


def test_every_metric_name_is_spelled_once_in_schema_and_imported_where_it_is_written_and_read() -> None:
    """A metric's name as a string in code (not in prose) anywhere but schema.py is a second spelling."""
    assert {"time/train_s", "throughput/train_samples_per_s", "util/peak_fraction"} <= set(METRICS)
    stray = []
    importers: dict[str, set[str]] = {name: set() for name in METRICS.values()}
    for path in _sources():
        tree = _code(path)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in METRICS and id(node) not in docs:
                stray.append(
                    f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r} is {METRICS[node.value]}"
                )
            if isinstance(node, ast.ImportFrom) and node.module == "devicebench.schema":
                for alias in node.names:
                    importers.get(alias.name, set()).add(str(path.relative_to(SRC)))
    assert not stray, "import the name from devicebench.schema:\n" + "\n".join(stray)
    # one symbol search finds where training time is measured and every place that reads it
    assert "train/loop.py" in importers["TRAIN_S"] and "train/loop.py" in importers["TRAIN_RATE"]
    assert any(p.startswith("report/") for p in importers["TRAIN_S"]), importers["TRAIN_S"]
    assert any(p.startswith("report/") for p in importers["TRAIN_RATE"]), importers["TRAIN_RATE"]


def _metric_groups() -> set[str]:
    """The first part of every metric name schema spells (`time`, `dist`, `matmul`, ...): its constants',
    and what each of its `*_key` and `*_prefix` functions builds from placeholders."""
    groups = {name.split("/")[0] for name in METRICS} | {schema.GLANCE}
    for name, f in vars(schema).items():
        if callable(f) and name.endswith(("_key", "_prefix")) and f.__module__ == schema.__name__:
            params = inspect.signature(f).parameters.values()
            groups.add(f(*[1 if p.annotation in ("int", int) else "x" for p in params]).split("/")[0])
    return groups


def test_no_metric_name_is_built_with_an_f_string_outside_schema() -> None:
    """`f"dist/rank/{r}/train_s"` is a metric name too: a family is spelled by its function in schema.py
    (`rank_key`, `matmul_key`, `speedup_key`, ...), so a search for the function finds every writer and
    reader. Caught: an f-string whose text starts with a metric group and a slash, or with a schema
    constant that names a group (`f"{GLANCE}/..."`)."""
    groups = _metric_groups()
    assert {"time", "dist", "matmul", "eval", "cost", "at_a_glance", "speedup", "scaling"} <= groups
    group_names = {k for k, v in vars(schema).items() if k.isupper() and isinstance(v, str) and v in groups}
    stray = []
    for path in _sources():
        for node in ast.walk(_code(path)):
            if not isinstance(node, ast.JoinedStr) or not node.values:
                continue
            first, second = node.values[0], node.values[1] if len(node.values) > 1 else None
            if isinstance(first, ast.Constant):
                group, slash, _ = str(first.value).partition("/")
                spelled = bool(slash) and group in groups
            else:  # f"{GLANCE}/{name}"
                value = first.value if isinstance(first, ast.FormattedValue) else None
                spelled = (
                    isinstance(value, ast.Name)
                    and value.id in group_names
                    and isinstance(second, ast.Constant)
                    and str(second.value).startswith("/")
                )
            if spelled:
                stray.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert not stray, "build the name with its function in devicebench.schema:\n" + "\n".join(stray)


def test_the_workload_names_are_listed_once() -> None:
    names = set(WORKLOADS)
    stray = []
    for path in _sources():
        for node in ast.walk(_code(path)):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                values = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if names <= values:
                    stray.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not stray, "use config.workloads.WORKLOADS:\n" + "\n".join(stray)


def test_the_workloads_are_declared_only_by_their_configs() -> None:
    """WORKLOADS, KIND_OF and TRAINING_WORKLOADS are views of config.workloads.CONFIGS, defined there."""
    pattern = re.compile(r"^\s*(WORKLOADS|KNOWN_WORKLOADS|KIND_OF|TRAINING_WORKLOADS|TUNABLE)\s*(:[^=]+)?=")
    where = [
        f"{p.relative_to(SRC)}:{i}"
        for p in sorted(SRC.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.match(line)
    ]
    assert [w.split(":")[0] for w in where] == ["config/workloads.py"] * 3, where


@pytest.mark.parametrize(
    "definition",
    [
        r"^\s*(MAX_TAG\w*|MAX_BATCH\w*|MAX_RUN_NAME|MAX_EXPERIMENT|TAG_PREFIX|TAG)\s*(:[^=]+)?=",
        r"^def gflops\(",
    ],
)
def test_schema_names_and_helpers_are_defined_only_in_schema(definition: str) -> None:
    pattern = re.compile(definition)
    stray = [
        f"{p.relative_to(SRC)}:{i}: {line.strip()}"
        for p in _sources()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.match(line)
    ]
    assert not stray, "\n".join(stray)


@pytest.mark.parametrize(
    "module", ["devicebench.schema", "devicebench.report", "devicebench.config.workloads"]
)
def test_the_schema_and_the_report_never_import_torch(module: str) -> None:
    """The report runs where torch is not installed (a laptop reading a GPU host's runs)."""
    code = f"import sys, importlib; importlib.import_module({module!r}); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_gflops_counts_two_flops_per_multiply_add() -> None:
    assert schema.gflops(1000, 2.0) == pytest.approx(1.0)


def test_reading_a_plan_never_imports_torch() -> None:
    """`suite --dry-run` and the plan checks run before any run: on a laptop without torch too."""
    code = (
        "import sys; from devicebench.plan.spec import load_plan; "
        "load_plan('experiments/demo.yaml'); print('torch' in sys.modules)"
    )
    root = SRC.parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
