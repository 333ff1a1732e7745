"""The one MLflow layer: runs, tags, params, batched asynchronous metrics, artifacts, models, status.

Workloads never import mlflow; they receive a `Tracker` (`protocol`). This package is the only writer to
the store, so the rules that keep a measurement trustworthy live here once, a module each:

* `store`: the store is checked *before* any work, and an unreachable one fails fast with its URI named;
* `sender`: metrics are queued and sent in batches by a background thread, never one round trip per
  step, so tracking does not slow the workload it measures;
* `journal`: every operation is first written to a local journal (the spool). A server that blinks
  mid-run loses nothing (the sender retries); a server gone for good at the end leaves a complete spool
  that `devicebench sync` (`replay`) replays later, exactly once;
* `runs`: any exception marks the run FAILED with a one-line `devicebench.error` tag; a signal marks it
  KILLED;
* `locks`: a journal belongs to its live process (an OS lock, released when the process dies): `sync`
  replays only journals whose process is gone, and ends a run that died without an end record FAILED;
* `artifacts`: how models are packaged (any batch size, code carried along) and files uploaded;
* `tracker`: `MlflowTracker`, the `Tracker` that writes through all of the above.

Importing the package does not import mlflow (each function imports it when it needs it), so callers
that only want `Tracker` or `TAG_PREFIX` stay light.
"""

from __future__ import annotations

from devicebench.tracking.artifacts import _model_options, _portable_model
from devicebench.tracking.journal import Journal, spool_root
from devicebench.tracking.protocol import TAG_PREFIX, MemoryTracker, Tracker, null_tracker, one_line
from devicebench.tracking.replay import DIED_WITHOUT_END, SyncOutcome, send_ops, sync_spool
from devicebench.tracking.runs import _install_signal_handlers, run_context
from devicebench.tracking.store import (
    SQLITE_CREATE_TIMEOUT_S,
    check_store,
    configure_mlflow_client,
    ensure_experiment,
    prepare_sqlite_store,
)
from devicebench.tracking.tracker import MlflowTracker

__all__ = [
    "DIED_WITHOUT_END",
    "SQLITE_CREATE_TIMEOUT_S",
    "TAG_PREFIX",
    "Journal",
    "MemoryTracker",
    "MlflowTracker",
    "SyncOutcome",
    "Tracker",
    "_install_signal_handlers",
    "_model_options",
    "_portable_model",
    "check_store",
    "configure_mlflow_client",
    "ensure_experiment",
    "null_tracker",
    "one_line",
    "prepare_sqlite_store",
    "run_context",
    "send_ops",
    "spool_root",
    "sync_spool",
]
