"""Every figure a reader compares is spelt by one function in util/fmt.py: no `fmt_*` function anywhere
else in src/, no format spec for a share, a time or a ratio written out in the report, a run's one-line
answer or its price, and each spelling pinned here."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

from devicebench.util.fmt import fmt_change, fmt_money, fmt_percent, fmt_s, fmt_share, fmt_x
from devicebench.util.stats import Stat

SRC = Path(__file__).resolve().parents[1] / "src" / "devicebench"
HOME = SRC / "util" / "fmt.py"
# f-string format specs that spell a quantity: a percentage, fixed decimals, significant digits
SPELLING = re.compile(r"^[+]?[,]?\.\d+[%fg]$")


def test_no_function_spells_a_figure_outside_util_fmt() -> None:
    found = [
        f"{p.relative_to(SRC)}:{node.lineno} {node.name}"
        for p in sorted(SRC.rglob("*.py"))
        if p != HOME
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_").startswith("fmt_")
    ]
    assert not found, "spell it with (or add it to) devicebench.util.fmt:\n" + "\n".join(found)


SPELT_THROUGH_FMT = [
    *sorted((SRC / "report").rglob("*.py")),
    SRC / "run" / "run_line.py",
    SRC / "pricing" / "prices.py",
    SRC / "pricing" / "price_table.py",
]


def test_the_report_and_a_runs_line_write_no_format_spec_of_their_own() -> None:
    """A `{x:.0%}` in a verdict and a `{x:.2f}` in a table are two spellings of one kind of figure."""
    found = []
    for p in SPELT_THROUGH_FMT:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FormattedValue) and isinstance(node.format_spec, ast.JoinedStr):
                spec = "".join(str(v.value) for v in node.format_spec.values if isinstance(v, ast.Constant))
                if SPELLING.match(spec):
                    found.append(f"{p.relative_to(SRC)}:{node.lineno} :{spec}")
    assert not found, "use devicebench.util.fmt:\n" + "\n".join(found)


def test_each_spelling() -> None:
    assert [fmt_x(x) for x in (1.049, 1.5, 12.34, 250.0, None, math.inf)] == [
        "1.05×",
        "1.50×",
        "12.3×",
        "250×",
        "–",
        "–",
    ]
    assert [fmt_s(x) for x in (135.2, 2.5, 0.0123, 8.5e-5, None)] == [
        "135 s",
        "2.50 s",
        "12.30 ms",
        "85.0 µs",
        "–",
    ]
    assert [fmt_money(x) for x in (0.0000667, 0.00333, 1.275, 1234.5, None)] == [
        "$0.0000667",
        "$0.00333",
        "$1.27",
        "$1,234",
        "–",
    ]
    assert fmt_money(12.5, "EUR") == "12.50 EUR"
    assert [fmt_share(x) for x in (0.834, Stat(0.25, 0.2, 0.3, 3), None)] == ["83%", "25%", "–"]
    assert fmt_change(0.3) == "+30%" and fmt_percent(7.6e-6) == "0.00076%"
