"""A workload's MLproject entry point, written from its config class: each field's type and default as
the CLI logs it, and the command that passes every one on. `tests/test_project_files.py` holds MLproject
to this text, and `python -m devicebench.config.mlproject <workload>` prints it for a new workload.
Torch-free."""

from __future__ import annotations

import sys
import typing

from devicebench.config.fields import config_fields, to_params
from devicebench.config.workloads import CONFIGS

ENTRY_COMMAND = "PYTHONPATH=src${{PYTHONPATH:+:$PYTHONPATH}} sh src/mlproject-python -m devicebench"
TYPES = {int: "int", float: "float"}  # anything else is passed, and declared, as a string


def entry_text(workload: str) -> str:
    """The entry point of `workload` as MLproject spells it, from `  <workload>:` to its last flag."""
    cls = CONFIGS[workload]
    hints = typing.get_type_hints(cls)
    defaults = to_params(cls())
    names = [f.name for f in config_fields(cls)]
    lines = [f"  {workload}:", "    parameters:"]
    for name in names:
        kind = TYPES.get(hints[name], "string")
        default = defaults[name] if kind != "string" else f'"{defaults[name]}"'
        lines.append(f"      {name}: {{type: {kind}, default: {default}}}")
    lines += ["    command: |-", f"      {ENTRY_COMMAND} {workload} \\"]
    lines += [
        f"        --{name} {{{name}}}" + (" \\" if i < len(names) - 1 else "") for i, name in enumerate(names)
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    for workload in argv or list(CONFIGS):
        sys.stdout.write(entry_text(workload))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
