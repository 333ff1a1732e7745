"""`make bench`: each figure is a ratio of two things measured in the same run, so machine speed cancels out."""

from __future__ import annotations

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


def check_ran(bench: str, what: str, code: int, stderr: str) -> None:
    """A run a bench needed that failed ends the bench with that run's own last line (devicebench's one
    line, e.g. `device=cuda` on a host without CUDA), not a traceback: there is no figure without it."""
    if code != 0:
        last = (stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise BadArgument(f"{bench}: {what} exited {code}: {last}")


def exit_with(main: Callable[..., int], *args: Any) -> NoReturn:
    """A script's `__main__`: its exit code, or one line and 2 for a bad argument."""
    try:
        code = main(*args)
    except BadArgument as e:
        print(e, file=sys.stderr)
        code = 2
    sys.exit(code)
