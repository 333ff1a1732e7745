"""Compare CPU and GPU runs side by side, and say why each speedup is what it is.

Reads runs from the configured tracking store (MLFLOW_TRACKING_URI: embedded SQLite or a server), from
every experiment unless --experiment names some, pairs runs with the same config key across devices,
writes report.md, report.html, runs.csv and charts to --out, prints a table, and logs the report as an
MLflow run (devicebench.workload=report) whose metrics and description carry the headline numbers.
With --budget it also prints, per config, the cheapest device/shape, the work it buys per dollar and
every priced side ranked by cost per unit of work; --deadline adds the cheapest side within a time: per
epoch (training), per product (matmul), per run, or for serving (infer) a request's p99 latency.
With --baseline previous it exits 1 when the newest run of a config is slower than earlier ones beyond
--threshold and beyond their spread (one line per regression).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

from devicebench.config.workloads import WORKLOADS
from devicebench.errors import UsageError
from devicebench.report.read.options import Query, parse_duration, parse_since, split_list
from devicebench.util.collector import paused_for_imports

WORKLOAD_CHOICES = (*WORKLOADS, "suite", "report")
_MILLISECONDS = re.compile(r"^(\d+(?:\.\d+)?)\s*ms$", re.IGNORECASE)
NAME_MAX = 255  # bytes in one path component on Linux's and macOS's file systems
BASELINES = ("none", "previous")

# the text options after --experiment, in --help order: flag, default, metavar, help
TEXT_OPTIONS = (
    ("--workload", "", "NAME", f"{', '.join(WORKLOAD_CHOICES)} (comma-separated) [default: all]"),
    ("--since", "", "WINDOW", "only runs started since: 7d, 12h, 30m, 2w or an ISO date"),
    ("--filter", "", "MLFLOW_FILTER", "an MLflow search filter, ANDed with the rest"),
    ("--host", "", "HOST", "a hostname, or part of a GPU model, CPU model or OCI shape"),
    (
        "--baseline",
        "none",
        "MODE",
        "none (default) or previous: the newest run of each config/device/host against earlier ones",
    ),
    ("--threshold", "0.1", "FRACTION", "regression threshold: 0.1 or 10%% [default 0.1]"),
    ("--out", "", "DIR", "output folder [default reports/<timestamp>]"),
    (
        "--deadline",
        "",
        "TIME",
        "with the budget, the cheapest side within a time: per epoch (training), per product (matmul), "
        "per run, or a request's p99 latency (serving); e.g. 90s, 2m, 1.5h or 20ms",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `compare` flags; empty strings (what MLproject passes for an unset parameter) mean "not set"."""
    parser.add_argument(
        "--experiment",
        action="append",
        default=None,
        metavar="NAME",
        help="experiment name(s); repeat or comma-separate [default: all, devicebench's runs in every experiment]",
    )
    for flag, default, metavar, help in TEXT_OPTIONS:
        parser.add_argument(flag, default=default, metavar=metavar, help=help)
    parser.add_argument(
        "--no-log",
        "--no_log",
        dest="no_log",
        action="store_true",
        help="do not log the report as an MLflow run",
    )
    parser.add_argument(
        "--budget",
        action="store_true",
        help="also print, per config, the cheapest device/shape among the runs and the work it buys per "
        "dollar: epochs (training), GFLOP (matmul), million predictions (serving) or runs; and every "
        "priced side ranked by cost per unit of work",
    )


def parse_threshold(raw: str) -> float:
    """`0.1` or `10%` → 0.1; anything else (or outside (0, 1]) is a usage error naming the option."""
    text = str(raw).strip() or "0.1"
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value <= 1):
        raise UsageError(
            f"{raw!r} is not allowed; use a fraction in (0, 1] such as 0.1, or a percentage such as 10%",
            param="threshold",
        )
    return value


def check_out_dir(out: Path) -> None:
    """`--out` must be a folder we can create or write, checked before the store is read: `/dev/null`,
    a file's path or a name over 255 bytes once failed with a traceback after the whole query."""
    too_long = next((part for part in out.parts if len(os.fsencode(part)) > NAME_MAX), None)
    if too_long is not None:
        raise UsageError(
            f"a folder name in the path is {len(os.fsencode(too_long)):,} bytes; at most {NAME_MAX}",
            param="out",
        )
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        what = "is" if probe == out else f"is inside {probe}, which is"
        raise UsageError(f"{str(out)!r} {what} not a folder; name a folder for the report", param="out")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{str(out)!r}: {probe} is not writable; name a folder you can write", param="out")


def parse_deadline(raw: str) -> float | None:
    """`90`, `90s`, `2m`, `1.5h`, `20ms` → seconds; empty: none. Anything else, or zero, is a usage error
    naming the option."""
    text = (raw or "").strip()
    if not text:
        return None
    ms = _MILLISECONDS.match(text)  # a serving deadline is milliseconds, as its latencies are shown
    if ms:
        seconds = float(ms.group(1)) / 1e3
    else:  # a bare number: seconds
        seconds = parse_duration(text if text[-1:].isalpha() else f"{text}s") or 0.0
    if not 0 < seconds <= 365 * 86400:
        raise UsageError(
            f"{raw!r} is not allowed; use a time per unit of work such as 90s, 2m or 1.5h, or a p99 "
            "latency such as 20ms",
            param="deadline",
        )
    return seconds


def parse_baseline(raw: str) -> str:
    value = (raw or "none").strip().lower() or "none"
    if value not in BASELINES:
        raise UsageError(f"unknown value {raw!r}; allowed: {', '.join(BASELINES)}", param="baseline")
    return value


def parse_workloads(raw: str) -> tuple[str, ...]:
    names = tuple(n.lower() for n in split_list(raw))
    for n in names:
        if n not in WORKLOAD_CHOICES:
            raise UsageError(
                f"unknown workload {n!r}; allowed: {', '.join(WORKLOAD_CHOICES)}", param="workload"
            )
    return names


def run(args: argparse.Namespace) -> int:
    """Check every flag, then read, compare, write, print, log (report/command.py); 1 when regression
    mode found a regression, else 0."""
    threshold = parse_threshold(args.threshold)
    deadline = parse_deadline(getattr(args, "deadline", ""))
    baseline = parse_baseline(args.baseline)
    workloads = parse_workloads(args.workload)
    if args.since.strip():
        parse_since(args.since)
    fresh = not args.out.strip()  # the default name is the second's: another compare may share it
    out = Path(args.out.strip() or f"reports/{time.strftime('%Y%m%d-%H%M%S')}")
    check_out_dir(out)
    query = Query(
        experiments=split_list(args.experiment or []),  # none or `all`: every experiment
        workloads=workloads,
        since=args.since.strip() or None,
        filter=args.filter.strip() or None,
        host=args.host.strip() or None,
    )
    with paused_for_imports():
        # lazy: MLflow and the report's pipeline, the bulk of the command's start, load only once every
        # flag has been accepted
        from devicebench.report.command import compare_and_report

    # a namespace built without --budget (an older caller) asks for no budget; a deadline asks for one
    budget = getattr(args, "budget", False) or deadline is not None
    return compare_and_report(query, baseline, threshold, out, args.no_log, budget, deadline, fresh)
