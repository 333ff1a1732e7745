"""Journal operations to the store: `send_ops` for the live sender and for `devicebench sync`, which
replays the journals of processes that are gone, exactly once.

A journal belongs to its live process (an OS lock, released when the process dies): `sync` replays
only journals whose process is gone, and ends a run that died without an end record FAILED.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from devicebench.config.settings import Settings
from devicebench.errors import UsageError
from devicebench.schema import MAX_BATCH_METRICS, tag
from devicebench.tracking.artifacts import link_metrics, log_saved_model, mark_tables, upload_files
from devicebench.tracking.journal import Journal, discard
from devicebench.tracking.locks import holder, release, try_lock
from devicebench.tracking.protocol import one_line
from devicebench.tracking.store import configure_mlflow_client
from devicebench.util.files import write_text_atomic
from devicebench.util.redact import MASK, is_redacted, redact

DIED_WITHOUT_END = "process died (no end record)"
_BATCH_TAGS_OR_PARAMS = 100  # MLflow's log_batch limit for tags and params


def send_ops(client: Any, run_id: str, ops: list[dict[str, Any]], journal_dir: Path) -> None:
    """Send journal operations, in order, to the store. Raises on the first failure (the caller retries)."""
    metrics: list[Metric] = []
    files: list[dict[str, Any]] = []

    def flush_metrics() -> None:
        for i in range(0, len(metrics), MAX_BATCH_METRICS):
            client.log_batch(run_id, metrics=metrics[i : i + MAX_BATCH_METRICS])
        metrics.clear()
        if files:
            upload_files(client, run_id, files, journal_dir)
            mark_tables(client, run_id, [f["table"] for f in files if f.get("table")])
            files.clear()

    for op in ops:
        kind = op["op"]
        if kind == "metrics":
            metrics.extend(Metric(k, v, op["ts"], op["step"] or 0) for k, v in op["values"].items())
            continue
        if kind == "artifact":
            files.append(op)
            continue
        flush_metrics()
        if kind == "tags":
            _log_batched(client, run_id, "tags", [RunTag(k, v) for k, v in op["values"].items()])
        elif kind == "params":
            existing = client.get_run(run_id).data.params
            items = [Param(k, v) for k, v in op["values"].items() if k not in existing]
            _log_batched(client, run_id, "params", items)
        elif kind == "model":
            model_id = log_saved_model(client, run_id, journal_dir / op["path"], op["name"])
            link_metrics(client, run_id, model_id, op.get("points", []))
        elif kind == "link":  # a model logged live, its metrics linked through the journal
            link_metrics(client, run_id, op["model_id"], op["points"])
        elif kind == "end":  # the time the run ended, not the time a later `devicebench sync` replayed it
            client.set_terminated(run_id, op["status"], end_time=op.get("ts"))
    flush_metrics()


def _log_batched(client: Any, run_id: str, kind: str, items: list[Any]) -> None:
    for i in range(0, len(items), _BATCH_TAGS_OR_PARAMS):
        client.log_batch(run_id, **{kind: items[i : i + _BATCH_TAGS_OR_PARAMS]})


@dataclass
class SyncOutcome:
    """What `devicebench sync` did with the spool."""

    replayed: int = 0  # journals sent and removed
    pending: int = 0  # journals that could not be sent now (the store is still away)
    live: int = 0  # journals still held by a running process: left alone
    died: int = 0  # of `replayed`, runs whose process died without ending them: now FAILED
    broken: int = 0  # journals that cannot be read (a corrupt run.json or `sent`): named and left alone


def _end_dead_run(client: Any, run_id: str, run_dir: Path) -> bool:
    """End a run whose process died without an end record: FAILED, at the time its journal was last
    written. A run the store already shows as ended (e.g. by `mlflow run`) keeps its status."""
    if client.get_run(run_id).info.status != "RUNNING":
        return False
    ops = run_dir / "ops.jsonl"
    end_ms = int((ops.stat().st_mtime if ops.exists() else time.time()) * 1000)
    client.log_batch(run_id, tags=[RunTag(tag("error"), DIED_WITHOUT_END)])
    client.set_terminated(run_id, "FAILED", end_time=end_ms)
    return True


def _end_again(client: Any, run_id: str, run_dir: Path) -> bool:
    """A journal that holds its run's end, marked sent, over a run the store shows RUNNING: the mark
    said more than the store got (a store restored from a backup). The end is sent again rather than
    the journal removed over a run left RUNNING. Always False: the run did not die unended."""
    if client.get_run(run_id).info.status != "RUNNING":
        return False
    _, ops, _ = Journal.read(run_dir, from_start=True)
    end = [op for op in ops if op["op"] == "end"][-1]
    client.set_terminated(run_id, end["status"], end_time=end.get("ts"))
    return False


def sync_spool(settings: Settings, recreate_lost: bool = False) -> SyncOutcome:
    """Replay every spooled run whose process is gone to its store, exactly once.

    A journal whose lock is held belongs to a run still going (or to another `sync`): it is skipped and
    said so, never replayed under its writer. A journal without an end record, whose process is gone,
    was killed (SIGKILL, power loss): it is replayed and its run ended FAILED, so nothing stays RUNNING.
    """
    configure_mlflow_client(settings)
    out = SyncOutcome()
    root = settings.spool_dir
    if root.exists() and not root.is_dir():  # "0 replayed" here once hid every spooled run
        raise UsageError(
            f"setting DEVICEBENCH_SPOOL_DIR={str(root)!r} is not a folder; point it at the spool folder"
        )
    if not root.is_dir():
        return out
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if run_dir.name.startswith(Journal.GONE_PREFIX):  # replayed or ended: its remover died midway
            shutil.rmtree(run_dir, ignore_errors=True)
            continue
        _sync_journal(run_dir, out, settings.tracking_uri, settings.experiment if recreate_lost else "")
    return out


def sync_journal(run_dir: Path, tracking_uri: str) -> SyncOutcome:
    """Replay one run's journal if its writer is gone (what a job launcher does for a rank it lost)."""
    out = SyncOutcome()
    _sync_journal(run_dir, out, tracking_uri, "")
    return out


def store_uri(journalled: str, configured: str) -> str | None:
    """The URI to replay a journal to: journals keep their store's URI redacted, so a password comes
    from the configured store when it is the same one; None when the journal's store needs a password
    this process was not given."""
    if journalled == configured or journalled == redact(configured):
        return configured
    return None if is_redacted(journalled) or MASK in journalled else journalled


def _sync_journal(run_dir: Path, out: SyncOutcome, tracking_uri: str, experiment: str) -> None:
    """Replay one journal folder if its writer is gone; count what happened in `out`."""
    try:
        fd = try_lock(run_dir / "lock")
    except FileNotFoundError:
        if not run_dir.exists():  # another `sync` replayed it and removed it since we listed the spool
            return
        raise
    except OSError as e:
        print(f"devicebench: {run_dir} not replayed: cannot lock it ({e.strerror or e})", file=sys.stderr)
        out.pending += 1
        return
    if fd is None:
        if (run_dir / "run.json").is_file():
            print(
                f"devicebench: run {run_dir.name} skipped: its journal is held by live "
                f"{holder(run_dir / 'lock')} (a run still going, or another sync)",
                file=sys.stderr,
            )
            out.live += 1
        return
    try:
        if (run_dir / "run.json").is_file():
            _replay(run_dir, out, tracking_uri, experiment)
        # a process that died before its run existed, or our lock made in a journal another sync removed
        elif run_dir.name.startswith(Journal.NEW_PREFIX) or {p.name for p in run_dir.iterdir()} <= {"lock"}:
            discard(run_dir)
    finally:
        release(fd)


def _read_journal(run_dir: Path) -> tuple[str, str, list[dict[str, Any]], bool]:
    """(run id, journalled store URI, unsent operations, ended) or ValueError saying what is corrupt."""
    try:
        meta = json.loads((run_dir / "run.json").read_text())
        run_id, uri = str(meta["run_id"]), str(meta["tracking_uri"])
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ValueError(f"run.json is not a journal's ({type(e).__name__}: {one_line(e)})") from None
    try:
        _, ops, ended = Journal.read(run_dir)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ValueError(f"its `sent` mark or operations are corrupt ({one_line(e)})") from None
    return run_id, uri, ops, ended


def _recreated(
    client: Any, run_dir: Path, run_id: str, experiment: str
) -> tuple[str, list[dict[str, Any]]] | None:
    """A run the store no longer has (its database dropped and made anew mid-run), made again when the
    user asked (`sync --recreate-lost`, `experiment` set): a new run in `experiment`, tagged with the id
    it replaces, to be sent every operation of the journal from its first (sent before or not). Its id
    is written into the journal before anything is sent, so an interrupted replay goes on into the same
    run next time. None for a run the store has; RunLost where it was not asked to make it again: a
    store that is not the one that lost it (a relative SQLite path from another folder) must not get it."""
    try:
        client.get_run(run_id)
        return None
    except MlflowException as e:
        if e.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    if not experiment:
        raise RunLost(run_id)
    _, ops, _ = Journal.read(run_dir, from_start=True)
    exp = client.get_experiment_by_name(experiment)
    if exp is not None and exp.lifecycle_stage == "deleted":
        raise UsageError(
            f"its experiment {experiment!r} is deleted; restore it (`mlflow experiments restore "
            f"--experiment-id {exp.experiment_id}`) or set DEVICEBENCH_EXPERIMENT to another, then sync again"
        )
    experiment_id = exp.experiment_id if exp is not None else client.create_experiment(experiment)
    start = next((op["ts"] for op in ops if "ts" in op), None)
    names = [
        op["values"]["mlflow.runName"]
        for op in ops
        if op["op"] == "tags" and "mlflow.runName" in op["values"]
    ]
    new = client.create_run(
        experiment_id,
        start_time=start,
        tags={tag("replayed_from"): run_id},
        run_name=names[-1] if names else None,
    )
    meta = json.loads((run_dir / "run.json").read_text())
    write_text_atomic(
        run_dir / "run.json", json.dumps({**meta, "run_id": new.info.run_id, "replayed_from": run_id})
    )
    Journal.mark_sent(run_dir, 0)
    # links from metrics to a model of the lost database cannot be made again; the model itself is re-logged
    return new.info.run_id, [op for op in ops if op["op"] != "link"]


class RunLost(Exception):
    """A spooled run the store does not have, and `sync` was not asked to make it again."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"the store has no run {run_id} (its database dropped or replaced, or this is another store); "
            "`devicebench sync --recreate-lost` makes it again from its journal, in DEVICEBENCH_EXPERIMENT"
        )


def _replay(run_dir: Path, out: SyncOutcome, tracking_uri: str, experiment: str) -> None:
    """Send a dead process's journal (we hold its lock), one acknowledged operation at a time.

    A journal that cannot be read is named and left where it is; the others are still replayed."""
    try:
        run_id, journalled, ops, ended = _read_journal(run_dir)
    except ValueError as e:
        print(f"devicebench: journal {run_dir} skipped: {e}; fix or remove it", file=sys.stderr)
        out.broken += 1
        return
    uri = store_uri(journalled, tracking_uri)
    if uri is None:
        print(
            f"devicebench: run {run_id} not replayed yet: its store {journalled} needs its password; "
            "set MLFLOW_TRACKING_URI to that store and run `devicebench sync` again",
            file=sys.stderr,
        )
        out.pending += 1
        return
    client = MlflowClient(uri)
    try:
        mlflow.set_tracking_uri(uri)
        recreated = _recreated(client, run_dir, run_id, experiment)
        if recreated is not None:
            print(
                f"devicebench: run {run_id} is not in the store {redact(uri)} (its database replaced?): "
                f"made again as run {recreated[0]} from its journal",
                file=sys.stderr,
            )
            run_id, ops = recreated
        for op in ops:  # one at a time so `sent` advances with each acknowledged operation
            send_ops(client, run_id, [op], run_dir)
            Journal.mark_sent(run_dir, op["seq"])
        died = _end_dead_run(client, run_id, run_dir) if not ended else _end_again(client, run_id, run_dir)
    except Exception as e:
        print(f"devicebench: run {run_id} not replayed yet: {one_line(e)}", file=sys.stderr)
        out.pending += 1
        return
    if died:
        print(
            f"devicebench: run {run_id}: its process died without ending it; replayed and ended FAILED",
            file=sys.stderr,
        )
        out.died += 1
    discard(run_dir)
    out.replayed += 1
