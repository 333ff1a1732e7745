"""`make gpu-check`: what the first host with a GPU runs, in under 10 minutes, and the table it prints.

No line of the CUDA paths had run when this was written (no GPU was lent to the project), so this is
the whole first look in one command: the `gpu`-marked tests, the demo plan (its cuda runs are no longer
skipped), then experiments/gpu_check.yaml — every CUDA path once, small, with CPU pairs — and its
compare table, a tiny cuda run's fixed cost (benchmarks/bench_fixed.py) and the harness overhead. Each
step's exit code and time are printed at the end; any failure exits 1.

On the H100 of 2026-11-24 the whole took about 13 minutes (tests 110 s, demo 138 s, the plan's 14 runs
~330 s at 17-40 s each, the overhead bench ~4 min). Since then a plan's runs fork from a warm server and
exit without interpreter teardown (issue 39: the demo plan took 0.42x its time on the 2-core VM), the
plan repeats ResNet-18 five times (does a repeat hold to +-5 %?), and the overhead bench runs each case
in one cold and one warm process; not yet timed on a GPU. Where it runs long on a lent machine,
`make gpu-check STEPS="tests demo"`, then `STEPS=plan`, then `STEPS="fixed overhead"` split it.
`STEPS=repeat` (never run unless named) is the follow-up where ResNet-18's repeats spread beyond ±5 %:
benchmarks/bench_repeat.py changes one suspect at a time (order, cuDNN's algorithm choice, allocator).
"""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks import BadArgument, exit_with

STEPS = (  # (key for STEPS=, name, argv)
    ("tests", "gpu tests", [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"]),
    ("demo", "demo plan", [sys.executable, "-m", "devicebench", "suite", "experiments/demo.yaml"]),
    ("plan", "gpu_check plan", [sys.executable, "-m", "devicebench", "suite", "experiments/gpu_check.yaml"]),
    # what a tiny cuda run pays beyond its work, cold and forked from a plan's warm server (<= 3 s warm)
    ("fixed", "fixed cost", [sys.executable, "-m", "benchmarks.bench_fixed", "cuda"]),
    # devicebench's train throughput against a bare loop at batch 4, 64, 256 and ResNet-18 at 128 (>= 0.95)
    # one cold and one warm process per case: the spread between processes is the plan's ResNet-18 repeats
    (
        "overhead",
        "harness overhead",
        [sys.executable, "-m", "benchmarks.bench_overhead", "cuda", "", "", "1"],
    ),
)
# Run only when named: why ResNet-18's figure moves between fresh processes, one suspect at a time
# (12 fresh processes of training, not yet timed on a GPU)
EXTRA_STEPS = (("repeat", "repeat suspects", [sys.executable, "-m", "benchmarks.bench_repeat", "cuda"]),)


def chosen(names: list[str]) -> list[tuple[str, list[str]]]:
    """The steps named by their keys, in their order; when none are named, STEPS (EXTRA_STEPS only by
    name)."""
    known = [key for key, _, _ in (*STEPS, *EXTRA_STEPS)]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadArgument(f"gpu-check: unknown step {unknown[0]!r}; expected some of {', '.join(known)}")
    if not names:
        return [(name, argv) for _, name, argv in STEPS]
    return [(name, argv) for key, name, argv in (*STEPS, *EXTRA_STEPS) if key in names]


def main(names: list[str]) -> int:
    steps = chosen(names)  # a typo is refused before anything starts
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: torch finds no CUDA device on this host; run it on a GPU instance", file=sys.stderr)
        return 2
    print(
        f"gpu-check on {torch.cuda.get_device_name(0)} ×{torch.cuda.device_count()}, torch {torch.__version__}"
    )
    done = []
    for name, argv in steps:
        print(f"\n=== {name}: {' '.join(argv[1:])}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.run(argv, check=False).returncode
        done.append((name, code, time.perf_counter() - t0))
    print("\n| step | exit | seconds |\n|---|---|---|")
    for name, code, seconds in done:
        print(f"| {name} | {code} | {seconds:.0f} |")
    return 0 if all(code == 0 for _, code, _ in done) else 1


if __name__ == "__main__":
    exit_with(main, sys.argv[1:])
