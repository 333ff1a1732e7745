"""`devicebench cifar --nproc N`: the job launcher, which runs the ranks and names the one that failed.

With `nproc > 1` (or `nnodes > 1`) the CLI does not train: it relaunches itself under torchrun
(`torch.distributed.run`, PyTorch's own elastic launcher, in this process) as N workers, each the same
`devicebench <workload>` command. Rank 0 owns the MLflow run (it creates or attaches to it, logs, ends
it); the other ranks never touch the store. This process owns what no rank can see: which rank died
first and why. A rank that fails ends the job (torchrun stops the others within its monitor interval),
and the launcher then ends the run FAILED naming that rank, so no job leaves a RUNNING run behind.

What crosses the process boundary is a job folder (`DEVICEBENCH_JOB_DIR`, private, removed at the end),
read and written by host/job.py: the ranks' side of it is there, so a rank other than 0 never imports
this module, nor MLflow.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from devicebench.errors import Interrupted, UsageError
from devicebench.host.device import check_processes
from devicebench.host.job import JOB_DIR, failure_reports, recorded_run
from devicebench.schema import MAX_TAG_VALUE, tag
from devicebench.tracking.protocol import one_line
from devicebench.tracking.replay import sync_journal
from devicebench.util.children import SAFE_PATH
from devicebench.util.redact import redact


@dataclass(frozen=True)
class Failure:
    """The rank a failed job is blamed on, and why, in one line."""

    rank: int
    reason: str
    code: int


def torchrun_args(nproc: int, nnodes: int, node_rank: int, endpoint: str) -> list[str]:
    """torchrun's flags: one node rendezvouses with itself on a free port (`--standalone`); several meet
    at node 0's host:port with static ranks, so node 0 holds global rank 0 and with it the run (the
    rendezvous id prefixes the keys they meet under: the same on every node, the endpoint is the job's).
    No restarts: a benchmark that silently reran a failed rank would time something else."""
    common = [f"--nproc-per-node={nproc}", "--max-restarts=0", "--monitor-interval=0.1"]
    if nnodes == 1:
        return ["--standalone", *common]
    host, _, port = endpoint.rpartition(":")
    return [
        *common,
        f"--nnodes={nnodes}",
        f"--node-rank={node_rank}",
        "--rdzv-backend=static",
        "--rdzv-id=devicebench",
        f"--master-addr={host}",
        f"--master-port={port}",
    ]


def worker_env(nproc: int, cores: int) -> dict[str, str]:
    """What the launcher adds to its workers' environment: the job folder comes later; here the CPU
    threads each rank may use, split evenly (torchrun would set 1 and print a warning about it)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return {}
    return {"OMP_NUM_THREADS": str(max(1, cores // nproc))}


def launch(workload: str, argv: Sequence[str], cfg: Any, settings: Any, cores: int) -> int:
    """Run the job; the exit code of the CLI (0 done, 3 spooled, 1 or 2 a rank failed, 128+N signal)."""
    job = Path(tempfile.mkdtemp(prefix="devicebench-job-"))  # 0700: it may name the run
    # torchrun builds the ranks' command line (`python -u -m devicebench`): -P goes in as its variable
    env = {JOB_DIR: str(job), **worker_env(cfg.nproc, cores), **SAFE_PATH}
    args = torchrun_args(cfg.nproc, cfg.nnodes, cfg.node_rank, cfg.rdzv_endpoint)
    # torchrun's own folder (error files, per-attempt logs) inside the job's: without --log-dir it
    # makes a torchelastic_* folder in $TMPDIR per job and never removes it
    parsed = torchrun.parse_args([*args, f"--log-dir={job / 'torchrun'}", "-m", "devicebench"])
    parsed.training_script_args = [workload, *argv]  # given to argparse, `--nproc` would read as its own
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # torchrun's workers inherit this process's environment
    try:
        with _quiet_torchrun():
            torchrun.run(parsed)  # what the `torchrun` command does with these flags, in this process
        return 0
    except ChildFailedError as e:
        failure = blame(
            failure_reports(job), {r: (f.exitcode, f.signal_name()) for r, f in e.failures.items()}
        )
        return _fail_job(settings, job, failure, cfg.nproc * cfg.nnodes)
    except SignalException as e:  # this process was told to stop: torchrun stopped the ranks with it
        raise Interrupted(int(e.sigval)) from None
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        shutil.rmtree(job, ignore_errors=True)


@contextlib.contextmanager
def _quiet_torchrun() -> Any:
    """torchrun's agent logs each failure as a page of text at ERROR; our line says it once."""
    loggers = [logging.getLogger(n) for n in ("torch.distributed.elastic", "torch.distributed.run")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def blame(reports: Mapping[int, Mapping[str, Any]], exits: Mapping[int, tuple[int, str]]) -> Failure:
    """The rank that failed first on its own: a rank's own error before one killed by a signal before
    one that only saw its peer go (a collective's broken connection), earliest first within each. Ranks
    that all failed alike (the same missing data on every rank) are named by the lowest of them."""
    own = sorted((r["time"], rank) for rank, r in reports.items() if not r.get("peer"))
    if own:
        first = reports[own[0][1]]["message"]
        rank = min(rank for _, rank in own if reports[rank]["message"] == first)
        return Failure(rank, first, int(reports[rank]["code"]))
    for rank, (code, sig) in sorted(exits.items()):
        if rank not in reports and code < 0:
            return Failure(rank, f"killed by {sig}", 1)
    if reports:
        rank = min(reports, key=lambda k: reports[k]["time"])
        return Failure(rank, reports[rank]["message"], int(reports[rank]["code"]))
    rank, (code, _) = min(exits.items())
    return Failure(rank, f"exited with code {code} without a report", 1)


def _fail_job(settings: Any, job: Path, failure: Failure, world_size: int) -> int:
    """Say which rank failed, and end the run FAILED with it (a spooled end exits 3 as a run would)."""
    who = f"rank {failure.rank} of {world_size}"
    if failure.code == 3 and failure.rank == 0:  # rank 0 finished but could not deliver: its own words
        print(f"devicebench: error: {failure.reason}", file=sys.stderr)
        return 3
    run_id = recorded_run(job)
    ended = f"; run {run_id} ended FAILED" if run_id and _end_failed(settings, run_id, who, failure) else ""
    print(f"devicebench: error: {redact(f'{who} failed: {failure.reason}{ended}')}", file=sys.stderr)
    return failure.code if failure.code in (1, 2) else 1


def _end_failed(settings: Any, run_id: str, who: str, failure: Failure) -> bool:
    """The run FAILED with the rank and reason; a journal rank 0 left behind (killed before it could
    send everything) is replayed first, so nothing it measured is lost and nothing stays RUNNING."""
    journal = settings.spool_dir / run_id
    if journal.is_dir():
        sync_journal(journal, settings.tracking_uri)
    try:
        client = MlflowClient(settings.tracking_uri)
        client.set_tag(run_id, tag("error"), f"{who}: {failure.reason}"[:MAX_TAG_VALUE])
        client.log_param(run_id, tag("failed_rank"), str(failure.rank))  # a fact: schema.RUN_TAGS
        client.set_terminated(run_id, "FAILED")
    except Exception as e:  # the store went away: rank 0's journal (if any) still ends the run on sync
        print(f"devicebench: run {run_id} could not be marked FAILED: {one_line(e)}", file=sys.stderr)
        return False
    return True


def check_job(cfg: Any, device: Any) -> None:
    """What a job of several processes cannot do, refused before any process starts (exit 2)."""
    if device.type == "cuda" and ":" in cfg.device:
        raise UsageError(
            f"{cfg.device} names one GPU; with nproc={cfg.nproc} use device=cuda "
            "(each process takes the GPU of its local rank; CUDA_VISIBLE_DEVICES picks which)",
            param="device",
        )
    check_processes(device, cfg.nproc)
