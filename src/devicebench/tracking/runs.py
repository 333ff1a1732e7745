"""Run lifecycle: start (or attach to) a run, end it FINISHED, FAILED or KILLED (how a signal ends it: signals.py).

* the store is checked *before* any work, and an unreachable one fails fast with its URI named;
* the run's journal exists (locked by this process) before the run does;
* any exception marks the run FAILED with a one-line `devicebench.error` tag; a signal marks it KILLED;
* a run whose last operations could not be sent ends in the spool, and the caller is told so.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil
from mlflow.tracking import MlflowClient
from mlflow.tracking.context.registry import resolve_tags

from devicebench.config.naming import is_generated
from devicebench.config.settings import Settings
from devicebench.config.workloads import WORKLOADS
from devicebench.errors import ExitedInsideRun, Interrupted, SpooledError, StoreUnavailable
from devicebench.schema import END_S, START_S, STORE_S, is_tag, tag
from devicebench.tracking.journal import Journal
from devicebench.tracking.protocol import one_line
from devicebench.tracking.signals import ending, install_signal_handlers, received
from devicebench.tracking.store import (
    check_store,
    configure_mlflow_client,
    ensure_experiment,
    given_experiment,
    store_error_hint,
)
from devicebench.tracking.tracker import MlflowTracker
from devicebench.util.collector import paused_for_imports
from devicebench.util.redact import redact


@dataclass(frozen=True)
class FromPlan:
    """What a plan that started the run hands it (plan/handoff.py): its parent run, whether this repeat
    logs its model, and whether the plan checked and prepared this store moments ago."""

    parent_run_id: str | None = None
    log_models: bool = True
    store_checked: bool = False


def _journalled_run(
    client: MlflowClient,
    settings: Settings,
    workload: str,
    start_tags: dict[str, str],
    run_name: str | None,
    run_id: str | None,
    plan: FromPlan,
) -> tuple[MlflowTracker, str | None]:
    """(the tracker of the run created or attached to, its name). The journal exists (and is locked by
    this process) before the run does: a run that could not be journalled would have no local trace if
    the store went away or the process were killed."""
    journal = Journal.create(settings)
    run_id, name = _open_run(client, settings, journal, workload, start_tags, run_name, run_id)
    try:
        return MlflowTracker(settings, run_id, journal, plan.log_models), name
    except BaseException as e:  # the journal could not be bound (a full disk): end the run here
        _end_without_journal(client, run_id, one_line(e))
        journal.remove()
        raise


@contextmanager
def run_context(
    settings: Settings,
    workload: str,
    params: Mapping[str, Any],
    tags: Mapping[str, str] | None = None,
    run_name: str | None = None,
    run_id: str | None = None,
    plan: FromPlan = FromPlan(),
) -> Iterator[MlflowTracker]:
    """Start (or attach to) a run; end it FINISHED, FAILED or KILLED.

    `run_id` attaches to a run that already exists; without it, `MLFLOW_RUN_ID` does (that is how
    `mlflow run` hands its run over), and without either a new run is created. The store is checked
    before anything else, so an unreachable server costs seconds, not a training run, unless the plan
    that started this run has just checked it (`plan`)."""
    install_signal_handlers()  # before the run exists: a SIGTERM after create_run must not leave it RUNNING
    store_t0 = time.perf_counter()
    with paused_for_imports():  # the store's modules (SQLAlchemy's), its engine and GitPython load here
        if not plan.store_checked:
            check_store(settings)
        configure_mlflow_client(settings)
        client = MlflowClient(settings.tracking_uri)
        start_tags = {tag("workload"): workload, **(tags or {})}
        start_tags.update({"mlflow.parentRunId": plan.parent_run_id} if plan.parent_run_id else {})
        tracker, name = _journalled_run(client, settings, workload, start_tags, run_name, run_id, plan)
    try:
        # its name journalled too: a run the store loses is made again under it (`sync --recreate-lost`)
        tracker.set_tags({**start_tags, "mlflow.runName": name} if name else start_tags)
        tracker.log_params(params)
        if workload in WORKLOADS:  # a measurement's fixed cost; a report run's metrics are its answers
            tracker.log_metrics({STORE_S: time.perf_counter() - store_t0, START_S: process_age_s()})
        yield tracker
    except BaseException as e:
        status, error, raised = _ended_by(e)
        _finish(tracker, status, error)
        if raised is e:
            raise
        raise raised from None
    else:
        swallowed = received()
        if swallowed is not None:  # its exception was dropped on the way up: the figures are not a result
            interrupted = Interrupted(swallowed)
            _finish(
                tracker, "KILLED", f"{interrupted}; the run went on after it, so its figures are not kept"
            )
            raise interrupted
        status = "FAILED" if tracker.incomplete else "FINISHED"
        if not _finish(tracker, status, tracker.incomplete, timed=workload in WORKLOADS, to_end=True):
            raise _spooled_error(settings, tracker)


def _ended_by(e: BaseException) -> tuple[str, str, BaseException]:
    """(status, error, what to raise) for a run an exception ended: a signal ends it KILLED; anything
    else FAILED, `sys.exit` too, whatever its code (the command must not exit 0 over a failed run)."""
    if isinstance(e, Interrupted):
        return "KILLED", str(e), e
    if isinstance(e, KeyboardInterrupt):
        return "KILLED", "interrupted by Ctrl-C (SIGINT)", e
    if isinstance(e, SystemExit):
        exited = ExitedInsideRun(e.code)
        return "FAILED", str(exited), exited
    return "FAILED", one_line(e), e


def _open_run(
    client: Any,
    settings: Settings,
    journal: Journal,
    workload: str,
    start_tags: dict[str, str],
    run_name: str | None,
    run_id: str | None,
) -> tuple[str, str]:
    """The id and name of the run to write: the explicit `run_id`, else `MLFLOW_RUN_ID` (tagged with
    its workload), else a new run's. When that fails the journal goes: no run, nothing to replay."""
    run_id = run_id or os.environ.get("MLFLOW_RUN_ID")
    try:
        if run_id:
            client.set_tag(run_id, tag("workload"), workload)
            return run_id, _name_attached_run(client, run_id, run_name)
        given = os.environ.get("MLFLOW_EXPERIMENT_ID", "").strip()
        experiment_id = given_experiment(settings, given) if given else ensure_experiment(settings)
        with contextlib.redirect_stderr(sys.stderr):
            all_tags = resolve_tags({k: v for k, v in start_tags.items() if is_tag(k)})  # facts: params
        info = client.create_run(experiment_id, run_name=run_name, tags=all_tags).info
        return info.run_id, info.run_name or ""
    except BaseException as e:
        journal.remove()
        hint = store_error_hint(settings.tracking_uri, one_line(e))
        if hint:
            raise StoreUnavailable(hint) from None
        raise


def _end_without_journal(client: Any, run_id: str, error: str) -> None:
    """End a run FAILED straight through the client: its journal could not be written, so no `sync`
    would ever end it, and it must not stay RUNNING."""
    with contextlib.suppress(Exception):
        client.set_tag(run_id, tag("error"), error)
        client.set_terminated(run_id, "FAILED")


def _name_attached_run(client: Any, run_id: str, run_name: str | None) -> str:
    """`mlflow run` creates its run under a random name (`capable-squid-859`); give it the scheme every
    other launch path uses, unless a person chose the name (`mlflow run --run-name`). Its name after."""
    name = client.get_run(run_id).info.run_name or ""
    if run_name and is_generated(name):
        client.set_tag(run_id, "mlflow.runName", run_name)
        return run_name
    return name


def _spooled_error(settings: Settings, tracker: MlflowTracker) -> SpooledError:
    """What a run that ended with operations left in its journal tells its caller."""
    why = store_error_hint(settings.tracking_uri, tracker.last_error or "")
    why = why or f"tracking store {redact(settings.tracking_uri)} unreachable"
    return SpooledError(
        f"{why} at the end of run {tracker.run_id}: results spooled to {tracker.journal.dir}; replay "
        "with `devicebench sync` (it makes a run the store lost again)"
    )


def process_age_s() -> float:
    """Seconds since this process started (a run forked from a plan's warm server: since the fork).

    On Linux both ends are read on the kernel's clock since boot: psutil's `create_time` adds the boot
    time, which /proc/stat gives in whole seconds, so an age taken from it was up to a second too long,
    and every run's `time/start_s` with it."""
    try:
        with open("/proc/self/stat", "rb") as f:
            after_name = f.read().rsplit(b")", 1)[1].split()  # a process's name may hold spaces
        started = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux: no /proc, no CLOCK_BOOTTIME
        return time.time() - psutil.Process().create_time()


def _finish(
    tracker: MlflowTracker, status: str, error: str | None, timed: bool = False, to_end: bool = False
) -> bool:
    """End the run with `status`; `timed`: a workload run that logs what its end cost (END_S); `to_end`:
    its work ran to its end (FINISHED, or FAILED as incomplete), and a spool is the caller's to say."""
    if to_end:  # the end's cost, measured on what it mostly is: flushing what was logged
        t0 = time.perf_counter()
        tracker.drain(tracker.settings.final_flush_s, while_reachable=True)  # close waits out an outage
        if timed:
            tracker.log_metrics({END_S: time.perf_counter() - t0})
    with ending():
        delivered = tracker.close(status, error)
    if not delivered and not to_end:
        print(
            f"devicebench: store unreachable, run {tracker.run_id} spooled to {tracker.journal.dir}",
            file=sys.stderr,
        )
    return delivered
