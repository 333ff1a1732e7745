"""Writing a file whole or not at all, never through a link it did not make: the report's run file, a
journal's run.json and `sent` mark, a job's rank files (the report's own files are made in a new
folder and renamed into place; a journal's ops file is appended to in its own 0700 spool folder).

A report folder is the user's, and another user (or a planted link) may own what is in it:
`compare --out DIR` once followed a symlink at DIR/report_run.json and overwrote the file it pointed at.
A new temporary file in the same folder, then a rename over the name, replaces a link itself (rename
does not follow it) and leaves the old file whole if the write fails half-way.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """`path` holds `text` whole afterwards, written to a new file beside it and renamed into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~UMASK)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def new_folder(base: Path) -> Path:
    """A folder this call made, named `base`, else `base-2`, `base-3`...: never one another process
    made first (mkdir is atomic), so two reports named for the same second each get their own."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")  # itertools.count never ends


def _umask() -> int:
    """The process's umask, read once at import: setting it to read it is not thread-safe (the journal's
    sender writes from a thread, and a file made meanwhile would be world-writable)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()
