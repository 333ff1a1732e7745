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

That run of 2026-11-24 was killed at its machine's limit with its last step unstarted and no table: a
lent machine's command ends at a fixed limit, and what it printed last is all that comes back. So
`--budget SECONDS` (`make gpu-check BUDGET=540`) ends every step inside that time, each cut at its share
of what is left (its weight over the weights of the steps still to run: time a step leaves unused goes to
the ones after it, and a slow step cannot starve the rest), and the table says which were cut. `--logs
DIR` (`LOGS=$OUT`) keeps every step's output in DIR/gpu-check.log and the table, rewritten after each
step, in DIR/gpu-check.md, so even a command killed from outside leaves the steps it finished.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn

from benchmarks import BadArgument, exit_with
from devicebench.util.children import death_signal
from devicebench.util.files import write_text_atomic


@dataclass(frozen=True)
class Step:
    """One command of the check. `weight_s` is its share of a budget: the seconds it took on the H100 of
    2026-11-24 (tests, demo, plan: cut there, so at least that; overhead), or a guess from its runs where
    it has not run on a GPU yet (fixed, repeat)."""

    key: str  # what STEPS= names it by
    name: str
    argv: list[str]
    weight_s: float


def _py(*args: str) -> list[str]:
    return [sys.executable, *args]


STEPS = (
    Step("tests", "gpu tests", _py("-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"), 110),
    Step("demo", "demo plan", _py("-m", "devicebench", "suite", "experiments/demo.yaml"), 138),
    Step("plan", "gpu_check plan", _py("-m", "devicebench", "suite", "experiments/gpu_check.yaml"), 330),
    # what a tiny cuda run pays beyond its work, cold and forked from a plan's warm server (<= 3 s warm)
    Step("fixed", "fixed cost", _py("-m", "benchmarks.bench_fixed", "cuda"), 60),
    # devicebench's train throughput against a bare loop at batch 4, 64, 256 and ResNet-18 at 128 (>= 0.95)
    # one cold and one warm process per case: the spread between processes is the plan's ResNet-18 repeats
    Step("overhead", "harness overhead", _py("-m", "benchmarks.bench_overhead", "cuda", "", "", "1"), 240),
)
# Run only when named: why ResNet-18's figure moves between fresh processes, one suspect at a time
# (12 fresh processes of training, not yet timed on a GPU)
EXTRA_STEPS = (Step("repeat", "repeat suspects", _py("-m", "benchmarks.bench_repeat", "cuda"), 300),)
MIN_STEP_S = 10.0  # a step whose share is less than this is not started: nothing useful fits
TERM_GRACE_S = 10.0  # after SIGTERM, before SIGKILL: a devicebench run ends KILLED with its points sent


@dataclass(frozen=True)
class Done:
    """What became of one step: `code` None where the budget left it no time to start."""

    name: str
    code: int | None
    seconds: float
    share_s: float | None = None  # what the budget gave it; None without a budget
    cut: bool = False  # ended by the budget, not by itself

    @property
    def ok(self) -> bool:
        return self.code == 0 and not self.cut

    def exit_cell(self) -> str:
        if self.code is None:
            return "not started"
        return f"cut at its {self.share_s:.0f} s" if self.cut else str(self.code)


def chosen(names: Sequence[str]) -> list[Step]:
    """The steps named by their keys, in their order; when none are named, STEPS (EXTRA_STEPS only by
    name)."""
    known = [step.key for step in (*STEPS, *EXTRA_STEPS)]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadArgument(f"gpu-check: unknown step {unknown[0]!r}; expected some of {', '.join(known)}")
    if not names:
        return list(STEPS)
    return [step for step in (*STEPS, *EXTRA_STEPS) if step.key in names]


def table(done: Sequence[Done]) -> str:
    rows = [f"| {d.name} | {d.exit_cell()} | {d.seconds:.0f} |" for d in done]
    return "\n".join(["| step | exit | seconds |", "|---|---|---|", *rows]) + "\n"


def _write(data: bytes, sinks: Sequence[IO[bytes]]) -> None:
    for sink in sinks:
        sink.write(data)
        sink.flush()


def _copy(source: IO[bytes], sinks: Sequence[IO[bytes]]) -> None:
    """A step's output, line by line, to the console and the log as it comes."""
    for line in iter(source.readline, b""):
        _write(line, sinks)


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """The step and everything it started (pytest's workers, a plan's fork server and its run): SIGTERM,
    which a devicebench run answers by ending KILLED with its points sent, then SIGKILL for whatever of
    the group is still there after the grace."""
    deadline = time.monotonic() + TERM_GRACE_S
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(TERM_GRACE_S)
    try:
        while time.monotonic() < deadline:  # the leader may be gone before what it started
            os.killpg(proc.pid, 0)
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_step(step: Step, share_s: float | None, sinks: Sequence[IO[bytes]]) -> Done:
    """One step in a process group of its own, ended with all it started when its share runs out; it
    dies with this process too (a lent machine's limit kills the check, not always its children)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # lines reach the log as they are printed
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        step.argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        process_group=0,
        preexec_fn=death_signal(signal.SIGTERM),
    )
    assert proc.stdout is not None
    copier = threading.Thread(target=_copy, args=(proc.stdout, sinks), daemon=True)
    copier.start()
    cut = False
    try:
        proc.wait(share_s)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        cut = True
    copier.join(5)  # a grandchild that left the group may hold the pipe: not waited for beyond this
    return Done(step.name, proc.returncode, time.perf_counter() - t0, share_s, cut)


def run_steps(
    steps: Sequence[Step], budget_s: float | None = None, logs: Path | None = None, title: str = ""
) -> list[Done]:
    """Every step in turn, after the `title` line; with a budget each gets its share of what is left
    (unused time goes on to the next). With `logs`, the output goes to logs/gpu-check.log too and the
    table so far to logs/gpu-check.md after each step."""
    deadline = None if budget_s is None else time.monotonic() + budget_s
    log = None if logs is None else open(logs / "gpu-check.log", "ab")  # noqa: SIM115 - closed below
    sinks = [sys.stdout.buffer, *([log] if log is not None else [])]
    done: list[Done] = []
    try:
        if title:
            _write(f"{title}\n".encode(), sinks)
        for i, step in enumerate(steps):
            share_s = None
            if deadline is not None:
                share_s = (deadline - time.monotonic()) * step.weight_s / sum(s.weight_s for s in steps[i:])
            if share_s is not None and share_s < MIN_STEP_S:
                done.append(Done(step.name, None, 0.0, share_s))
            else:
                share = "" if share_s is None else f"  (its share of the budget: {share_s:.0f} s)"
                _write(f"\n=== {step.name}: {' '.join(step.argv[1:])}{share}\n".encode(), sinks)
                done.append(run_step(step, share_s, sinks))
            if logs is not None:
                write_text_atomic(logs / "gpu-check.md", table(done))
    finally:
        if log is not None:
            log.close()
    return done


def _seconds(text: str) -> float:
    refused = argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    try:
        value = float(text)
    except ValueError:
        raise refused from None
    if not (value > 0 and math.isfinite(value)):
        raise refused
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadArgument(f"gpu-check: {message}")


def parse(args: Sequence[str]) -> argparse.Namespace:
    """The steps by key, `--budget SECONDS`, `--logs DIR`: refused in one line before anything starts."""
    parser = _Parser(prog="gpu-check", add_help=False)
    parser.add_argument("steps", nargs="*")
    parser.add_argument("--budget", type=_seconds)
    parser.add_argument("--logs", type=Path)
    ns = parser.parse_intermixed_args(list(args))
    ns.steps = chosen(ns.steps)
    if ns.logs is not None and not ns.logs.is_dir():
        raise BadArgument(f"gpu-check: --logs {str(ns.logs)!r} is not a folder")
    return ns


def main(args: list[str]) -> int:
    ns = parse(args)  # a typo is refused before anything starts
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: torch finds no CUDA device on this host; run it on a GPU instance", file=sys.stderr)
        return 2
    gpus = f"{torch.cuda.get_device_name(0)} ×{torch.cuda.device_count()}"
    title = f"gpu-check on {gpus}, torch {torch.__version__}"
    done = run_steps(ns.steps, ns.budget, ns.logs, title)
    print("\n" + table(done), end="")
    return 0 if all(d.ok for d in done) else 1


if __name__ == "__main__":
    exit_with(main, sys.argv[1:])
