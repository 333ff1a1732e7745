"""The spool: one local journal per run, written before anything is sent and removed once all is sent.

Every write to a journal folder goes through `Journal` (operations, the `sent` mark, run.json), so the
live sender and a later `devicebench sync` acknowledge the same way: atomically, by rename.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from devicebench.config.settings import Settings
from devicebench.errors import SpoolUnwritable, UsageError
from devicebench.tracking.locks import release as release_lock
from devicebench.tracking.locks import try_lock
from devicebench.util.files import write_text_atomic
from devicebench.util.redact import redact

# The least free space a journal starts with: a run's operations and staged artifacts (models
# excluded) take tens of KiB to a few MiB. A spool on a full disk is refused before the run exists.
MIN_FREE_BYTES = 4 << 20


def unwritable(folder: Path, error: OSError) -> SpoolUnwritable:
    """The one line for a journal that cannot be written: the folder, why, and what to do."""
    return SpoolUnwritable(
        f"the spool folder {folder} cannot be written ({error.strerror or error}); free space there "
        "or set DEVICEBENCH_SPOOL_DIR to another folder"
    )


def check_free_space(root: Path) -> None:
    """Refuse a spool on a disk with less than MIN_FREE_BYTES free, before any run exists."""
    try:
        st = os.statvfs(root)
    except OSError:
        return  # whatever this is, creating the journal reports it
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        raise SpoolUnwritable(
            f"setting DEVICEBENCH_SPOOL_DIR={str(root)!r}: the disk holding it is full "
            f"({free // 1024:,} KiB free; a run's journal needs {MIN_FREE_BYTES >> 20} MiB); "
            "free space there or point it at another folder"
        )


def spool_root(settings: Settings) -> Path:
    """The spool folder, created if missing; a UsageError naming DEVICEBENCH_SPOOL_DIR when it cannot be."""
    root = settings.spool_dir
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)  # journals hold every metric and the store's URI
        if not root.is_dir():
            raise NotADirectoryError(f"{root} is not a folder")
    except OSError as e:
        reason = e.strerror or str(e)
        raise UsageError(
            f"setting DEVICEBENCH_SPOOL_DIR={str(root)!r}: cannot create the spool folder there ({reason}); "
            "point it at a writable folder"
        ) from None
    return root


class Journal:
    """The local record of one run's operations: written before sending, deleted once all are sent.

    `ops.jsonl` holds one operation a line with a sequence number; `sent` holds the highest sequence
    number the store acknowledged. Replaying from `sent + 1` makes `devicebench sync` exactly-once.
    `lock` is flocked by the process writing the run (its PID inside) for as long as it lives, so a
    `sync` running meanwhile leaves the journal alone.

    The journal exists before its run: `Journal.create` makes and locks a `.new-*` folder first, and
    `bind` renames it to the run id the store gave. A run that cannot be journalled is never created.
    """

    NEW_PREFIX = ".new-"
    GONE_PREFIX = ".gone-"  # a folder on its way out: `discard` renamed it, no `sync` replays it

    def __init__(self, root: Path, run_id: str, tracking_uri: str) -> None:
        """A journal for a run that already exists (the folder is created and locked here)."""
        self._open(root / run_id)
        self.bind(run_id, tracking_uri)

    @classmethod
    def create(cls, settings: Settings) -> Journal:
        """A locked, unbound journal in the spool; UsageError naming DEVICEBENCH_SPOOL_DIR if impossible."""
        root = spool_root(settings)
        check_free_space(root)
        self = cls.__new__(cls)
        try:
            self._open(root / f"{cls.NEW_PREFIX}{os.getpid()}-{time.time_ns()}")
        except OSError as e:
            raise UsageError(
                f"setting DEVICEBENCH_SPOOL_DIR={str(root)!r}: cannot write the run's journal there "
                f"({e.strerror or e}); point it at a writable folder"
            ) from None
        return self

    def _open(self, folder: Path) -> None:
        self.dir = folder
        self.files = self.dir / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)  # the run's metrics and artifacts; run.json holds the URI, redacted
        lock = try_lock(self.dir / "lock")
        if lock is None:
            raise BlockingIOError(f"the journal {self.dir} is in use by another process")
        self._lock_fd: int | None = lock
        # Line-buffered: every operation reaches the kernel as it is logged, so a SIGKILL loses none of
        # them (a write per operation costs microseconds; the sending is what is batched).
        self._ops = open(self.dir / "ops.jsonl", "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._seq = self._count_lines()
        self._lock = threading.Lock()
        self.failed: OSError | None = None  # set when a write failed: later operations stay in memory

    def bind(self, run_id: str, tracking_uri: str) -> None:
        """Name the journal after its run; from here on `sync` can replay it (once its owner is gone)."""
        target = self.dir.parent / run_id
        if self.dir != target:
            self.dir.rename(target)  # the open ops file and the flock follow the folder
            self.dir, self.files = target, target / "files"
        meta = self.dir / "run.json"
        if not meta.exists():  # never the password: `sync` takes it from the store it is pointed at
            try:
                write_text_atomic(meta, json.dumps({"run_id": run_id, "tracking_uri": redact(tracking_uri)}))
            except OSError as e:
                raise unwritable(self.dir, e) from None

    def _count_lines(self) -> int:
        path = self.dir / "ops.jsonl"
        return sum(1 for _ in path.open(encoding="utf-8")) if path.exists() else 0

    def append(self, op: dict[str, Any]) -> int:
        """Journal one operation; its sequence number. The first write that fails (a full disk) raises
        SpoolUnwritable, so the run ends FAILED; what is logged after that (ending the run) is kept in
        memory for the sender only."""
        with self._lock:
            self._seq += 1
            if self.failed is not None:
                return self._seq
            try:
                self._ops.write(json.dumps({"seq": self._seq, **op}) + "\n")
            except OSError as e:
                self.failed = e
                raise unwritable(self.dir, e) from None
            return self._seq

    def flush(self) -> None:
        with self._lock, contextlib.suppress(OSError):  # a failed write was reported by `append`
            self._ops.flush()

    def acknowledge(self, seq: int) -> None:
        """Record that the store has every operation up to `seq` (this process's own journal)."""
        try:
            self.mark_sent(self.dir, seq)
        except OSError as e:  # a full disk: the run ends FAILED through `append`; the sender goes on
            self.failed = self.failed or e

    @staticmethod
    def mark_sent(run_dir: Path, seq: int) -> None:
        """The one writer of `sent`, atomic: a kill leaves the old mark or the new one, never half of it.
        `sync` calls it on journals whose writer is gone (it holds their lock, not a `Journal`)."""
        write_text_atomic(run_dir / "sent", str(seq))

    def close(self, release: bool = True) -> None:
        """Close the journal; `release` hands it to `sync` (False while a sender thread may still write)."""
        with self._lock, contextlib.suppress(OSError):
            self._ops.close()
        if release and self._lock_fd is not None:
            release_lock(self._lock_fd)
            self._lock_fd = None

    def remove(self) -> None:
        with self._lock, contextlib.suppress(OSError):
            self._ops.close()
        discard(self.dir)
        self.close()

    @staticmethod
    def read(run_dir: Path, from_start: bool = False) -> tuple[int, list[dict[str, Any]], bool]:
        """(acknowledged sequence number, operations not yet acknowledged, whether an end record exists);
        `from_start`: every operation, acknowledged or not (a run the store lost is made again whole)."""
        sent_file = run_dir / "sent"
        sent = int(sent_file.read_text()) if sent_file.exists() else 0
        since = 0 if from_start else sent
        ops = []
        ended = False
        last = 0
        seen: set[int] = set()
        path = run_dir / "ops.jsonl"
        if path.exists():
            for line in path.open(encoding="utf-8"):
                if line.strip():
                    with contextlib.suppress(json.JSONDecodeError):  # a torn last line from a kill
                        op = json.loads(line)
                        if op["seq"] in seen:  # written once by its run: a copy would be sent twice
                            raise ValueError(f"operation {op['seq']} is in its ops.jsonl twice")
                        seen.add(op["seq"])
                        ended = ended or op["op"] == "end"
                        last = max(last, op["seq"])
                        if op["seq"] > since:
                            ops.append(op)
        # an operation is journalled before it is sent, so a mark past the last one was not written by
        # an acknowledgement: trusting it would drop the operations it claims were sent
        if not 0 <= sent <= last:
            raise ValueError(f"its `sent` mark ({sent}) is past its last operation ({last})")
        return sent, ops, ended


def discard(run_dir: Path) -> None:
    """Remove a journal folder whose lock we hold, atomically as far as a `sync` can see: renamed out of
    the way first, then deleted. Deleted in place, its `lock` file went before the rest, and a second
    `sync` locked a new one in the half-removed folder and read what was left (a run it called pending,
    or replayed again from a `sent` mark already gone)."""
    gone = run_dir.with_name(f"{Journal.GONE_PREFIX}{run_dir.name}-{os.getpid()}-{time.time_ns()}")
    try:
        run_dir.rename(gone)
    except OSError:  # not there any more, or not ours to rename: delete what we can, as before
        gone = run_dir
    shutil.rmtree(gone, ignore_errors=True)
