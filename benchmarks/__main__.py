"""Run every benchmark module's `main()` and exit non-zero when any figure misses its target."""

from __future__ import annotations

import importlib
import sys

from benchmarks import BadArgument

MODULES = (
    "benchmarks.bench_matmul",
    "benchmarks.bench_cifar",
    "benchmarks.bench_overhead",
    "benchmarks.bench_compare",
    "benchmarks.bench_fixed",
    "benchmarks.bench_zoo",
    "benchmarks.bench_tune",
    "benchmarks.bench_loadgen",
    "benchmarks.bench_http",
)


def main() -> int:
    worst = 0
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            print(f"{name}: not present, skipped")
            continue
        try:
            worst = max(worst, module.main())
        except BadArgument as e:  # its one line (a run it needed failed); the other figures still count
            print(e, file=sys.stderr)
            worst = max(worst, 2)
    return worst


if __name__ == "__main__":
    sys.exit(main())
