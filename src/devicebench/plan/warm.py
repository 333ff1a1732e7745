"""A plan's warm server: the interpreter that imported torch, torchvision and MLflow once and forks each
of the plan's runs (util/forkserver.py), when it is worth starting and when it may be forked from.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from devicebench.config.workloads import WORKLOADS
from devicebench.plan.handoff import child_env
from devicebench.tracking.protocol import one_line
from devicebench.util.forkserver import ForkServer

# What a warm server imports once for all of a plan's runs (util/forkserver.py): the run's own module
# (torch, MLflow), every workload, and torchvision whole (its models import torch._dynamo, seconds a process).
# The entry, GitPython and the last group are what every run still imported after the server had loaded
# the rest (docs/measured.md, the warm server). All are imports only: none starts a thread or opens
# anything, so a forked run measures as a fresh one.
WARM_MODULES = (
    "devicebench.run.cli",  # `python -m devicebench`'s entry
    "devicebench.run.workload",
    *(f"devicebench.workloads.{name}" for name in WORKLOADS),
    "torchvision.models",
    "mlflow.pytorch",
    "mlflow.store.tracking.sqlalchemy_store",  # the embedded store's tables
    "devicebench.tracking.git_source",  # GitPython, for each new run's commit tag
    "devicebench.report.command",  # the plan's report, forked from here too
    "mlflow.pyfunc",  # what log_model writes the model with
    "mlflow.tracing.processor.otel",  # what set_tracking_uri resets MLflow's tracer with
    "sqlalchemy.dialects.sqlite",  # the embedded store's engine
    "mlflow.tracking.request_header.registry",  # each request's headers, with a tracking server
    "matplotlib.backends.backend_agg",  # the figures' renderer
)
WARM_ENV = "DEVICEBENCH_WARM_START"  # "0": every run of a plan starts cold, as `python -m devicebench`
# A server costs what one cold run's imports cost, paid beside the suite's own start: a plan of one or
# two runs gains nothing from it, and one refused before it runs (a bad `--resume`) only spends CPU
# that a host with few cores needs for the suite itself.
WARM_MIN_RUNS = 3


@contextmanager
def warm_server(env: dict[str, str], runs: int = WARM_MIN_RUNS) -> Iterator[ForkServer | None]:
    """A fork server for the plan's `runs`, loading while the suite prepares the store; None where
    WARM_ENV=0 asks for cold starts, or for fewer than WARM_MIN_RUNS runs. A run started from it
    measures as a cold one (benchmarks/)."""
    if os.environ.get(WARM_ENV, "1").strip() == "0" or runs < WARM_MIN_RUNS:
        yield None
        return
    server = ForkServer(WARM_MODULES, child_env(env))
    try:
        yield server
    finally:
        server.close()


def usable(server: ForkServer | None) -> ForkServer | None:
    """The server once it has loaded and is safe to fork from (one thread); None, said once on stderr,
    when it is not: the plan's runs then start cold, as they always could."""
    if server is None:
        return None
    try:
        threads = server.ready()
    except OSError as e:
        print(f"suite: no warm server ({one_line(e)}); the runs start cold", file=sys.stderr)
        return None
    if threads != 1:
        print(f"suite: the warm server runs {threads} threads; the runs start cold", file=sys.stderr)
        return None
    return server
