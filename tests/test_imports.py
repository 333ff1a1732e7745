"""Imports sit at the top of a module; one inside a function is the exception, and says why.

A lazy import earns its place by keeping a heavy package (torch, torchvision, MLflow) out of a process
that must stay light: `devicebench --help` and a refused typo, the plan and config readers, the NumPy
matmul process, the report on a host without torch. Any other import inside a function only hides a
dependency from the reader of the module's head, so there are few of them, each with its reason in a
comment on its line or the line above (`import torch  # lazy: ...`).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "devicebench"
MAX_FUNCTION_IMPORTS = 40
# a comment that only talks to a tool is not a reason
PRAGMA = re.compile(r"#\s*(type:\s*ignore(\[[^\]]*\])?|noqa(:\s*[\w, ]+)?)\s*")


def function_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement inside a function (a nested function's once), in line order."""
    found: dict[int, ast.Import | ast.ImportFrom] = {}
    for fn in ast.walk(ast.parse(path.read_text())):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found[id(node)] = node
    return sorted(found.values(), key=lambda n: n.lineno)


def reason_lines(path: Path) -> set[int]:
    """The lines that carry a comment with words in it (not only a `type: ignore` or `noqa`)."""
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.COMMENT and PRAGMA.sub("", tok.string).strip("# "):
            lines.add(tok.start[0])
    return lines


def _all() -> list[tuple[str, ast.Import | ast.ImportFrom, set[int]]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        reasons = reason_lines(path)
        out += [(str(path.relative_to(SRC)), node, reasons) for node in function_imports(path)]
    return out


def test_few_imports_sit_inside_functions() -> None:
    found = _all()
    listing = "\n".join(f"{where}:{node.lineno}: {ast.unparse(node)}" for where, node, _ in found)
    outside_report = sum(not where.startswith("report/") for where, _, _ in found)
    assert len(found) <= MAX_FUNCTION_IMPORTS, (
        f"{len(found)} imports inside functions ({outside_report} outside report/), at most "
        f"{MAX_FUNCTION_IMPORTS}; move those without a reason to the module's top:\n{listing}"
    )


def test_every_import_inside_a_function_says_why() -> None:
    silent = [
        f"{where}:{node.lineno}: {ast.unparse(node)}"
        for where, node, reasons in _all()
        if not reasons & set(range(node.lineno - 1, (node.end_lineno or node.lineno) + 1))
    ]
    assert not silent, "say why each is lazy, on its line or the line above:\n" + "\n".join(silent)


def test_the_checks_see_a_silent_lazy_import_and_a_reasoned_one(tmp_path: Path) -> None:
    code = tmp_path / "m.py"
    code.write_text(
        "import os\n\n\ndef f():\n    import json  # type: ignore\n\n"
        "    # lazy: a reason\n    import torch\n    return json, torch, os\n"
    )
    silent, reasoned = function_imports(code)
    assert (silent.lineno, reasoned.lineno) == (5, 8)
    assert reason_lines(code) == {7}
