"""Run an experiment plan (experiments/*.yaml): each run in its own process under one parent run,
then the `compare` report of its runs. The whole plan is checked first: a typo is one line naming the
file and the key, and nothing runs. --dry-run prints the expanded runs only.
"""

# Shown as `suite --help`, so the docstring speaks to the user. Building these flags and a dry run
# need no MLflow: only running the plan (plan.suite) imports it.

from __future__ import annotations

import argparse

from devicebench.errors import UsageError
from devicebench.plan.spec import load_plan


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
        print(f"plan {plan.name} ({plan.path}): {len(plan.runs)} runs")
        for item in plan.runs:
            print(f"  {item.index:3d}. {item.label}")
        return 0
    from devicebench.plan.suite import run_plan  # lazy: MLflow (~1 s), once the plan is read and checked

    return run_plan(plan, resume=args.resume or None)
