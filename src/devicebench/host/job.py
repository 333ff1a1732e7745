"""Whether this process is a rank of a devicebench torchrun job, and what a rank leaves for its launcher.

The launcher (run/launch.py) sets `DEVICEBENCH_JOB_DIR` on its workers and torchrun sets `RANK`; a pod of
a Kubeflow PyTorchJob has RANK too, but not the mark, so it starts the launcher instead of joining.
What crosses the process boundary is that folder (private, removed at the end): rank 0 writes the run
id there as soon as its run exists, and any rank that fails writes one report (`rank-<r>.json`: exit
code, one-line reason, time, whether it is a peer's failure seen through a collective). A rank killed
by a signal writes nothing: torchrun's exit status names it. Torch-free and MLflow-free: `python -m
devicebench` asks this before it imports anything heavy, and a rank other than 0 never loads MLflow.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devicebench.util.files import write_text_atomic

JOB_DIR = "DEVICEBENCH_JOB_DIR"  # the launcher's mark on its workers' environment; torchrun sets the rest
RUN_FILE = "run.json"
# What a collective raises on the ranks that outlive a dead peer: a consequence, never the root cause.
_PEER_SIGNS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "DistBackendError")


def worker_rank(environ: Mapping[str, str] = os.environ) -> int | None:
    """This process's global rank when devicebench's launcher started it, else None."""
    if environ.get(JOB_DIR) and "RANK" in environ:
        return int(environ["RANK"])
    return None


def record_run(run_id: str) -> None:
    """Rank 0, as soon as its run exists: the launcher ends it FAILED if the job fails later."""
    write_text_atomic(Path(os.environ[JOB_DIR]) / RUN_FILE, json.dumps({"run_id": run_id}))


def record_failure(error: BaseException | None, message: str, code: int) -> None:
    """A rank's failure, for the launcher to name (the rank prints nothing: the launcher is one voice)."""
    rank = worker_rank()
    if rank is None:
        return
    kind = type(error).__name__ if error is not None else ""
    peer = any(s in message or s == kind for s in _PEER_SIGNS) or kind in ("DistNetworkError", "DistError")
    report = {"rank": rank, "code": code, "message": message, "time": time.time(), "peer": peer}
    with contextlib.suppress(OSError):
        write_text_atomic(Path(os.environ[JOB_DIR]) / f"rank-{rank}.json", json.dumps(report))


def recorded_run(job: Path) -> str | None:
    """The run id rank 0 recorded in the job folder, or None when it never got that far."""
    path = job / RUN_FILE
    return json.loads(path.read_text())["run_id"] if path.is_file() else None


def failure_reports(job: Path) -> dict[int, dict[str, Any]]:
    """Every rank's failure report in the job folder, by rank (an unreadable one is skipped)."""
    out = {}
    for path in job.glob("rank-*.json"):
        with contextlib.suppress(OSError, ValueError):
            report = json.loads(path.read_text())
            out[int(report["rank"])] = report
    return out
