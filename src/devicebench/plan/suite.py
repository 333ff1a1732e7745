"""A plan run: every expanded run in a fresh process under one parent run, then the report.

Each run gets its own process, so GPU memory, allocator caches and cuDNN autotuning cannot leak from one
measurement into the next, and a failed run does not stop the plan. What a child learns of its parent
crosses in one documented contract (`handoff.py`). Reading and checking the plan is `spec.py`; the
`suite` command's flags and its dry run are `cli.py`, which imports this module (and MLflow) only to run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from devicebench.config.settings import load_settings, preflight_store
from devicebench.errors import UsageError
from devicebench.plan.handoff import Handoff, child_env, store_mark
from devicebench.plan.items import Parent, Starter, finish, run_item
from devicebench.plan.spec import Plan, PlannedRun
from devicebench.plan.warm import usable, warm_server
from devicebench.report.links import (
    PARENT_PRINTS_LINKS,
    is_server,
    read_report_run,
    settings_link_lines,
    ui_start_command,
    venv_command,
)
from devicebench.schema import NOTE_TAG, tag
from devicebench.tracking.journal import spool_root
from devicebench.tracking.locks import holder, release, try_lock
from devicebench.tracking.protocol import one_line
from devicebench.tracking.runs import run_context
from devicebench.tracking.store import check_store, configure_mlflow_client, ensure_experiment
from devicebench.util.children import python_argv
from devicebench.util.files import new_folder
from devicebench.util.fmt import fmt_duration
from devicebench.util.forkserver import ForkServer
from devicebench.util.redact import MASK, redact


def _capacity(device: str, starter: Starter | None) -> tuple[str, int] | None:
    """What `device` resolves to here and how many data-parallel processes it takes on this node, or
    None when this host has no such device: asked of a child of the warm server where there is one
    (host/capacity.py says why), else here."""
    env = child_env(os.environ)
    child = starter.fork("devicebench.host.capacity", [device], env, stdout=True) if starter else None
    if child is not None:
        ended = finish(child)
        lines = ended.stderr.strip().splitlines()
        if ended.code == 0 and lines:
            got = json.loads(lines[-1])  # [type, processes] or null
            return None if got is None else (str(got[0]), int(got[1]))
    # lazy: torch, which the suite's own process needs only to skip what this host lacks
    from devicebench.host.capacity import capacity

    return capacity(device)


def unavailable_reason(device: str, nproc: int, capacity: tuple[str, int] | None) -> str | None:
    """Why an item cannot run on this host, in the words of its skip line, or None when it can.

    Only `nproc` is compared: it counts processes on *this* node, and a multi-node job's other nodes
    are other hosts. The CLI refuses the same item with exit 2; a plan that allows skipping says why
    it skipped instead of listing a failure.
    """
    if capacity is None:
        return f"no {device} device on this host"
    kind, most = capacity
    if nproc <= most:
        return None
    if kind == "cpu":
        have = f"{most} usable cpu core{'s' if most != 1 else ''}"
    else:
        have = f"{most} {kind} device{'s' if most != 1 else ''}"
    return f"nproc={nproc} but {have} on this host"


def _finished_items(settings: Any, parent_run_id: str) -> set[str]:
    """Items of an earlier launch of this plan that already FINISHED (they are not run again)."""
    client = MlflowClient(settings.tracking_uri)
    parent = client.get_run(parent_run_id)
    done: set[str] = set()
    token = None
    while True:
        page = client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}' and attributes.status = 'FINISHED'",
            max_results=500,
            page_token=token,
        )
        done |= {r.data.tags.get(tag("suite.item"), "") for r in page}
        token = page.token
        if not token:
            return done


def _child_env(
    parent_run_id: str, experiment_id: str, suite_tag: str, item: PlannedRun, store: str
) -> dict[str, str]:
    # the child names its run (devicebench/config/naming.py); a repeated item says which repeat it is
    suffix = f"repeat {item.repeat}/{item.repeats}" if item.repeats > 1 else ""
    handoff = Handoff(parent_run_id, experiment_id, suite_tag, item.item_id, suffix, item.log_model, store)
    return handoff.env(os.environ)


def tuning_summary(item: PlannedRun, stderr: str) -> list[str]:
    """A tuned item's own account under its line: the setting it chose, and how many trials the budget
    skipped (each trial's line stays in the child's stderr; a plan shows the outcome, not the search)."""
    own = f"tune {item.entry}: "
    return [ln for ln in stderr.splitlines() if ln.startswith(own) and not ln.startswith(own + "[")]


@dataclass
class Outcome:
    """What became of a launch's items, in the order they ran."""

    finished: int = 0
    failed: list[tuple[PlannedRun, str]] = field(default_factory=list)
    skipped: list[PlannedRun] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "finished": self.finished,
            "failed": [{"run": i.label, "reason": r} for i, r in self.failed],
            "skipped": [i.label for i in self.skipped],
        }


def run_plan(plan: Plan, resume: str | None = None) -> int:
    """Run every planned item in its own process under one parent run; report; exit 0, or 1 on any failure."""
    settings = load_settings()
    if plan.experiment:
        settings = dataclasses.replace(settings, experiment=plan.experiment)
    started = time.monotonic()
    params = {"plan": str(plan.path), "name": plan.name, "runs": len(plan.runs), "baseline": plan.baseline}
    with warm_server(dict(os.environ), len(plan.runs)) as server:  # it loads while the store is checked
        if resume:
            check_resumable(settings, plan, resume)
        else:
            prepare_store(settings)
        store = store_mark(settings.tracking_uri, time.time())  # the runs need not check it again
        return _run_plan(plan, settings, params, resume, started, server, store)


def _run_plan(
    plan: Plan,
    settings: Any,
    params: dict[str, Any],
    resume: str | None,
    started: float,
    server: ForkServer | None,
    store: str,
) -> int:
    with run_context(
        settings, "suite", params, run_name=f"suite {plan.name}", run_id=resume or None
    ) as parent:
        experiment_id = MlflowClient(settings.tracking_uri).get_run(parent.run_id).info.experiment_id
        suite_tag = f"{plan.name}:{parent.run_id}"
        parent.set_tags({tag("suite"): suite_tag})
        print(
            f"suite {plan.name}: {len(plan.runs)} runs -> {redact(settings.tracking_uri)} "
            f"(parent run {parent.run_id})",
            flush=True,
        )
        done = _finished_items(settings, parent.run_id) if resume else set()
        starter = Starter(usable(server))
        with alive(settings, parent.run_id):
            outcome = _run_items(
                plan,
                done,
                lambda item: _child_env(parent.run_id, experiment_id, suite_tag, item, store),
                starter,
                Parent(settings, experiment_id, parent.run_id, suite=suite_tag),
            )
        parent.log_metrics(
            {
                "suite/finished": outcome.finished,
                "suite/failed": len(outcome.failed),
                "suite/skipped": len(outcome.skipped),
            }
        )
        parent.log_dict(outcome.as_dict(), "suite.json")
        if outcome.failed:  # a plan with a failed item is no whole result: its parent run says so
            parent.incomplete = f"{len(outcome.failed)} of {len(plan.runs)} plan runs failed (suite.json)"
        report_code, report_out = 0, None
        if plan.report and outcome.finished:
            report_code, report_out = _report(plan, settings, suite_tag, starter)
        parent.set_tags({NOTE_TAG: suite_note(plan, outcome, report_out)})
    _print_summary(plan, outcome, time.monotonic() - started, settings.tracking_uri)
    _print_plan_links(settings, experiment_id, report_out)
    return 1 if outcome.failed or report_code else 0


ALIVE_EVERY_S = 30.0  # a running suite says so on its parent run this often
ALIVE_WINDOW_S = 3 * ALIVE_EVERY_S  # a parent seen alive this recently is a suite still running


@contextmanager
def alive(settings: Any, run_id: str) -> Iterator[None]:
    """While the plan's items run, the parent run's `suite.alive` tag holds the time, renewed every
    ALIVE_EVERY_S: a `--resume` from another host (sharing the store, not the spool) can tell a suite
    still running from one that died RUNNING. A store that blinks only skips a beat."""
    stop = threading.Event()
    client = MlflowClient(settings.tracking_uri)

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):
                client.set_tag(run_id, tag("suite.alive"), str(int(time.time())))
            if stop.wait(ALIVE_EVERY_S):
                return

    thread = threading.Thread(target=beat, name="suite-alive", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _journal_here(settings: Any, run_id: str) -> str:
    """The run's journal in this spool: "live" (its lock held: the suite runs on this host), "left" (its
    suite died here with it unsent), or "" (none here)."""
    lock = spool_root(settings) / run_id / "lock"
    try:
        fd = try_lock(lock) if lock.exists() else -1
    except OSError:  # the folder went as we looked: a suite that just ended and sent everything
        return ""
    if fd is None:
        return "live"
    if fd < 0:
        return ""
    release(fd)
    return "left"


def _still_running(settings: Any, run: Any) -> str | None:
    """Why a suite's parent run is still being run, or None: its journal's lock held in this spool
    (this host), or its `suite.alive` renewed within ALIVE_WINDOW_S (another host). A journal this
    spool holds unsent, its suite gone, must be sent first: resuming onto it failed with Errno 39."""
    here = _journal_here(settings, run.info.run_id)
    if here == "live":
        return f"its suite is still running on this host ({holder(spool_root(settings) / run.info.run_id / 'lock')})"
    if here == "left":
        raise UsageError(
            f"run {run.info.run_id}: its suite died on this host with its journal unsent; run `devicebench "
            "sync` first, then resume it",
            param="resume",
        )
    seen = run.data.tags.get(tag("suite.alive"), "")
    ago = time.time() - float(seen) if seen.replace(".", "", 1).isdigit() else None
    if run.info.status == "RUNNING" and ago is not None and ago < ALIVE_WINDOW_S:
        return f"its suite was alive {fmt_duration(max(ago, 0))} ago (on another host sharing the store)"
    return None


def prepare_store(settings: Any) -> str:
    """The store made ready and the plan's experiment created, once, before any child: the store under
    its inter-process lock first (check_store), then the experiment. Four suites started at once on a
    fresh SQLite store all died in MLflow's schema migration when the experiment was created first."""
    preflight_store(settings)
    configure_mlflow_client(settings)
    check_store(settings)
    return ensure_experiment(settings)


def check_resumable(settings: Any, plan: Plan, run_id: str) -> None:
    """Refuse `--resume RUN_ID` unless it names a suite parent run of this very plan.

    Resuming attaches to the run and retags it: given an ordinary matmul run, the run was rewritten as
    a suite and the whole plan ran under it, in that run's experiment."""
    preflight_store(settings)
    configure_mlflow_client(settings)
    check_store(settings)
    try:
        run = MlflowClient(settings.tracking_uri).get_run(run_id)
    except MlflowException as e:
        code = getattr(e, "error_code", "")
        if code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE") or "not found" in str(e):
            raise UsageError(
                f"no run {run_id!r} in the tracking store; give the parent run id a suite printed",
                param="resume",
            ) from None
        raise UsageError(f"run {run_id!r} cannot be read: {one_line(e)}", param="resume") from None
    workload = run.data.tags.get(tag("workload"), "")
    if workload != "suite":
        what = f"a {workload} run" if workload else "not a devicebench run"
        raise UsageError(
            f"run {run_id} is {what}, not a suite's parent run; give the parent run id a suite printed",
            param="resume",
        )
    running = _still_running(settings, run)
    if running:
        raise UsageError(
            f"run {run_id} is a suite still running: {running}; resume it only once that suite has stopped",
            param="resume",
        )
    if run.data.params.get("name") != plan.name:
        raise UsageError(
            f"run {run_id} is the parent run of plan {run.data.params.get('name')!r}, not of "
            f"{plan.name!r}; resume it with its own plan",
            param="resume",
        )
    if run.info.lifecycle_stage == "deleted":
        raise UsageError(f"run {run_id} is deleted; restore it or start the plan afresh", param="resume")


def _print_plan_links(settings: Any, experiment_id: str, report_out: Path | None) -> None:
    """The plan's last lines: links to its report run and to its runs list, in the UI's
    machine-learning view, printed here alone (its compare prints none: PARENT_PRINTS_LINKS); the
    report run's id is what its compare left beside the report."""
    found = read_report_run(report_out) if report_out else None
    report_id, exp_id = found if found else (None, experiment_id)
    # start_hint=False: the summary's "open the MLflow UI" line says how
    for line in settings_link_lines(settings, exp_id, report_id, start_hint=False):
        print(line)


def _run_items(
    plan: Plan,
    done: set[str],
    env_for: Callable[[PlannedRun], dict[str, str]],
    starter: Starter | None = None,
    parent: Parent | None = None,
) -> Outcome:
    """Each item in turn: kept if an earlier launch finished it, skipped if the plan allows that and this
    host lacks its device or the devices for its nproc, otherwise run in its own process and judged by
    its run's status in the store (`parent`); one progress line per item, with an ETA."""
    outcome, capacity, durations, total = Outcome(), {}, [], len(plan.runs)
    # configs whose model a finished run logged: with `log_models: first`, the repeats after a failed
    # first one log it until one finishes; a config an earlier launch finished has it (its first to finish)
    modelled = {item.config_id for item in plan.runs if item.item_id in done}
    for item in plan.runs:
        prefix = f"[{item.index}/{total}] {item.label}"
        if item.item_id in done:
            print(f"{prefix} ... already finished, kept", flush=True)
            outcome.finished += 1
            continue
        if plan.skip_unavailable:
            device = item.params.get("device", "cpu")
            if device not in capacity:
                capacity[device] = _capacity(device, starter)
            # load_plan checked nproc against the workload's config; matmul has none (one process)
            reason = unavailable_reason(device, int(item.params.get("nproc", "1")), capacity[device])
            if reason:
                print(f"{prefix} ... skipped: {reason}", flush=True)
                outcome.skipped.append(item)
                continue
        logs = plan.log_models != "first" or item.config_id not in modelled
        item = dataclasses.replace(item, log_model=logs)
        t0 = time.monotonic()
        ended, verdict = run_item(starter or Starter(None), item, env_for(item), parent)
        durations.append(time.monotonic() - t0)
        left = sum(durations) / len(durations) * (total - item.index)
        eta = f", ~{fmt_duration(left)} left" if item.index < total else ""
        if verdict.finished:
            outcome.finished += 1
            modelled |= {item.config_id} if item.log_model else set()
            note = f" ({verdict.note})" if verdict.note else ""
            print(f"{prefix} ... ok in {fmt_duration(durations[-1])}{note}{eta}", flush=True)
            for line in tuning_summary(item, ended.stderr) if item.tune else []:
                print(f"  {line}", flush=True)
        else:
            outcome.failed.append((item, verdict.reason))
            print(f"{prefix} ... FAILED: {verdict.reason}{eta}", flush=True)
    return outcome


def suite_note(plan: Plan, outcome: Outcome, report_out: Path | None) -> str:
    """The parent run's description (the UI showed it empty): what the plan is, what became of its
    runs, and the report run that answers it."""
    found = read_report_run(report_out) if report_out else None
    report = f"; its report: run {found[0]}" if found else ""
    counts = f"{outcome.finished} finished, {len(outcome.failed)} failed, {len(outcome.skipped)} skipped"
    return f"{plan.description or f'plan {plan.name}'}: {counts}{report}"


def _print_summary(plan: Plan, outcome: Outcome, elapsed: float, tracking_uri: str) -> None:
    print(
        f"suite {plan.name}: {outcome.finished} finished, {len(outcome.failed)} failed, "
        f"{len(outcome.skipped)} skipped in {fmt_duration(elapsed)}"
    )
    for item, reason in outcome.failed:
        print(f"  failed: {item.label}: {reason}")
    for item in outcome.skipped:
        print(f"  skipped: {item.label}")
    hint = speedup_hint(plan, outcome)
    for line in [*([hint] if hint else []), *next_commands(tracking_uri)]:
        print(line)


def speedup_hint(plan: Plan, outcome: Outcome) -> str | None:
    """One line on how to get the speedup this host could not measure (its GPU runs were skipped): the
    same plan on a GPU host, by the command that runs it there."""
    if not any(item.params.get("device", "cpu").startswith("cuda") for item in outcome.skipped):
        return None
    path = plan.path.absolute()
    with contextlib.suppress(ValueError):
        path = path.relative_to(Path.cwd())
    command = f"{venv_command('devicebench')} suite {path}"
    if path == Path("experiments/demo.yaml") and Path("Makefile").is_file():
        command = "make demo"
    return f"a CPU/GPU speedup needs a GPU host; there, run: {command}   (README: Run on a GPU instance)"


def next_commands(tracking_uri: str) -> list[str]:
    """What to type next, in a form that works in a fresh shell (no venv activated); the UI last, just
    above the links that open in it."""
    uri = redact(tracking_uri)
    compare = f"compare all runs again: {venv_command('devicebench')} compare"
    if is_server(tracking_uri):
        return [compare, f"open the MLflow UI: {uri}"]
    # any other store (SQLite, PostgreSQL, files) has no UI until one is started on it
    start = ui_start_command(tracking_uri, uri)
    hidden = f" (the store's password in place of {MASK})" if uri != tracking_uri else ""
    return [compare, f"open the MLflow UI on these runs: {start}{hidden}"]


def _report(plan: Plan, settings: Any, suite_tag: str, starter: Starter) -> tuple[int, Path]:
    """The compare report over this launch's runs, in a process of its own (forked from the warm server
    where there is one: a cold one imports MLflow and matplotlib all over again); its exit code and
    the folder it wrote. Its output is the suite's own."""
    # a folder of this launch's own: another launch of the plan may reach its report in the same second
    out = new_folder(Path("reports") / f"{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    cmd = [
        *python_argv("-m", "devicebench"),
        "compare",
        "--experiment",
        settings.experiment,
        "--filter",
        f"tags.`{tag('suite')}` = '{suite_tag}'",
        "--baseline",
        plan.baseline,
        "--threshold",
        str(plan.threshold),
        "--out",
        str(out),
    ]
    env = child_env({**os.environ, PARENT_PRINTS_LINKS: "1"})  # the suite prints them last
    code = finish(starter.start(cmd, env, inherit=True)).code
    with contextlib.suppress(OSError):  # a report that failed before writing leaves no empty folder
        out.rmdir()
    if code not in (0, 1):
        print(f"suite {plan.name}: the report failed (exit {code})", file=sys.stderr)
    return code, out
