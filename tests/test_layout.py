"""The layout a newcomer can rely on, checked rather than hoped for (ARCHITECTURE.md says why).

- Every import points down the layers or stays in its own package: a package never reaches up.
- Inside `report/` the same holds between its stages: read → model → judge → render → the command.
- No module re-exports another's names: a name is imported from the module that defines it.
- No module imports another module's private name (`_x`), or reads one through a module (`mod._x`).
- The import graph has no cycle, counting imports inside functions and under TYPE_CHECKING.
- No function is over 60 lines: short readable steps.

Every import counts, wherever it sits in the module: a lazy import inside a function is still a
dependency that a reader has to follow.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "devicebench"
MAX_FUNCTION_LINES = 60
# Lowest first. A module may import its own package and any package in a lower layer, nothing higher.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "schema", "util", "__init__"}),  # foundation: names, the error type, helpers
    frozenset({"config"}),  # what a run is asked to do; the environment
    frozenset({"host", "pricing"}),  # the machine it runs on; what that machine costs
    frozenset({"tracking", "data", "models"}),  # where results go; what is trained on, and what
    frozenset({"train"}),  # one training run
    frozenset({"workloads"}),  # matmul, cifar, unet, model, infer
    frozenset({"report"}),  # runs read back and compared (torch-free)
    frozenset({"plan"}),  # many runs from one YAML, then the report
    frozenset({"run", "__main__"}),  # the command line and one run from flags to store
)


# report/'s stages, first first: data passes through each once, and a stage never imports a later one
REPORT_STAGES = ("read", "model", "judge", "render")  # then report's own modules: cli, command, links


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def top(module: str) -> str:
    """`devicebench.report.cli` -> `report`; the package itself -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer(module: str) -> int:
    name = top(module)
    for i, packages in enumerate(LAYERS):
        if name in packages:
            return i
    raise AssertionError(f"{module}: package {name!r} is in no layer of tests/test_layout.py")


def imports(path: Path) -> Iterator[tuple[int, str, str | None]]:
    """(line, imported devicebench module, imported name or None) for every import in the file."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "devicebench":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield (node.lineno, full, None) if full in MODULES else (node.lineno, node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "devicebench":
                    yield node.lineno, alias.name, None


def test_every_package_is_in_a_layer() -> None:
    for module in MODULES:
        layer(module)


def test_no_import_points_up_a_layer() -> None:
    up = [
        f"{module} (layer {layer(module)}):{line} imports {target} (layer {layer(target)})"
        for module, path in MODULES.items()
        for line, target, _ in imports(path)
        if layer(target) > layer(module)
    ]
    assert not up, "move the shared part down, or the caller up:\n" + "\n".join(up)


def private_reads(path: Path) -> Iterator[str]:
    """`from x import _y` of another module, and `mod._y` where `mod` names an imported devicebench module."""
    tree = ast.parse(path.read_text())
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("devicebench"):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    yield f"{node.lineno}: from {node.module} import {a.name}"
                if f"{node.module}.{a.name}" in MODULES:
                    aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            aliases.update(a.asname or a.name for a in node.names if a.name.startswith("devicebench"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            yield f"{node.lineno}: {node.value.id}.{node.attr}"


def stage(module: str) -> int:
    """`devicebench.report.model.pairs` -> 1; report's own modules (cli, command, links) come last."""
    parts = module.split(".")
    return REPORT_STAGES.index(parts[2]) if len(parts) > 3 else len(REPORT_STAGES)


def test_inside_the_report_data_flows_one_way() -> None:
    report = {m: p for m, p in MODULES.items() if top(m) == "report"}
    back = [
        f"{module} (stage {stage(module)}):{line} imports {target} (stage {stage(target)})"
        for module, path in report.items()
        for line, target, _ in imports(path)
        if top(target) == "report" and stage(target) > stage(module)
    ]
    assert not back, (
        "a stage reads only earlier ones; move the shared part to the earlier stage:\n" + "\n".join(back)
    )


def defined(path: Path) -> set[str]:
    """The names a module binds itself at its top level: not the ones it imports, except under a name
    of its own (`import CifarConfig as Config`: a workload module's `Config`, its protocol says so)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update(a.asname for a in node.names if a.asname and a.asname != a.name.split(".")[-1])
    return names


def test_every_name_is_imported_from_the_module_that_defines_it() -> None:
    """One import path per name: a name taken from a module that only imported it (a re-export) is a
    second path that outlives the move of the name, and no module lists `__all__` to offer one."""
    outside = [
        p for d in ("tests", "benchmarks", "testbed") for p in sorted((SRC.parents[1] / d).rglob("*.py"))
    ]
    owners = {m: defined(p) for m, p in MODULES.items()}
    found = []
    for where, path in [*((m, p) for m, p in MODULES.items()), *((str(p), p) for p in outside)]:
        for line, target, name in imports(path):
            if name is not None and target in owners and name not in owners[target]:
                found.append(f"{where}:{line} takes {name} from {target}, which does not define it")
        if "__all__" in defined(path):
            found.append(f"{where}: lists __all__")
    assert not found, "import each name from where it is defined:\n" + "\n".join(found)


def test_no_module_reads_another_modules_private_names() -> None:
    """In src/, and in the benchmarks and testbed that use it (tests may reach inside what they test)."""
    outside = [p for d in ("benchmarks", "testbed") for p in sorted((SRC.parents[1] / d).rglob("*.py"))]
    found = [f"{m}:{hit}" for m, p in MODULES.items() for hit in private_reads(p)]
    found += [f"{p.relative_to(SRC.parents[1])}:{hit}" for p in outside for hit in private_reads(p)]
    assert not found, "make it public (and say why it is shared) or keep it in its module:\n" + "\n".join(
        found
    )


def test_the_import_graph_has_no_cycle() -> None:
    graph = {m: {t for _, t, _ in imports(p) if t != m} for m, p in MODULES.items()}
    cycles: list[str] = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                cycles.append(" -> ".join([*stack[stack.index(t) :], t]))
            elif t not in state:
                visit(t, [*stack, t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "break each cycle by moving what both need down a layer:\n" + "\n".join(cycles)


def test_no_function_in_src_is_over_60_lines() -> None:
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named steps:\n" + "\n".join(long)


MAX_PARAMETERS = 8
MAX_MODULE_LINES = 500
# A dated figure (a real calendar date), an issue number, the machine a comment was written on, or an
# undated timing ("~3 s", "(~50 ms)"): a comment says why in words, and a figure goes to docs/measured.md
# with its date and host.
NOTEBOOK = re.compile(
    r"\b20\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])\b|\bissues? #?\d+|\bthis (\(?\d+-core\)? )?VM\b|\b\d+-core VM\b"
    r"|~\d[\d.,]*\s?(s|ms|µs)\b",
    re.IGNORECASE,
)
# Names several modules define for the same role, so that a caller can treat the modules alike.
SAME_ROLE = {
    "run": "a workload module's `Workload.run`, and a subcommand module's work (plan.cli, report.cli)",
    "check": "a workload module's optional `Workload.check`, run before the run exists",
    "add_arguments": "a subcommand module's flags (plan.cli, report.cli), added to the one parser",
    "main": "the entry point of a separate process (the CLI, the fork server, an isolated child)",
    "measure": "a benchmark workload's measurement before it is logged (matmul's products, infer's serving)",
    # a training workload's parts (cifar, unet, model): each builds the same piece for its own data
    "load_datasets": "a training workload's datasets",
    "make_loaders": "a training workload's train and eval loaders",
    "eval_metrics": "a training workload's metrics of one evaluation",
    "per_class_table": "a training workload's per-class table",
    "model_name": "the model a training workload tags",
    "_task": "a training workload's `train.setup.Task`",
    "_log_artifacts": "what a training workload logs after its summary",
}
# Places allowed to fail the checks below for now, each with its reason; empty: every place passes.
OVER_8_PARAMETERS: set[str] = set()
OVER_500_LINES: set[str] = set()
NOTEBOOK_COMMENTS: set[str] = set()
SHARED_NAMES: set[str] = set()


def _rel(path: Path) -> str:
    return str(path.relative_to(SRC))


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def over_8_parameters() -> set[str]:
    return {
        f"{_rel(p)}:{node.name}"
        for p in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and len(_parameters(node)) > MAX_PARAMETERS
    }


def notebook_lines(path: Path) -> list[str]:
    """Every comment and docstring of the module that holds a dated figure, an issue or 'this VM'."""
    text = path.read_text()
    found = [
        f"{_rel(path)}:{tok.start[0]} {tok.string.strip()[:70]}"
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT and NOTEBOOK.search(tok.string)
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False) or ""
            found += [
                f"{_rel(path)}:{getattr(node, 'lineno', 1)} {m.group(0)}" for m in NOTEBOOK.finditer(doc)
            ]
    return found


def top_level_names(path: Path) -> set[str]:
    """What a module defines at its top level: its functions and classes, and a type made by assignment
    (a CamelCase name: `Point = Callable[...]`). An UPPER_CASE constant names its own module's value."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(
                t.id for t in targets if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()
            )
    return names


def shared_names() -> dict[str, list[str]]:
    where: dict[str, list[str]] = {}
    for p in sorted(SRC.rglob("*.py")):
        for name in top_level_names(p):
            where.setdefault(name, []).append(_rel(p))
    return {n: ps for n, ps in where.items() if len(ps) > 1 and n not in SAME_ROLE}


def test_no_function_in_src_takes_over_8_parameters() -> None:
    found = sorted(over_8_parameters() - OVER_8_PARAMETERS)
    assert not found, "parameters that travel together are a frozen dataclass:\n" + "\n".join(found)


def test_no_module_in_src_is_over_500_lines() -> None:
    found = [
        f"{_rel(p)} ({n} lines)"
        for p in sorted(SRC.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES and _rel(p) not in OVER_500_LINES
    ]
    assert not found, "split it into modules with one job each:\n" + "\n".join(found)


def test_no_comment_in_src_reads_like_a_lab_notebook() -> None:
    """A comment says why the code is as it is; the figure it rests on, with its date and host, goes to
    docs/measured.md or a commit message."""
    found = [
        line
        for p in sorted(SRC.rglob("*.py"))
        if _rel(p) not in NOTEBOOK_COMMENTS
        for line in notebook_lines(p)
    ]
    assert not found, "say why, and move the figure to docs/measured.md:\n" + "\n".join(found)


def test_no_two_modules_define_one_name_for_different_things() -> None:
    found = [f"{n}: {', '.join(ps)}" for n, ps in sorted(shared_names().items()) if n not in SHARED_NAMES]
    assert not found, "name each for what it holds:\n" + "\n".join(found)


def test_every_allowed_exception_still_fails_its_check() -> None:
    """An entry whose place was cleared leaves the allow-lists above, so they only shrink."""
    long = {_rel(p) for p in SRC.rglob("*.py") if len(p.read_text().splitlines()) > MAX_MODULE_LINES}
    noted = {_rel(p) for p in SRC.rglob("*.py") if notebook_lines(p)}
    stale = [
        *(OVER_8_PARAMETERS - over_8_parameters()),
        *(OVER_500_LINES - long),
        *(NOTEBOOK_COMMENTS - noted),
        *(SHARED_NAMES - set(shared_names())),
    ]
    assert not stale, "remove from the allow-list, it passes now:\n" + "\n".join(sorted(stale))
