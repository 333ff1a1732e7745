"""Each workload is declared once (its config in config.workloads.CONFIGS, which carries its KIND), nothing
in src switches on a workload's name, and nothing outside the config layer asks a config which fields it
has.

A branch on `workload == "cifar"` is a place a new workload must be added by hand, and one that is
missed fails silently (the figure just is not shown); a branch on the workload's kind is not. Likewise
`hasattr(cfg, "nproc")` or `getattr(cfg, "loader", "dataloader")` decide what a run does by a field's
name, which a type checker cannot follow and a new workload's config can meet by accident; what a run
can do is what its config is composed of (`isinstance(cfg, Job)`, config.parts).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from devicebench.config.workloads import CONFIGS, KIND_OF, TRAINING_WORKLOADS, WORKLOADS
from devicebench.schema import PRODUCT, SERVING, TRAINING

SRC = Path(__file__).resolve().parents[1] / "src" / "devicebench"
DECLARATION = "config/workloads.py"
CONFIG_LAYER = "config"
# Also a parameter's name: a comparison with it is a switch on a workload only where it says `workload`.
ALSO_A_FIELD = {"model"}
# Dicts keyed by every workload's name that are a declaration, not a switch.
DECLARED_BY_NAME = {
    "config/workloads.py:CONFIGS",  # each workload's config class: the config is the workload's own
}
# Places allowed to switch on a workload's name for now, each with its reason; empty: none does.
STILL_SWITCHING: set[str] = set()


def _names(node: ast.AST) -> list[str]:
    """The workload names a literal holds: a string, or the strings of a tuple, list or set."""
    if isinstance(node, ast.Constant) and node.value in KIND_OF:
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [n for e in node.elts for n in _names(e)]
    return []


def _compares_a_workload(node: ast.Compare) -> bool:
    operands = [node.left, *node.comparators]
    named = [n for o in operands for n in _names(o)]
    others = " ".join(ast.unparse(o) for o in operands if not _names(o))
    return any(n not in ALSO_A_FIELD or "workload" in others for n in named)


def _keyed_by_workload(node: ast.AST) -> bool:
    """A dict literal keyed by a workload's name, or a tuple, list or set of nothing but their names."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set) and node.elts:
        return len(_names(node)) == len(node.elts)
    return isinstance(node, ast.Dict) and any(_names(k) for k in node.keys if k is not None)


def switches(path: Path, root: Path = SRC) -> list[str]:
    """Every comparison or membership test against a workload's name as a literal, every lookup in a
    dict literal keyed by one, and every module-level table keyed by workloads' names or listing them."""
    rel = str(path.relative_to(root))
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and _compares_a_workload(node):
            found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript | ast.Attribute) and _keyed_by_workload(node.value):
            found.append(f"{rel}:{node.lineno} a lookup in a dict of workloads")
    for node in tree.body:
        value, targets = (
            getattr(node, "value", None),
            getattr(node, "targets", [getattr(node, "target", None)]),
        )
        if isinstance(node, ast.Assign | ast.AnnAssign) and _keyed_by_workload(value):
            names = [f"{rel}:{t.id}" for t in targets if isinstance(t, ast.Name)]
            found += [n for n in names if n not in DECLARED_BY_NAME | STILL_SWITCHING]
    return found


def test_no_module_switches_on_a_workloads_name() -> None:
    found = [
        s for p in sorted(SRC.rglob("*.py")) if str(p.relative_to(SRC)) != DECLARATION for s in switches(p)
    ]
    assert not found, "ask the workload's kind (config.workloads.KIND_OF), not its name:\n" + "\n".join(found)


def test_the_scan_finds_a_switch(tmp_path: Path) -> None:
    """The scan above is not vacuous: each form it looks for is found."""
    module = tmp_path / "probe.py"
    module.write_text(
        'def f(side, name):\n    a = side.workload == "cifar"\n    b = side.workload in ("model", "infer")\n'
        '    c = {"matmul": 1}.get(side.workload)\n    d = name == "model"\n    return a, b, c, d\n'
        'UNITS = {"infer": "M"}\nSIZED = ("model", "infer")\n'
    )
    found = switches(module, tmp_path)
    assert [f.split(" ", 1)[0] for f in found] == [
        "probe.py:2",
        "probe.py:3",
        "probe.py:4",
        "probe.py:UNITS",
        "probe.py:SIZED",
    ]


def test_every_allowed_switch_is_still_there() -> None:
    tables = {s for p in sorted(SRC.rglob("*.py")) for s in _tables(p)}
    assert tables >= STILL_SWITCHING | DECLARED_BY_NAME, "remove it from the allow-list: it passes now"


def _tables(path: Path) -> list[str]:
    rel = str(path.relative_to(SRC))
    return [
        f"{rel}:{t.id}"
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign | ast.AnnAssign) and _keyed_by_workload(node.value)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    ]


def test_every_workload_has_a_kind_and_a_config() -> None:
    assert WORKLOADS == tuple(KIND_OF) == tuple(CONFIGS)
    assert all(KIND_OF[w] is cls.KIND for w, cls in CONFIGS.items())
    assert set(KIND_OF.values()) == {PRODUCT, TRAINING, SERVING}
    assert tuple(w for w in WORKLOADS if KIND_OF[w] is TRAINING) == TRAINING_WORKLOADS
    assert len({k.unit for k in KIND_OF.values()}) == 3  # a cost per unit is never compared across kinds


# Names that were written out in two modules with the same value, so one could change without the other.
DEFINED_ONCE = ("PROG", "SEP", "QUALITY_METRICS")


def _module_constants(path: Path) -> list[str]:
    """The names a module assigns at its top level."""
    return [
        t.id
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    ]


def test_shared_constants_are_defined_once() -> None:
    where: dict[str, list[str]] = {name: [] for name in DEFINED_ONCE}
    for path in sorted(SRC.rglob("*.py")):
        for name in _module_constants(path):
            if name in where:
                where[name].append(str(path.relative_to(SRC)))
    assert {n: ps for n, ps in where.items() if len(ps) != 1} == {}


# Every parameter's name of every workload: a getattr or hasattr with one of them asks a config which
# fields it has.
FIELD_NAMES = {f.name for cls in CONFIGS.values() for f in dataclasses.fields(cls)}


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else ast.unparse(func)


def field_checks(path: Path, root: Path = SRC) -> list[str]:
    """Every `hasattr`/`getattr` with a config field's name as a literal, and every walk over a
    dataclass's fields (`dataclasses.fields(...)`, or `fields(...)` imported from dataclasses)."""
    rel = str(path.relative_to(root))
    tree = ast.parse(path.read_text())
    fields_imported = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "dataclasses"
        and any(a.name == "fields" for a in n.names)
        for n in ast.walk(tree)
    )
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name, args = _called(node), node.args
        named = len(args) > 1 and isinstance(args[1], ast.Constant) and args[1].value in FIELD_NAMES
        if (
            (name in ("hasattr", "getattr") and named)
            or name == "dataclasses.fields"
            or (name == "fields" and fields_imported)
        ):
            found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_field_checks_outside_the_config_layer() -> None:
    found = [
        s
        for p in sorted(SRC.rglob("*.py"))
        if p.relative_to(SRC).parts[0] != CONFIG_LAYER
        for s in field_checks(p)
    ]
    assert not found, "ask what the config is (isinstance(cfg, <config.parts part>)), not its fields:\n" + (
        "\n".join(found)
    )


def test_the_field_scan_finds_a_check(tmp_path: Path) -> None:
    """The scan above is not vacuous: each form it looks for is found, and a getattr with a name that
    is no parameter's is not."""
    module = tmp_path / "probe.py"
    module.write_text(
        "import dataclasses\nfrom dataclasses import fields\n"
        'def f(cfg):\n    a = getattr(cfg, "nproc", 1)\n    b = hasattr(cfg, "num_workers")\n'
        "    c = dataclasses.fields(cfg)\n    d = fields(cfg)\n"
        '    e = getattr(cfg, "not_a_parameter", 0)\n    return a, b, c, d, e\n'
    )
    found = field_checks(module, tmp_path)
    assert [f.split(" ", 1)[0] for f in found] == ["probe.py:4", "probe.py:5", "probe.py:6", "probe.py:7"]
