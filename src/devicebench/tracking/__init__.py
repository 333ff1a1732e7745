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
  KILLED (`signals`: a SIGTERM is raised in the run, not once it or the process is on its way out);
* `locks`: a journal belongs to its live process (an OS lock, released when the process dies): `sync`
  replays only journals whose process is gone, and ends a run that died without an end record FAILED;
* `artifacts`: how models are packaged (any batch size, code carried along) and files uploaded;
* `tracker`: `MlflowTracker`, the `Tracker` that writes through all of the above.
* `git_source`: GitPython, loaded once by a plan's warm server for every run's commit tag.

The package itself imports nothing: a caller names the module it needs, so a workload that imports
`tracking.protocol` (the `Tracker` it is handed) loads that module alone. `protocol`, `signals`,
`journal` and `locks` import neither MLflow nor torch (the CLI uses them before it knows its command);
the rest import MLflow, and torch only where a model is packaged (`artifacts`). The public face is:

* `protocol`: `Tracker`, `MemoryTracker`, `null_tracker`, `one_line` (what workloads see);
* `runs.run_context`: one MLflow run around a workload (what the CLI, suite and report use);
* `store`: `check_store`, `configure_mlflow_client`, `ensure_experiment`, `prepare_sqlite_store`;
* `replay.sync_spool` (`devicebench sync`) and `journal.spool_root`.
"""
