"""Short readable files, one job each: the size rules a newcomer can rely on, checked rather than hoped for."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "devicebench"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 375  # "about 350": room for a docstring, not for a second job


def test_no_function_in_src_is_over_60_lines() -> None:
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named steps:\n" + "\n".join(long)


def test_no_module_in_src_is_over_about_350_lines() -> None:
    big = [
        f"{p.relative_to(SRC)} ({n} lines)"
        for p in sorted(SRC.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not big, "a module this long does more than one job:\n" + "\n".join(big)
