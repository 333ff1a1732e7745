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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlflow.tracking import MlflowClient

from devicebench.errors import Interrupted, signal_name
from devicebench.plan.spec import PlannedRun
from devicebench.schema import tag
from devicebench.tracking.journal import spool_root
from devicebench.tracking.protocol import one_line
from devicebench.tracking.replay import sync_journal
from devicebench.util.children import death_signal
from devicebench.util.fmt import fmt_duration
from devicebench.util.forkserver import ForkServer, WarmChild, module_of

STOP_GRACE_S = 60.0  # SIGTERM to SIGKILL: time for a stopped run to flush its metrics and end KILLED


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


@dataclass(frozen=True)
class Parent:
    """The suite's parent run, where each item's run is looked up by its plan item."""

    settings: Any
    experiment_id: str
    run_id: str

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

    def end_stopped(self, run: Any, why: str) -> None:
        """A run stopped at its time limit: `why` as its error; one left RUNNING (its process killed
        before it could end it) has its journal replayed and ends KILLED, never FAILED as a crash."""
        client = MlflowClient(self.settings.tracking_uri)
        run_id = run.info.run_id
        client.set_tag(run_id, tag("error"), why)
        if client.get_run(run_id).info.status == "RUNNING":
            client.set_terminated(run_id, "KILLED")
        with contextlib.suppress(Exception):  # what it logged before the kill; `sync` tries again later
            sync_journal(spool_root(self.settings) / run_id, self.settings.tracking_uri)


def judge(item: PlannedRun, ended: Ended, parent: Parent | None) -> Verdict:
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
            parent.end_stopped(run, f"{limit}; stopped by the suite")
        return Verdict(False, f"KILLED: {limit}")
    if parent is None or unread:
        return (
            Verdict(True, note=unread)
            if ended.code == 0
            else Verdict(False, f"{said}{'; ' if unread else ''}{unread}")
        )
    if run is None:
        return Verdict(False, said if ended.code else "exit 0, but it left no run in the store")
    if run.info.status == "FINISHED":
        return Verdict(
            True, note=f"its run FINISHED, but its process ended with {said}" if ended.code else ""
        )
    error = run.data.tags.get(tag("error"), "") or said
    return Verdict(False, f"its run is {run.info.status} in the store (exit {_code(ended.code)}): {error}")


def _code(code: int) -> str:
    """An exit code as a person reads it: `-9` is `-9, killed by SIGKILL`."""
    return f"{code}" if code >= 0 else f"{code}, killed by {signal_name(-code)}"
