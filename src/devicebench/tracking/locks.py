"""Inter-process locks on files (flock): the OS drops one the moment its holder dies, SIGKILL included.

Two users: a journal's `lock` (held by the process writing the run, tried by `sync`) and an embedded
SQLite store's `<db>.lock` (held while the store is created or upgraded, waited for by the others).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devicebench.errors import StoreUnavailable

# The descriptors of the locks this process holds. A forked child (a DataLoader worker) inherits them,
# and flock belongs to the open file, so the lock lived on in workers orphaned by an OOM-killed run:
# `sync` said the run was "held by live process N" for minutes after N was dead. A forked child drops
# them at once (pointing the descriptor at /dev/null keeps its number valid for code that closes it).
_HELD: set[int] = set()


def _drop_inherited_locks() -> None:
    if not _HELD:
        return
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


def release(fd: int) -> None:
    """Close a descriptor from `try_lock`: the lock is free for others."""
    _HELD.discard(fd)
    os.close(fd)


def _open_lock_file(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _flock_now(fd: int) -> bool:
    """Take the exclusive lock on `fd` if nobody holds it; False at once when somebody does."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def try_lock(path: Path) -> int | None:
    """An open descriptor holding an exclusive flock on `path`, or None while another process holds it.

    flock is tied to the open file, not the path: a journal folder renamed under its owner keeps the
    lock, and the OS releases it the moment the owner dies, SIGKILL included.
    """
    fd = _open_lock_file(path)
    if not _flock_now(fd):
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for `sync` to name
    _HELD.add(fd)
    return fd


def holder(lock_path: Path) -> str:
    """Who holds a lock taken with `try_lock`, in words."""
    try:
        return f"process {int(lock_path.read_text().split()[0])}"
    except (OSError, ValueError, IndexError):  # IndexError: taken, its pid not written yet
        return "another process"


@contextmanager
def file_lock(path: Path, timeout_s: float, what: str, hint: str = "") -> Iterator[None]:
    """An exclusive inter-process lock waited for up to `timeout_s`; StoreUnavailable naming `what` (and
    what to do instead: `hint`) when it cannot be had."""
    try:
        fd = _open_lock_file(path)
    except OSError as e:
        raise StoreUnavailable(f"{what}: cannot create the lock file {path} ({e.strerror})") from None
    try:
        deadline = time.monotonic() + timeout_s
        while not _flock_now(fd):
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"{what}: another process held {path} for more than {timeout_s:.0f} s"
                    + (f"; {hint}" if hint else "")
                ) from None
            time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock
