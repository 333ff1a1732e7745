"""Harness overhead: devicebench's training throughput against a bare loop of the same work, per config.

The bare loop is what a user writes when data already sits on the device: the same network, seeded the
same way, plain `torch.optim.SGD` (lr 0.001, momentum 0.9), each epoch's images shuffled on the clock,
`zero_grad / forward / backward / step` per batch, no host sync per step and one at each end of the timed
epochs, PyTorch's own math. The shuffle is the same work on both sides, not harness: devicebench's
loader=tensor gathers each epoch's order on its clock in blocks (`data.cifar.gather_block`; its
`time/data_wait_s`), and so does this loop. Measured on a 2-core CPU, 2026-11-25: gathered before the
clock, the bare loop did ~3 % less work at batch 64 (34 ms of a 1.1 s epoch pair; the ratio read
0.93-0.97); gathered whole on the clock, it paid fresh pages for a 125 MB block at batch 256 (1.06-1.17).
devicebench's side is `cifar.run` with `loader=tensor`, `precision=default` and the same epochs, read
from its own logged `throughput/train_samples_per_s` (every epoch, synchronised at both ends). The ratio
is devicebench / bare: 1.0 means the harness is invisible; the target is >= 0.95 (issue 25: 0.74 at batch
256 on an H100, 0.74 on its CPU at batch 4).

The two sides alternate within each round in one process, so a neighbour's load hits both alike, and each
side's best round is compared (the round least disturbed). That ratio still moves from one process to the
next by more than the harness costs (ResNet-18 on an H100: 0.88, then 1.20 alone; the tutorial Net at
batch 64 on a 2-core VM: 0.86-1.08 over six processes, both sides moving), so each case runs in
`PROCESSES` fresh processes and the median one is the figure, printed with the range. `python -m
benchmarks.bench_overhead cuda` runs the GPU figures (`make gpu-check` does); `make bench` runs the CPU
ones.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks import BadArgument, exit_with, last_line
from devicebench.config.fields import build_config
from devicebench.data.cifar import gather_block, normalize_uint8
from devicebench.data.synthetic import make_split
from devicebench.host.context import Context
from devicebench.host.cpu import cpu_model
from devicebench.host.timing import device_sync
from devicebench.models.cifar_net import build_model
from devicebench.plan.warm import warm_server
from devicebench.tracking.protocol import null_tracker
from devicebench.util.forkserver import ForkServer
from devicebench.workloads.cifar import CifarResult, Config, run

TARGET = 0.95
EPOCHS = 2
PROCESSES = 3  # fresh processes per case; the median process's ratio is the figure


@dataclass(frozen=True)
class Case:
    model: str
    batch: int
    samples: int  # per epoch
    rounds: int


# Sized for a 2-core VM: each side takes ~1-6 s a round, a process ~20-40 s. ResNet-18 at batch 128 is
# compute-bound (2-3 s a step here), so two steps an epoch and one round a process tell whether the
# harness shows at all; its spread comes from the processes.
CPU_CASES = (
    Case("tutorial", 4, 2_000, 3),
    Case("tutorial", 64, 6_400, 3),
    Case("tutorial", 256, 10_240, 3),
    Case("resnet18", 128, 256, 1),
)
# On a GPU the step is short and launch-bound: more steps per epoch, so the figure is not start-up.
GPU_CASES = (
    Case("tutorial", 4, 4_000, 3),
    Case("tutorial", 64, 25_600, 3),
    Case("tutorial", 256, 49_920, 3),  # 195 batches: the synthetic train split holds 50,000 images
    Case("resnet18", 128, 25_600, 2),
)


def bare_loop(case: Case, device: torch.device) -> float:
    """Samples per second of the plain loop over `EPOCHS` epochs, after 3 untimed warm-up steps."""
    images, labels = make_split(train=True, limit=case.samples)
    if len(labels) < case.samples:  # on CUDA an index past the end is a device-side assert, not an error
        raise ValueError(
            f"{case}: the synthetic split has {len(labels)} images, fewer than the case's samples"
        )
    x_all = normalize_uint8(torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()).to(device)
    y_all = torch.as_tensor(labels, dtype=torch.long).to(device)
    torch.manual_seed(0)
    net = build_model(case.model).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    criterion = torch.nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(0)
    for i in range(min(3, case.samples // case.batch)):  # whole batches only: an empty one is no warm-up
        x, y = x_all[i * case.batch : (i + 1) * case.batch], y_all[i * case.batch : (i + 1) * case.batch]
        optimizer.zero_grad()
        criterion(net(x), y).backward()
        optimizer.step()
    sync = device_sync(device)
    sync()
    start = time.perf_counter()
    block = gather_block(case.batch)
    for _ in range(EPOCHS):  # each epoch shuffled on the clock, as any loop over data in memory must
        order = torch.randperm(case.samples, generator=generator).to(device)
        for first in range(0, case.samples, block):
            idx = order[first : first + block]
            xs, ys = x_all.index_select(0, idx), y_all.index_select(0, idx)
            for i in range(0, len(idx), case.batch):
                optimizer.zero_grad()
                loss = criterion(net(xs[i : i + case.batch]), ys[i : i + case.batch])
                loss.backward()
                optimizer.step()
    sync()
    return EPOCHS * case.samples / (time.perf_counter() - start)


def devicebench_loop(case: Case, device: torch.device) -> float:
    """`throughput/train_samples_per_s` as devicebench logs it for the same work."""
    return devicebench_result(case, device).train_samples_per_s


def devicebench_result(case: Case, device: torch.device) -> CifarResult:
    """What `cifar.run` measured for the same work, untracked (bench_repeat reads its NVML figures too)."""
    cfg = build_config(
        Config,
        {
            "device": str(device),
            "data": "synthetic",
            "model": case.model,
            "batch_size": str(case.batch),
            "epochs": str(EPOCHS),
            "train_limit": str(case.samples),
            "test_limit": str(case.batch),
            "loader": "tensor",
        },
    )
    ctx = Context(device, Path(tempfile.gettempdir()), False)
    with contextlib.redirect_stdout(io.StringIO()):  # the tutorial's printed lines
        return run(cfg, ctx, null_tracker())


def ratio(case: Case, device: torch.device) -> tuple[float, float, float]:
    """(devicebench / bare, devicebench samples/s, bare samples/s), each side its best round."""
    ours, bare = [], []
    for _ in range(case.rounds):
        bare.append(bare_loop(case, device))
        ours.append(devicebench_loop(case, device))
    return max(ours) / max(bare), max(ours), max(bare)


CHILD_TIMEOUT_S = 900  # one case in one process: ~20-70 s here; a hung child must not hang the bench


def in_fresh_processes(
    case: Case, device_name: str, server: ForkServer | None = None, processes: int = PROCESSES
) -> list[tuple[float, float, float]] | str:
    """`ratio` of the case in `processes` fresh processes of this module, one after the other (forked
    from `server`, a plan's warm server, where given); or, where one fails, what it said last (the
    bench goes on with the next case)."""
    argv = [
        sys.executable,
        "-m",
        "benchmarks.bench_overhead",
        device_name,
        f"{case.model}:{case.batch}",
        "child",
    ]
    results = []
    for _ in range(processes):
        try:
            if server is None:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
                code, out, err = proc.returncode, proc.stdout, proc.stderr
            else:  # forked as a plan forks its runs; its stdout comes back through its stderr pipe
                child = server.start(argv[2], argv[3:], server.env, os.getcwd(), stdout=True)
                _, out = child.communicate(CHILD_TIMEOUT_S)
                code, err = child.returncode, out
        except subprocess.TimeoutExpired:
            return f"a process ran past {CHILD_TIMEOUT_S} s"
        lines = [ln.split() for ln in out.splitlines() if ln.startswith("ratio ")]
        if code != 0 or len(lines) != 1:
            return f"a process failed (exit {code}): {last_line(err)}"
        results.append((float(lines[0][1]), float(lines[0][2]), float(lines[0][3])))
    return results


def pick(cases: tuple[Case, ...], only: str) -> tuple[Case, ...]:
    """The cases `only` names (`model:batch`, comma-separated; all when empty); a name that is not a case
    is an error, not a bench that measures nothing and passes."""
    if not only:
        return cases
    names = {f"{c.model}:{c.batch}": c for c in cases}
    unknown = [n for n in only.split(",") if n not in names]
    if unknown:
        raise BadArgument(f"bench_overhead: no case {unknown[0]!r}; the cases here: {', '.join(names)}")
    return tuple(c for name, c in names.items() if name in only.split(","))


def summary(case: Case, where: str, results: list[tuple[float, float, float]]) -> tuple[str, bool]:
    """The line for a case: the median process's ratio and samples/s, the range over processes."""
    ordered = sorted(results)
    r, ours, bare = ordered[len(ordered) // 2]
    ok = r >= TARGET
    line = (
        f"overhead: {case.model} batch {case.batch} on {where}: devicebench / bare loop = {r:.3f} "
        f"(range {ordered[0][0]:.3f}-{ordered[-1][0]:.3f} over {len(results)} fresh processes; the median "
        f"one {ours:,.0f} vs {bare:,.0f} samples/s, best of {case.rounds} rounds) [target >= {TARGET}] "
        f"{'ok' if ok else 'MISSED'}"
    )
    return line, ok


def where_measured(device: torch.device) -> str:
    """The device as a figure's reader needs it: a GPU's name, or the CPU's model (one host class can
    read 0.83 where another reads 1.07), its threads and the load when the bench started."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu {cpu_model()}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}"


def main(device_name: str = "cpu", only: str = "", child: str = "", processes: str = "") -> int:
    """`only`: comma-separated `model:batch` cases to run (all by default), e.g. `tutorial:256,resnet18:128`.
    `child`: measure the one case `only` names in this process and print its ratio (what the parent reads).
    `processes`: fresh processes per case and start (default PROCESSES; `make gpu-check` runs 1, and
    measures the spread between processes with its ResNet-18 repeats)."""
    if processes and (not processes.isdigit() or int(processes) < 1):
        raise BadArgument(f"bench_overhead: processes must be a whole number >= 1, not {processes!r}")
    per_case = int(processes) if processes else PROCESSES
    device = torch.device(device_name)
    cases = GPU_CASES if device.type == "cuda" else CPU_CASES
    cases = pick(cases, only)
    if child:
        if len(cases) != 1:
            raise BadArgument("bench_overhead: a child measures exactly one case")
        print("ratio", *ratio(cases[0], device))
        return 0
    where = where_measured(device)
    worst = 0
    root = str(Path(__file__).resolve().parents[1])  # this module, importable in the server's children
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    with warm_server(env) as server:
        for case in cases:
            for how, via in (("", None), (", forked from a plan's warm server", server)):
                results = (
                    in_fresh_processes(case, device_name, via, per_case) if how == "" or via else "no server"
                )
                if isinstance(results, str):
                    line, ok = (
                        f"overhead: {case.model} batch {case.batch} on {where}{how}: FAILED: {results}",
                        False,
                    )
                else:
                    line, ok = summary(case, where + how, results)
                worst = max(worst, 0 if ok else 1)
                print(line, flush=True)
    return worst


if __name__ == "__main__":
    exit_with(main, *sys.argv[1:5])
