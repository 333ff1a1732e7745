"""Named, timed steps: a failure names the step it happened in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Failed(Exception):
    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"{step}: {detail}")
        self.step, self.detail = step, detail


class Steps:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.figures: list[str] = []

    def say(self, line: str) -> None:
        print(f"{self.prefix}:   {line}", flush=True)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        print(f"{self.prefix}: {name} ...", flush=True)
        start = time.monotonic()
        try:
            yield
        except Failed:
            raise
        except Exception as e:  # any failure inside a step is that step's, said in one line
            detail = " | ".join(line.strip() for line in str(e).splitlines() if line.strip())
            raise Failed(name, f"{type(e).__name__}: {detail[:1500]}") from e
        print(f"{self.prefix}: {name}: ok ({time.monotonic() - start:.0f} s)", flush=True)
