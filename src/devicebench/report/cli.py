"""Compare CPU and GPU runs side by side, and say why each speedup is what it is.

Reads runs from the configured tracking store (MLFLOW_TRACKING_URI: embedded SQLite or a server), from
every experiment unless --experiment names some, pairs runs with the same config key across devices,
writes report.md, report.html, runs.csv and charts to --out, prints a table, and logs the report as an
MLflow run (devicebench.workload=report) whose metrics and description carry the headline numbers.
With --budget it also prints, per config, the cheapest device/shape and the work it buys per dollar.
With --baseline previous it exits 1 when the newest run of a config is slower than earlier ones beyond
--threshold and beyond their spread (one line per regression).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from devicebench.errors import UsageError
from devicebench.report.experiments import run_counts
from devicebench.schema import MAX_TAG_VALUE as MAX_TAG
from devicebench.schema import UNSET_WORDS, WORKLOADS, tag
from devicebench.util.redact import redact

if TYPE_CHECKING:
    from devicebench.config.settings import Settings
    from devicebench.report.compare import Comparison
    from devicebench.report.query import Query, Selection
    from devicebench.report.records import RunRecord

WORKLOAD_CHOICES = (*WORKLOADS, "suite", "report")
BASELINES = ("none", "previous")
TAG_RUNS = tag("report.runs")
REPORT_RUN_FILE = "report_run.json"  # beside the report: which run holds it (the suite prints its link)


# the text options after --experiment, in --help order: flag, default, metavar, help
TEXT_OPTIONS = (
    ("--workload", "", "NAME", "matmul, cifar, unet (comma-separated)"),
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
        help="also print, per config, the cheapest device/shape among the runs and the epochs (training) "
        "or GFLOP (matmul) it buys per dollar, from the prices the runs logged",
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
    """`--out` must be a folder we can create or write, checked before the store is read: `/dev/null`
    or a file's path once failed with a traceback after the whole query."""
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        what = "is" if probe == out else f"is inside {probe}, which is"
        raise UsageError(f"{str(out)!r} {what} not a folder; name a folder for the report", param="out")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{str(out)!r}: {probe} is not writable; name a folder you can write", param="out")


def parse_baseline(raw: str) -> str:
    value = (raw or "none").strip().lower() or "none"
    if value not in BASELINES:
        raise UsageError(f"unknown value {raw!r}; allowed: {', '.join(BASELINES)}", param="baseline")
    return value


def parse_workloads(raw: str) -> tuple[str, ...]:
    from devicebench.report.query import split_list

    names = tuple(n.lower() for n in split_list(raw))
    for n in names:
        if n not in WORKLOAD_CHOICES:
            raise UsageError(
                f"unknown workload {n!r}; allowed: {', '.join(WORKLOAD_CHOICES)}", param="workload"
            )
    return names


def compared_ids_tag(run_ids: list[str]) -> tuple[str, bool]:
    """As many whole run ids as fit MLflow's tag limit, comma-separated; True when some were left out."""
    text = ",".join(run_ids)
    if len(text) <= MAX_TAG:
        return text, False
    kept: list[str] = []
    size = 0
    for rid in run_ids:
        if size + len(rid) + 1 > MAX_TAG - 40:
            break
        kept.append(rid)
        size += len(rid) + 1
    return ",".join(kept) + f",... (+{len(run_ids) - len(kept)}, see compared_runs.json)", True


def log_report(
    settings: Settings,
    files: list[Path],
    comp: Comparison,
    read: str,
    params: dict[str, str],
    scope: str = "",
) -> str | None:
    """The report as a run of its own: its files as artifacts, the compared run ids as a tag, and the
    answer where the MLflow UI shows it at once: a name that says what it holds, headline metrics and
    a Markdown description with the verdicts and those metrics."""
    from devicebench.report.headline import headline_metrics, report_name, summary_note
    from devicebench.schema import NOTE_TAG
    from devicebench.tracking.runs import run_context

    run_ids = [r.run_id for r in comp.runs]
    ids, truncated = compared_ids_tag(run_ids)
    metrics = headline_metrics(comp)
    tags = {
        TAG_RUNS: ids,
        tag("report.run_count"): str(len(run_ids)),
        NOTE_TAG: summary_note(comp, read, metrics=metrics),
    }
    with run_context(settings, "report", params, tags=tags, run_name=report_name(comp, scope)) as tracker:
        tracker.log_metrics(metrics)
        for f in files:
            tracker.log_artifact(f)
        if truncated:
            tracker.log_dict(run_ids, "compared_runs.json")
        return tracker.run_id


def report_home(settings: Settings, selection: Selection) -> Settings:
    """The experiment the report run goes to: the one experiment the runs it read belong to; else the
    first one named with --experiment; else the configured one where it exists; else the one that held
    the most of the runs. So `compare` after `make demo` puts its report beside the demo's runs, and
    no compare creates an experiment behind the user's back."""
    held = {r.experiment_id for r in selection.runs}
    if len(held) == 1:
        return replace(settings, experiment=selection.experiments[held.pop()])
    if not selection.every_experiment:
        return replace(settings, experiment=next(iter(selection.experiments.values())))
    if settings.experiment in selection.experiments.values():
        return settings
    counts = run_counts(selection.experiments, [r.experiment_id for r in selection.runs], True)
    return replace(settings, experiment=counts[0][0]) if counts else settings


def report_scope(selection: Selection) -> str:
    """What the report covers, for its run name: the plan when every run came from one plan (`demo`),
    else the one experiment, else how many experiments."""
    plans = {(r.tag("suite") or "").split(":", 1)[0] for r in selection.runs}
    if len(plans) == 1 and "" not in plans:
        return plans.pop()
    held = {r.experiment_id for r in selection.runs}
    if len(held) == 1:
        return selection.experiments[next(iter(held))]
    return f"{len(held)} experiments"


def write_report_run(out: Path, run_id: str, experiment_id: str) -> None:
    """`report_run.json` beside the report: the run that holds it, for whoever launched this compare."""
    (out / REPORT_RUN_FILE).write_text(json.dumps({"run_id": run_id, "experiment_id": experiment_id}))


def read_report_run(out: Path) -> tuple[str, str] | None:
    """(run id, experiment id) of the report run a compare wrote into `out`; None when it logged none."""
    try:
        data = json.loads((out / REPORT_RUN_FILE).read_text())
        return str(data["run_id"]), str(data["experiment_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read(settings: Settings, query: Query, baseline: str) -> tuple[Selection, list[RunRecord]]:
    """The selected runs, and the earlier runs a narrowed selection is judged against."""
    from mlflow.tracking import MlflowClient

    from devicebench.report.query import read_runs

    selection = read_runs(MlflowClient(settings.tracking_uri), query)
    earlier: list[RunRecord] = []
    if baseline == "previous" and query.filter:
        # --filter narrows what is judged (e.g. one suite launch); the baseline is every earlier run of
        # the same configs in the same experiments, which the filter would otherwise hide.
        earlier = read_runs(MlflowClient(settings.tracking_uri), replace(query, filter=None)).runs
    return selection, earlier


def _meta(settings: Settings, selection: Selection, query: Query, baseline: str) -> dict[str, str]:
    """The report's "selection" table: how the compared runs were chosen."""
    return {
        "tracking store": redact(settings.tracking_uri),
        "experiments": ("every active one; " if selection.every_experiment else "")
        + selection.read_line().removeprefix("read "),
        "workload": ",".join(query.workloads),
        "since": query.since or "",
        "filter (sent to MLflow)": selection.filter_string,
        "host": query.host or "",
        "baseline": baseline if baseline != "none" else "",
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


UNSET = UNSET_WORDS["compare"]


def _report_params(query: Query, baseline: str, threshold: float) -> dict[str, str]:
    return {
        "experiment": ",".join(query.experiments) or "all",
        # the words MLproject's compare entry point passes for "not set", so both launch paths log the same
        "workload": ",".join(query.workloads) or UNSET["workload"],
        "since": query.since or UNSET["since"],
        "filter": query.filter or UNSET["filter"],
        "host": query.host or UNSET["host"],
        "baseline": baseline,
        "threshold": str(threshold),
    }


def budget_text(comp: Comparison) -> str:
    """`--budget`'s lines: per config, the side that buys the most work per money (money.py)."""
    from devicebench.report.content import describe, varying_params
    from devicebench.report.money import budget_lines

    varying = varying_params(comp.all_sides)
    return "\n".join(budget_lines(comp.all_sides, lambda s: describe(s, varying)))


def _regression_exit(comp: Comparison, threshold: float) -> int:
    """1 with one line per regression; 0 (saying so in regression mode) when there is none."""
    if comp.regressions:
        for g in comp.regressions:
            print(g.line())
        return 1
    if comp.regressions is not None:
        print(f"no regression beyond {threshold:.0%} in {comp.regression_groups} group(s) with earlier runs")
    return 0


def run(args: argparse.Namespace) -> int:
    """Read, compare, write, print, log; 1 when regression mode found a regression, else 0."""
    from devicebench.config.settings import load_settings
    from devicebench.report import render
    from devicebench.report.compare import compare
    from devicebench.report.query import Query, parse_since, split_list

    threshold = parse_threshold(args.threshold)
    baseline = parse_baseline(args.baseline)
    workloads = parse_workloads(args.workload)
    if args.since.strip():
        parse_since(args.since)
    out = Path(args.out.strip() or f"reports/{time.strftime('%Y%m%d-%H%M%S')}")
    check_out_dir(out)
    settings = load_settings()
    query = Query(
        experiments=split_list(args.experiment or []),  # none or `all`: every experiment
        workloads=workloads,
        since=args.since.strip() or None,
        filter=args.filter.strip() or None,
        host=args.host.strip() or None,
    )
    from devicebench.config.settings import preflight_store
    from devicebench.tracking.store import check_store, configure_mlflow_client

    preflight_store(settings, read_only=args.no_log)
    configure_mlflow_client(settings)
    check_store(settings, read_only=args.no_log)
    t0 = time.perf_counter()
    selection, earlier = _read(settings, query, baseline)
    print(f"compare: {selection.read_line()}")
    comp = compare(selection.runs, baseline=baseline, threshold=threshold, earlier_runs=earlier)
    try:
        files = render.write_report(comp, out, _meta(settings, selection, query, baseline))
    except OSError as e:  # the folder became unwritable while the runs were read
        raise UsageError(f"cannot write the report into {out} ({e.strerror or e})", param="out") from None
    print(render.terminal_table(comp))
    if getattr(args, "budget", False):  # a namespace built without the flag (an older caller): no budget
        print(budget_text(comp))
    print(
        f"report: {out / 'report.html'} (and report.md, runs.csv, charts; {time.perf_counter() - t0:.1f} s)"
    )
    if not args.no_log:
        home = report_home(settings, selection)
        params = _report_params(query, baseline, threshold)
        report_id = log_report(home, files, comp, selection.read_line(), params, report_scope(selection))
        print(f"report run: {report_id} -> {redact(settings.tracking_uri)} (experiment {home.experiment})")
        if report_id:
            _print_links(home, out, report_id)
    return _regression_exit(comp, threshold)


def _print_links(home: Settings, out: Path, report_id: str) -> None:
    """Links straight to the report run and its runs list (links.py), and the run's id beside the
    report for a suite to print the same."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from devicebench.report.links import settings_link_lines

    try:  # the run's own experiment: under `mlflow run`, MLflow chose it before this process started
        experiment_id = MlflowClient(home.tracking_uri).get_run(report_id).info.experiment_id
    except MlflowException:  # spooled: the store went away after the run was made; no link to print
        return
    write_report_run(out, report_id, experiment_id)
    for line in settings_link_lines(home, experiment_id, report_id):
        print(line)
