"""Run an experiment plan (experiments/*.yaml): each run in its own process under one parent run,
then the `compare` report of its runs. The whole plan is checked first: a typo is one line naming the
file and the key, and nothing runs. --dry-run prints the expanded runs only.
"""

# Shown as `suite --help`, so the docstring speaks to the user. Building these flags and a dry run
# need no MLflow: only running the plan (plan.suite) imports it.

from __future__ import annotations

import argparse
import functools
import json
import subprocess
from pathlib import Path

from devicebench.config.settings import load_settings
from devicebench.errors import UsageError
from devicebench.plan.spec import Plan, PlannedRun, load_plan
from devicebench.util.children import python_argv
from devicebench.util.collector import paused_for_imports
from devicebench.util.fmt import fmt_duration

# where each real dataset's files lie under the data folder (data/cifar.py, data/voc.py, which import
# torch: a dry run does not)
DATA_FOLDERS = {"cifar10": "cifar-10-batches-py", "voc2012": "VOCdevkit/VOC2012"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan_file", nargs="?", metavar="PLAN", help="the plan, e.g. experiments/demo.yaml")
    parser.add_argument("--plan", dest="plan_opt", metavar="PLAN", help="the plan (as MLproject passes it)")
    parser.add_argument(
        "--resume",
        default="",
        metavar="RUN_ID",
        help="re-run only what has not FINISHED under this parent run",
    )
    parser.add_argument(
        "--dry-run",
        "--dry_run",
        dest="dry_run",
        nargs="?",
        const="true",
        default="false",
        help="print the expanded runs only",
    )
    parser.add_argument(
        "--data",
        choices=("synthetic", "real"),
        default=None,
        help="real: run cifar/unet on CIFAR-10 and VOC (downloading them)",
    )


def run(args: argparse.Namespace) -> int:
    path = args.plan_file or args.plan_opt
    if not path:
        raise UsageError("suite: name a plan, e.g. devicebench suite experiments/demo.yaml")
    if str(args.dry_run).lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise UsageError(f"--dry_run: {args.dry_run!r} is not true or false")
    plan = load_plan(path, data=args.data)
    if str(args.dry_run).lower() in ("true", "1", "yes"):
        for line in dry_run(plan):
            print(line)
        return 0
    with paused_for_imports():
        from devicebench.plan.suite import run_plan  # lazy: MLflow, only once the plan is read and checked

    return run_plan(plan, resume=args.resume or None)


def dry_run(plan: Plan) -> list[str]:
    """The expanded runs, each with what this host lacks for it (CUDA, a real dataset's files), and
    the longest the plan may take: the sum of its runs' time limits (a run's own time is not known
    before it runs)."""
    cuda = has_cuda() if any(r.params.get("device", "").startswith("cuda") for r in plan.runs) else True
    data_dir = load_settings().data_dir
    fate = "skipped here" if plan.skip_unavailable else "fails here"
    bound = fmt_duration(sum(r.time_limit_s for r in plan.runs))
    out = [f"plan {plan.name} ({plan.path}): {len(plan.runs)} runs; their time limits add up to {bound}"]
    for item in plan.runs:
        lacks = _lacks(item, cuda, data_dir)
        out.append(f"  {item.index:3d}. {item.label}" + (f"  [{lacks}: {fate}]" if lacks else ""))
    return out


def _lacks(item: PlannedRun, cuda: bool, data_dir: Path) -> str:
    """`no CUDA on this host`, `no cifar10 files in data/cifar-10-batches-py`, or ""."""
    said = ["no CUDA on this host"] if item.params.get("device", "").startswith("cuda") and not cuda else []
    folder = DATA_FOLDERS.get(item.params.get("data", ""))
    where = Path(item.params.get("data_dir") or data_dir).expanduser() / folder if folder else None
    if where is not None and item.params.get("download") != "true" and not where.is_dir():
        said.append(f"no {item.params['data']} files in {where}")
    return "; ".join(said)


@functools.cache  # a child that imports torch each time; the answer does not change in a process
def has_cuda() -> bool:
    """Whether torch sees CUDA here, asked of a child (host/capacity.py) so this process stays torch-free."""
    argv = python_argv("-m", "devicebench.host.capacity", "cuda")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode:
        raise UsageError(f"suite --dry-run: cannot ask this host for CUDA: {done.stderr.strip()[-200:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]) is not None
