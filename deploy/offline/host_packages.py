"""What a GPU host's image already has, so its wheelhouse carries only what the host lacks.

A wheelhouse of everything devicebench needs but torch is ~190 MB for Python 3.12 (pyarrow, scipy, numpy,
pandas, matplotlib, scikit-learn: 130 MB of it), while a GPU image usually has those already and
install.sh's venv sees them (`--system-site-packages`). A wheelhouse that must travel (a lent machine
takes 64 MiB of files) leaves them out: `make wheelhouse HAVE=host.txt`, where host.txt is the host's
`python3 -m pip list --format=freeze` (or `pip freeze`, or one name a line).

* `pins HAVE`: the host's `name==version` lines, which `pip download` takes as constraints, so the
  wheels it picks here are resolved against the versions the host will really import (a host version
  outside a requirement's range fails here, naming it, not offline on the host);
* `prune HAVE DIR`: removes from DIR the wheels of packages the host has, except devicebench's own
  (wheelhouse.sh then downloads what pip builds devicebench with again: its isolated build environment
  sees none of the host's packages).

Usage: python deploy/offline/host_packages.py pins HAVE | prune HAVE DIR
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

OURS = "devicebench"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;@]+)$")
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalized(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): `PyYAML` is `pyyaml`, `py_cpuinfo` is
    `py-cpuinfo`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _lines(text: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in text.splitlines()]


def host_pins(text: str) -> list[str]:
    """The `name==version` lines of a host's listing; editable, URL and bare-name lines give no pin."""
    return [line for line in _lines(text) if _PIN.match(line)]


def host_names(text: str) -> set[str]:
    """Every package a host's listing names, whatever its form (`-e` and option lines name none)."""
    names = set()
    for line in _lines(text):
        m = _NAME.match(line)
        if m:
            names.add(normalized(m.group(1)))
    return names


def prune(have: set[str], wheels: Path) -> list[Path]:
    """Removes (and returns) the wheels in `wheels` of packages in `have`; devicebench's own stays."""
    gone = []
    for wheel in sorted(wheels.glob("*.whl")):
        name = normalized(wheel.name.split("-", 1)[0])  # a wheel's name escapes "-" in the name as "_"
        if name in have and name != OURS:
            wheel.unlink()
            gone.append(wheel)
    return gone


def main(args: list[str]) -> int:
    if len(args) == 2 and args[0] == "pins":
        print("\n".join(host_pins(Path(args[1]).read_text())))
        return 0
    if len(args) == 3 and args[0] == "prune":
        gone = prune(host_names(Path(args[1]).read_text()), Path(args[2]))
        print(f"wheelhouse: left out {len(gone)} wheels the host has ({args[1]})", file=sys.stderr)
        return 0
    print("usage: host_packages.py pins HAVE | prune HAVE DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
