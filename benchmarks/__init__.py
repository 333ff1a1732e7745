"""`make bench`: each figure is a ratio of two things measured in the same run, so machine speed cancels out."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any, NoReturn


class BadArgument(SystemExit):
    """A bench script's one-line refusal: a bad argument, or a run it needs that cannot run here
    (bench_fixed's `cuda` on a host without CUDA). `exit_with` prints it as one line and the script
    exits 2, as devicebench's own commands do (a plain `SystemExit(message)` exits 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def last_line(output: str, none: str = "no output") -> str:
    """What a failed child said last: devicebench's one line, or a traceback's final line."""
    return (output.strip().splitlines() or [none])[-1]


def check_ran(bench: str, what: str, code: int, stderr: str) -> None:
    """A run a bench needed that failed ends the bench with that run's own last line (devicebench's one
    line, e.g. `device=cuda` on a host without CUDA), not a traceback: there is no figure without it."""
    if code != 0:
        raise BadArgument(f"{bench}: {what} exited {code}: {last_line(stderr, '(nothing on stderr)')}")


def deviation(values: list[float]) -> float:
    """The largest deviation of one value from the median of all, as a share of that median: a repeat's
    stability as a nightly check sees it."""
    mid = statistics.median(values)
    return max(abs(v / mid - 1.0) for v in values)


def exit_with(main: Callable[..., int], *args: Any) -> NoReturn:
    """A script's `__main__`: its exit code, or one line and 2 for a bad argument."""
    try:
        code = main(*args)
    except BadArgument as e:
        print(e, file=sys.stderr)
        code = 2
    sys.exit(code)
