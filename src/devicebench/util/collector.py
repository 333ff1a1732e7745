"""Python's cyclic garbage collector, paused while a command imports what its work needs.

A run imports some 450,000 long-lived objects (torch, MLflow) before its work starts. With the collector
on, every quarter's growth of the heap set off a full collection over all of them: 8 in a tiny cold
cifar run, the last ones 0.2-0.3 s each (docs/measured.md). Imports leave next to no cyclic garbage, so
the collector waits them out, and what they loaded is then frozen: out of its sight for the process's
life, so a later collection (the first optimizer imports torch._dynamo) walks only what came after.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_for_imports() -> Iterator[None]:
    """No collection inside the block; what is alive at its end is frozen, and the collector resumes
    as it was (a process that had turned it off keeps it off)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_on:
            gc.enable()
