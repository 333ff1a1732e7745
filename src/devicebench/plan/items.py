"""One plan item's process, from its start to its verdict.

Started forked from the warm server while that lives, else cold (a server that died is said once, and
the plan goes on cold); bounded by the item's time limit (SIGTERM, then SIGKILL: its run ends KILLED);
judged by its run's own status in the store, not by its exit code alone: code that calls `sys.exit(0)`
inside a run, or any child that exits 0 over a run that did not finish, is not a finished item.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlflow.tracking import MlflowClient

from devicebench.errors import Interrupted, signal_name
from devicebench.plan.spec import PlannedRun
from devicebench.schema import SCHEMA_VERSION, tag
from devicebench.tracking.journal import spool_root
from devicebench.tracking.protocol import one_line
from devicebench.tracking.replay import sync_journal
from devicebench.util.children import death_signal
from devicebench.util.fmt import fmt_duration
from devicebench.util.forkserver import ForkServer, WarmChild, module_of

STOP_GRACE_S = 60.0  # SIGTERM to SIGKILL: time for a stopped run to flush its metrics and end KILLED
# How long the suite waits for a tracking store that does not answer before it starts the next item
# anyway (which then fails in its own words): a tracking server restarting takes tens of seconds to
# answer, and an item started meanwhile failed creating its run, leaving nothing in the store.
STORE_WAIT_S = 180.0


class Starter:
    """Starts a plan's processes: forked from the warm server while it lives, else as fresh interpreters.
    A server found dead (the OOM killer picks it first: it is the plan's biggest process) is said once
    on stderr, and every later process starts cold."""

    def __init__(self, server: ForkServer | None) -> None:
        self.server = server

    def fork(
        self,
        module: str,
        args: Sequence[str],
        env: Mapping[str, str],
        stdout: bool = False,
        inherit: bool = False,
    ) -> WarmChild | None:
        """`python -m MODULE ARGS` forked from the server, or None where it cannot be (none, another
        path, or gone: the caller starts it cold)."""
        server = self.server
        if server is None or not server.serves(env):
            return None
        why = server.gone()
        if why is None:
            try:
                return server.start(module, args, env, os.getcwd(), stdout=stdout, inherit=inherit)
            except OSError as e:  # it died since we looked: the socket is closed at its end
                why = server.gone() or one_line(e)
        self.server = None
        print(f"suite: the warm server is gone ({why}); the runs start cold from here", file=sys.stderr)
        return None

    def start(self, argv: list[str], env: dict[str, str], inherit: bool = False) -> Any:
        """The item's process (a WarmChild or a Popen). Its stderr is piped back, or (`inherit`) its
        stdout and stderr are the suite's own."""
        if inherit:
            sys.stdout.flush()  # the suite's lines before the child's
        target = module_of(argv)
        child = self.fork(*target, env, inherit=inherit) if target is not None else None
        if child is not None:
            return child
        # SIGTERM when the suite dies (even by SIGKILL): the child ends its run KILLED instead of training on
        return subprocess.Popen(
            argv,
            env=env,
            stdout=None if inherit else subprocess.DEVNULL,
            stderr=None if inherit else subprocess.PIPE,
            text=True,
            preexec_fn=death_signal(signal.SIGTERM),
        )


@dataclass(frozen=True)
class Ended:
    """How an item's process ended: its exit code, its stderr, and whether it ran past its time limit."""

    code: int
    stderr: str
    timed_out: bool = False


def finish(proc: Any, limit_s: float | None = None) -> Ended:
    """Wait for a child for at most `limit_s`; past it, stop it (SIGTERM, then SIGKILL after
    STOP_GRACE_S). When the suite itself is stopped, stop the child the same way and wait for it, so
    its run ends KILLED with its metrics flushed instead of being left RUNNING."""
    try:
        try:
            _, stderr = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            return Ended(*_stop(proc, signal.SIGTERM), True)
    except (Interrupted, KeyboardInterrupt) as e:
        _stop(proc, e.signum if isinstance(e, Interrupted) else signal.SIGINT)
        raise
    return Ended(int(proc.returncode), stderr or "")


def _stop(proc: Any, signum: int) -> tuple[int, str]:
    """Signal a child and wait for it (SIGKILL after STOP_GRACE_S): its exit code and all its stderr
    (a second `communicate` returns what the first had already read, too)."""
    proc.send_signal(signum)
    try:
        _, stderr = proc.communicate(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
    return int(proc.returncode), stderr or ""


@dataclass(frozen=True)
class Verdict:
    """An item's outcome: finished (its run FINISHED in the store) or not, and why in one line."""

    finished: bool
    reason: str = ""  # why it did not finish
    note: str = ""  # said beside a finished item
    again: bool = False  # it failed before its run existed, and the store says so: worth one more try


@dataclass
class Parent:
    """The suite's parent run, where each item's run is looked up by its plan item."""

    settings: Any
    experiment_id: str
    run_id: str
    gone: bool = False  # a wait ran out: the store is away for good, and later items fail fast again
    suite: str = ""  # the plan's tag ("<plan>:<parent run id>"), the report's filter, on a run made here

    def run_of(self, item: PlannedRun) -> Any | None:
        """The item's newest run under this parent, or None when it made none."""
        item_filter = f"tags.`{tag('suite.item')}` = '{item.item_id}'"
        runs = MlflowClient(self.settings.tracking_uri).search_runs(
            [self.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.run_id}' and {item_filter}",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        return runs[0] if runs else None

    def wait_for_store(self, wait_s: float = STORE_WAIT_S) -> None:
        """Return once the store answers (reading the parent run), or after `wait_s`, said once; not
        at all once a wait has run out, until the store answers again."""
        client = MlflowClient(self.settings.tracking_uri)
        deadline, said = time.monotonic() + (0.0 if self.gone else wait_s), False
        while True:
            try:
                client.get_run(self.run_id)
                self.gone = False
                return
            except Exception as e:
                if time.monotonic() >= deadline:
                    self.gone = True
                    return
                if not said:
                    print(
                        f"suite: the tracking store does not answer ({one_line(e)[:200]}); waiting up to "
                        f"{fmt_duration(wait_s)} before the next step",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                time.sleep(1.0)

    def record_unstarted(self, item: PlannedRun, why: str) -> None:
        """An item the suite stopped before its run existed (a factory that hangs at import): a run in
        the store all the same, KILLED with `why`, so the store says it and not only the summary. It
        carries the plan's tags and the current schema, so the report lists it as a run that did not
        finish, never as an older one."""
        tags = {
            "mlflow.parentRunId": self.run_id,
            tag("suite.item"): item.item_id,
            tag("workload"): item.entry,
            tag("schema"): str(SCHEMA_VERSION),
            tag("error"): why,
            **({tag("suite"): self.suite} if self.suite else {}),
        }
        client = MlflowClient(self.settings.tracking_uri)
        with contextlib.suppress(Exception):  # the store away: the summary and suite/failed still say it
            run = client.create_run(self.experiment_id, run_name=item.label, tags=tags)
            client.set_terminated(run.info.run_id, "KILLED")

    def settle(self, run: Any, ended: Ended, why: str) -> Any:
        """A run its process left RUNNING, the process gone: its journal replayed as `sync` would (what
        it logged, and its end where it wrote one: a run spooled while the store was away). One a
        signal or the time limit stopped ends KILLED (first, so a journal without an end does not
        read as a crash), any other FAILED; `why` is its error where it has none of its own, and
        always for the time limit. The run as the store has it afterwards."""
        client = MlflowClient(self.settings.tracking_uri)
        run_id = run.info.run_id
        killed = ended.timed_out or ended.code < 0 or ended.code > 128
        if killed and client.get_run(run_id).info.status == "RUNNING":
            client.set_terminated(run_id, "KILLED")
        with contextlib.suppress(Exception):  # a journal it left; `sync` tries again later
            sync_journal(spool_root(self.settings) / run_id, self.settings.tracking_uri)
        now = client.get_run(run_id)
        if now.info.status == "RUNNING":
            client.set_terminated(run_id, "FAILED")
        if now.info.status != "FINISHED" and (ended.timed_out or not now.data.tags.get(tag("error"))):
            client.set_tag(run_id, tag("error"), why)
        return client.get_run(run_id)


def run_item(
    starter: Starter, item: PlannedRun, env: dict[str, str], parent: Parent | None
) -> tuple[Ended, Verdict]:
    """One item start to verdict. One that failed before its run existed (the store away as it
    started, its warm server killed under it) is started once more: the store, asked once it answers,
    holds no run of it, so no result can be doubled. A warm child whose server died under it says so
    (it reads as a SIGKILL, but it was stopped with its server)."""
    for attempt in (1, 2):
        if parent is not None:
            parent.wait_for_store()
        proc = starter.start(item.argv(), env)
        ended = finish(proc, item.time_limit_s)
        if parent is not None:
            parent.wait_for_store()
        verdict = item_verdict(item, ended, parent)
        server = starter.server
        if isinstance(proc, WarmChild) and server is not None and not verdict.finished and server.gone():
            verdict = Verdict(
                False,
                f"the warm server died under it ({server.gone()}); {verdict.reason}",
                again=verdict.again,
            )
        if not verdict.again or attempt == 2:
            return ended, verdict
        print(f"  it left no run in the store ({verdict.reason[:300]}); starting it once more", flush=True)
    raise AssertionError("unreachable")


def item_verdict(item: PlannedRun, ended: Ended, parent: Parent | None) -> Verdict:
    """The item's verdict from its run's status in the store (where the suite has one), else from its
    exit code; a run the time limit stopped ends KILLED."""
    lines = [ln for ln in ended.stderr.splitlines() if ln.strip()]
    said = f"exit {_code(ended.code)}: " + (
        lines[-1].removeprefix("devicebench: error: ") if lines else "no message"
    )
    run, unread = None, ""
    if parent is not None:
        try:
            run = parent.run_of(item)
        except Exception as e:  # the store is away: the child's own exit code is the best we know
            unread = f"its run's status could not be read: {one_line(e)}"
    if ended.timed_out:
        limit = f"ran past its time limit of {fmt_duration(item.time_limit_s)} (time_limit_s)"
        if run is not None and run.info.status == "FINISHED":  # its figures are whole; its exit hung
            return Verdict(True, note=f"its run had FINISHED, but its process {limit}: stopped")
        if run is not None and parent is not None:
            parent.settle(run, ended, f"{limit}; stopped by the suite")
        elif parent is not None and not unread:
            parent.record_unstarted(item, f"{limit}; stopped by the suite before its run existed")
        return Verdict(False, f"KILLED: {limit}")
    if run is not None and run.info.status == "RUNNING" and parent is not None:
        run = parent.settle(run, ended, f"its process ended ({_code(ended.code)}) without ending its run")
    if parent is None or unread:
        return (
            Verdict(True, note=unread)
            if ended.code == 0
            else Verdict(False, f"{said}{'; ' if unread else ''}{unread}")
        )
    if run is None:
        # exit 2 is input refused before the run: the same again; anything else may be the moment's
        return Verdict(
            False, said if ended.code else "exit 0, but it left no run in the store", again=ended.code != 2
        )
    if run.info.status == "FINISHED":
        return Verdict(
            True, note=f"its run FINISHED, but its process ended with {said}" if ended.code else ""
        )
    error = run.data.tags.get(tag("error"), "") or said
    return Verdict(False, f"its run is {run.info.status} in the store (exit {_code(ended.code)}): {error}")


def _code(code: int) -> str:
    """An exit code as a person reads it: `-9` is `-9, killed by SIGKILL`."""
    return f"{code}" if code >= 0 else f"{code}, killed by {signal_name(-code)}"
