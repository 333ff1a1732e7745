"""Run a command with `.env` read as devicebench reads it: `python -m devicebench.config.dotenv_exec CMD ...`.

`make server` and `make ui` start MLflow with the same settings the devicebench commands see. Sourcing
`.env` as shell would read a value differently (`pa$word` would lose `$word`) and run any backquote or
`$(...)` in it; this reads it with `settings.load_dotenv_file` (the environment wins, empty values mean
unset, `${NAME}` expands, nothing is executed) and then replaces itself with the command.
"""

from __future__ import annotations

import os
import sys

from devicebench.config.settings import load_dotenv_file, port_setting
from devicebench.errors import UsageError

PORTS = ("MLFLOW_UI_PORT", "MLFLOW_PORT")  # `make ui`'s and `make server`'s


def main(argv: list[str]) -> int:
    """Load `.env` into this process's environment, then exec `argv` (never returns on success)."""
    if not argv:
        print("usage: python -m devicebench.config.dotenv_exec COMMAND [ARG...]", file=sys.stderr)
        return 2
    try:
        load_dotenv_file()
        for name in PORTS:  # checked here: the commands this starts would say it in Click's words
            port_setting(os.environ, name)
    except UsageError as e:
        print(f"devicebench: error: {e}", file=sys.stderr)
        return e.exit_code
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"devicebench: error: cannot run {argv[0]!r}: {e.strerror}", file=sys.stderr)
        return 2
    return 0  # unreachable: execvp replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
