"""What a device resolves to on this host and how many data-parallel processes it takes there.

A plan that skips what this host lacks asks this once per device before its first run. Asked in the
suite's own process it would import torch there too, beside the warm server importing it; so the suite
asks a child forked from its warm server instead, `python -m
devicebench.host.capacity DEVICE`, which prints the answer as one JSON line. The child, not the server,
initialises CUDA: a process forked from one that has cannot use CUDA.
"""

from __future__ import annotations

import json
import sys

from devicebench.errors import DeviceUnavailable
from devicebench.host.device import max_processes, resolve_device


def capacity(device: str) -> tuple[str, int] | None:
    """(the device's type, how many processes it takes on this node), or None when this host has no
    such device."""
    try:
        resolved = resolve_device(device)
    except DeviceUnavailable:
        return None
    return resolved.type, max_processes(resolved)


if __name__ == "__main__":
    print(json.dumps(capacity(sys.argv[1])), flush=True)
