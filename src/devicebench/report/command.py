"""The `compare` command's work, once its flags are checked (cli.py): read the runs (read/), build the
comparison (model/), judge it (judge/), write the report and print it (render/), and log the report as
an MLflow run whose name, metrics and description carry the answer.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import replace
from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from devicebench.config.settings import Settings, load_settings, preflight_store
from devicebench.errors import UsageError
from devicebench.report.judge.judgement import Judgement, judge
from devicebench.report.links import settings_link_lines, write_report_run
from devicebench.report.model.comparison import compare
from devicebench.report.read.experiments import run_counts
from devicebench.report.read.options import Query
from devicebench.report.read.query import Selection, read_runs
from devicebench.report.read.records import RunRecord
from devicebench.report.render.files import write_report
from devicebench.report.render.headline import headline_metrics, regression_lines, report_name, summary_note
from devicebench.report.render.labels import describe, varying_params
from devicebench.report.render.money import budget_lines
from devicebench.report.render.terminal import terminal_table
from devicebench.schema import NOTE_TAG, UNSET_WORDS, tag
from devicebench.tracking.runs import run_context
from devicebench.tracking.store import check_store, configure_mlflow_client
from devicebench.util.fmt import fmt_s, fmt_share
from devicebench.util.redact import redact

COMPARED_RUNS = "compared_runs.json"  # the report run's list of the runs it compared
UNSET = UNSET_WORDS["compare"]


def compare_and_report(
    query: Query,
    baseline: str,
    threshold: float,
    out: Path,
    no_log: bool,
    budget: bool,
    deadline: float | None = None,
    fresh: bool = False,
) -> int:
    """Read, compare, judge, write, print, log; 1 when regression mode found a regression, else 0.
    `fresh`: `out` is a default name, and the report goes into a folder of its own beside it."""
    settings = load_settings()
    preflight_store(settings, read_only=no_log)
    configure_mlflow_client(settings)
    check_store(settings, read_only=no_log)
    t0 = time.perf_counter()
    selection, earlier = _read(settings, query, baseline)
    print(f"compare: {selection.read_line()}")
    judged = judge(compare(selection.runs, baseline=baseline, threshold=threshold, earlier_runs=earlier))
    try:
        files = write_report(judged, out, _meta(settings, selection, query, baseline), fresh)
        out = files[0].parent
    except OSError as e:  # the folder became unwritable while the runs were read
        raise UsageError(f"cannot write the report into {out} ({e.strerror or e})", param="out") from None
    print(terminal_table(judged))
    if budget:
        print(budget_text(judged, deadline))
    print(
        f"report: {out / 'report.html'} (and report.md, runs.csv, charts; {fmt_s(time.perf_counter() - t0)})"
    )
    if budget and not no_log and not os.environ.get("MLFLOW_RUN_ID"):
        # a --budget or --deadline question asks the runs a plain compare reports: its answer is the
        # lines above, and one report run per question made 15 in a sitting. Under `mlflow run` the run
        # exists already (MLflow made it), so it holds the report as a plain compare's does.
        print("report run: not logged for a --budget or --deadline question (a plain compare logs one)")
    elif not no_log:
        _log_once(settings, selection, judged, files, _report_params(query, baseline, threshold))
    return _regression_exit(judged, threshold)


def _log_once(
    settings: Settings, selection: Selection, judged: Judgement, files: list[Path], params: dict[str, str]
) -> None:
    """The report run, unless it would say nothing new: no finished run to report, or the same runs,
    in the same states, asked the same way as the last report run of its experiment (a plain compare
    after each look logged one identical report run per look)."""
    home = report_home(settings, selection)
    digest = selection_digest(judged, params)
    made = bool(os.environ.get("MLFLOW_RUN_ID"))  # under `mlflow run` the run exists: it holds the report
    if not judged.comp.finished and not made:
        print(f"report run: not logged: none of the {len(judged.comp.runs)} runs read has finished")
        return
    last = None if made else _last_report(home, digest)
    if last is not None:
        print(f"report run: not logged: the same selection as the last report run {last} ({home.experiment})")
        _print_report_links(home, files[0].parent, last)
        return
    scope = report_scope(selection)
    report_id = log_report(home, files, judged, selection.read_line(), params, scope, digest)
    print(f"report run: {report_id} -> {redact(settings.tracking_uri)} (experiment {home.experiment})")
    if report_id:
        _print_report_links(home, files[0].parent, report_id)


def selection_digest(judged: Judgement, params: dict[str, str]) -> str:
    """What a report answered from, as one short digest: each run read with its status, and the
    report's own params (a baseline or a threshold asks another question of the same runs)."""
    said = sorted(f"{r.run_id}:{r.status}" for r in judged.comp.runs) + sorted(
        f"{k}={v}" for k, v in params.items()
    )
    return hashlib.sha256("\n".join(said).encode()).hexdigest()[:32]


def _last_report(home: Settings, digest: str) -> str | None:
    """The id of the newest report run of `home`'s experiment where it read the same selection, else None."""
    client = MlflowClient(home.tracking_uri)
    exp = client.get_experiment_by_name(home.experiment)
    if exp is None:
        return None
    newest = client.search_runs(
        [exp.experiment_id],
        f"tags.`{tag('workload')}` = 'report'",
        max_results=1,
        order_by=["attributes.start_time DESC"],
    )
    same = newest and newest[0].data.tags.get(tag("report.selection")) == digest
    return newest[0].info.run_id if same else None


def compared_runs(judged: Judgement) -> list[dict[str, str]]:
    """The runs a report compared, each by id and by the name the UI shows: `compared_runs.json` of the
    report run (a tag of bare ids was a wall of hashes in the UI and capped at 8,000 characters)."""
    return [{"run_id": r.run_id, "run_name": r.run_name, "workload": r.workload} for r in judged.comp.runs]


def log_report(
    settings: Settings,
    files: list[Path],
    judged: Judgement,
    read: str,
    params: dict[str, str],
    scope: str = "",
    digest: str = "",
) -> str | None:
    """The report as a run of its own: its files as artifacts, the compared runs in
    `compared_runs.json`, and the answer where the MLflow UI shows it at once: a name that says what it
    holds, headline metrics and a Markdown description with the verdicts and those metrics."""
    runs = compared_runs(judged)
    metrics = headline_metrics(judged.comp)
    tags = {
        tag("report.run_count"): str(len(runs)),
        NOTE_TAG: summary_note(judged, read, metrics=metrics),
        **({tag("report.selection"): digest} if digest else {}),
    }
    with run_context(
        settings, "report", params, tags=tags, run_name=report_name(judged.comp, scope)
    ) as tracker:
        tracker.log_metrics(metrics)
        for f in files:
            tracker.log_artifact(f)
        tracker.log_dict(runs, COMPARED_RUNS)
        return tracker.run_id


def report_home(settings: Settings, selection: Selection) -> Settings:
    """The experiment the report run goes to: the one that held the most of the runs it read (the
    configured one where it ties), one of those named with --experiment where none held a run. So a
    `compare` after `make demo` and `tune` puts its report beside the demo's runs, and no compare
    creates an experiment behind the user's back."""
    ids = [r.experiment_id for r in selection.runs]
    counts = run_counts(selection.experiments, ids, bool(ids))
    if not counts:
        return replace(settings, experiment=next(iter(selection.experiments.values()), settings.experiment))
    most = [name for name, n in counts if n == counts[0][1]]
    return settings if settings.experiment in most else replace(settings, experiment=most[0])


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


def _read(settings: Settings, query: Query, baseline: str) -> tuple[Selection, list[RunRecord]]:
    """The selected runs, and the earlier runs a narrowed selection is judged against."""
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


def budget_text(judged: Judgement, deadline: float | None = None) -> str:
    """`--budget`'s lines: per config, the side that buys the most work per money (render/money.py)."""
    sides = judged.comp.all_sides
    varying = varying_params(sides)
    return "\n".join(budget_lines(sides, lambda s: describe(s, varying), deadline))


def _regression_exit(judged: Judgement, threshold: float) -> int:
    """1 with one line per regression; 0 (saying so in regression mode) when there is none."""
    comp = judged.comp
    if comp.regressions:
        for line in regression_lines(comp):
            print(line)
        return 1
    if comp.regressions is not None:
        print(
            f"no regression beyond {fmt_share(threshold)} in {comp.regression_groups} group(s) with earlier runs"
        )
    return 0


def _print_report_links(home: Settings, out: Path, report_id: str) -> None:
    """Links straight to the report run and its runs list (links.py), and the run's id beside the
    report for a suite to print the same."""
    try:  # the run's own experiment: under `mlflow run`, MLflow chose it before this process started
        experiment_id = MlflowClient(home.tracking_uri).get_run(report_id).info.experiment_id
    except MlflowException:  # spooled: the store went away after the run was made; no link to print
        return
    write_report_run(out, report_id, experiment_id)
    for line in settings_link_lines(home, experiment_id, report_id):
        print(line)
