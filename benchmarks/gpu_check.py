"""`make gpu-check`: what the first host with a GPU runs, in under 10 minutes, and the table it prints.

No line of the CUDA paths had run when this was written (no GPU was lent to the project), so this is
the whole first look in one command: the `gpu`-marked tests, the demo plan (its cuda runs are no longer
skipped), then experiments/gpu_check.yaml — every CUDA path once, small, with CPU pairs — and its
compare table. Each step's exit code and time are printed at the end; any failure exits 1.
"""

from __future__ import annotations

import subprocess
import sys
import time

STEPS = (
    ("gpu tests", [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"]),
    ("demo plan", [sys.executable, "-m", "devicebench", "suite", "experiments/demo.yaml"]),
    ("gpu_check plan", [sys.executable, "-m", "devicebench", "suite", "experiments/gpu_check.yaml"]),
    # devicebench's train throughput against a bare loop at batch 4, 64, 256 and ResNet-18 at 128 (>= 0.95)
    ("harness overhead", [sys.executable, "-m", "benchmarks.bench_overhead", "cuda"]),
)


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: torch finds no CUDA device on this host; run it on a GPU instance", file=sys.stderr)
        return 2
    print(
        f"gpu-check on {torch.cuda.get_device_name(0)} ×{torch.cuda.device_count()}, torch {torch.__version__}"
    )
    done = []
    for name, argv in STEPS:
        print(f"\n=== {name}: {' '.join(argv[1:])}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.run(argv, check=False).returncode
        done.append((name, code, time.perf_counter() - t0))
    print("\n| step | exit | seconds |\n|---|---|---|")
    for name, code, seconds in done:
        print(f"| {name} | {code} | {seconds:.0f} |")
    return 0 if all(code == 0 for _, code, _ in done) else 1


if __name__ == "__main__":
    sys.exit(main())
