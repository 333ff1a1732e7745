"""`MlflowTracker`: the `Tracker` of a run in an MLflow store.

Every operation is first written to the run's journal (the spool) and then sent by the background
`Sender`. A server that blinks mid-run loses nothing (the sender retries); a server gone for good at the
end leaves a complete journal that `devicebench sync` replays later, exactly once.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
from mlflow.tracking import MlflowClient

from devicebench.config.settings import Settings
from devicebench.schema import MAX_PARAM_VALUE, MAX_TAG_VALUE, is_tag, tag
from devicebench.tracking.artifacts import portable_model, save_model, upload_model
from devicebench.tracking.journal import Journal, spool_root, unwritable
from devicebench.tracking.protocol import one_line
from devicebench.tracking.sender import Sender


class MlflowTracker:
    """A run in an MLflow store, written through a journal by one background sender thread."""

    def __init__(
        self, settings: Settings, run_id: str, journal: Journal | None = None, log_models: bool = True
    ) -> None:
        self.settings = settings
        self.run_id = run_id
        self.log_models = log_models  # False: a plan logs this config's model with its first repeat only
        self.artifacts_s = 0.0  # seconds spent staging files and logging models: a run's fixed cost
        self.client = MlflowClient(settings.tracking_uri)
        if journal is None:
            journal = Journal(spool_root(settings), run_id, settings.tracking_uri)
        else:
            journal.bind(run_id, settings.tracking_uri)
        self.journal = journal
        self._system_monitor: Any = None
        # why a run that ran to its end is not whole (a plan with failed items): it then ends FAILED with it
        self.incomplete: str | None = None
        # The latest point of every metric (value, step, timestamp ms): what `log_model` links to a model.
        self._latest: dict[str, tuple[float, int, int]] = {}
        self._sender = Sender(self.client, run_id, journal, settings.flush_interval_s)

    @property
    def last_error(self) -> str | None:
        """The last failure to reach the store, in one line (None while every send succeeded)."""
        return self._sender.last_error

    # -- the Tracker protocol -------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        values = {k: float(v) for k, v in metrics.items()}
        ts = int(time.time() * 1000)
        self._latest.update({k: (v, step or 0, ts) for k, v in values.items()})
        self._sender.enqueue({"op": "metrics", "values": values, "step": step, "ts": ts})

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """The run's tags and facts: what `schema.is_tag` names a tag is one, every other devicebench fact
        is logged as a param of the same name (schema.RUN_TAGS says why), so a workload need not know
        which is which. A fact is set once: a second value for it is not logged (the store's params are
        written once)."""
        values = {k: str(v) for k, v in tags.items()}
        kept = {k: v[:MAX_TAG_VALUE] for k, v in values.items() if is_tag(k)}
        facts = {k: v[:MAX_PARAM_VALUE] for k, v in values.items() if not is_tag(k)}
        if kept:
            self._sender.enqueue({"op": "tags", "values": kept})
        if facts:
            self._sender.enqueue({"op": "params", "values": facts})

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._sender.enqueue({"op": "params", "values": {k: str(v) for k, v in params.items()}})

    def _stage(self, artifact_file: str) -> Path:
        path = self.journal.files / artifact_file
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _log_file(self, artifact_file: str, write: Callable[[Path], object], table: bool = False) -> None:
        """The one way a file becomes an artifact: staged in the journal by `write`, then queued. A spool
        that fills while staging is the journal's one line (a raw `OSError 28` before), and the run
        ends FAILED."""
        try:
            with self._timed():
                path = self._stage(artifact_file)
                write(path)
        except OSError as e:
            raise unwritable(self.journal.dir, e) from None
        rel = path.relative_to(self.journal.files)
        parent = str(rel.parent) if str(rel.parent) != "." else None
        op = {"op": "artifact", "path": str(Path("files") / rel), "artifact_path": parent}
        self._sender.enqueue({**op, "table": rel.as_posix()} if table else op)

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        """Add the time of the block to `artifacts_s` (what `time/artifacts_s` reports)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.artifacts_s += time.perf_counter() - t0

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        if artifact_file.endswith((".yaml", ".yml")):
            text = yaml.safe_dump(obj, sort_keys=False)
        else:
            text = json.dumps(obj, indent=2, default=str)
        self._log_file(artifact_file, lambda path: path.write_text(text))

    def log_text(self, text: str, artifact_file: str) -> None:
        self._log_file(artifact_file, lambda path: path.write_text(text))

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """A matplotlib figure (a chart), saved as its file name's format says."""
        self._log_file(artifact_file, lambda path: figure.savefig(path, dpi=110, bbox_inches="tight"))

    def log_image(self, image: Any, artifact_file: str) -> None:
        """A Pillow image (a picture drawn without matplotlib: train/figures.py), saved as its name says."""
        self._log_file(artifact_file, image.save)

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        src = Path(local_path)

        def copy(dest: Path) -> None:
            if src.is_dir():
                shutil.copytree(src, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dest)

        self._log_file(f"{artifact_path}/{src.name}" if artifact_path else src.name, copy)

    def log_table(self, data: Mapping[str, Sequence[Any]], artifact_file: str) -> None:
        """A table the MLflow UI renders (Artifacts tab, and the Evaluation view across runs), in
        MLflow's own format: pandas' "split" JSON, named a table by the `mlflow.loggedArtifacts` run tag.

        `MlflowClient.log_table` is not called: it appends rows to a file that exists, so a replayed
        operation would double the table. The file goes through the journal like any other and the tag
        is merged when it is sent (`artifacts.mark_tables`), so a replay adds neither twice.
        """
        if not artifact_file.endswith(".json"):
            raise ValueError(f"a table is a .json artifact, not {artifact_file!r}")
        frame = pd.DataFrame({k: list(v) for k, v in data.items()})

        def write(path: Path) -> None:
            frame.to_json(path, orient="split", index=False, date_format="iso")  # as MlflowClient.log_table

        self._log_file(artifact_file, write, table=True)

    def log_model(self, model: Any, name: str, input_example: Any, metrics: Sequence[str] = ()) -> str | None:
        """Log a torch model that accepts any batch size, with the latest points of `metrics` linked to
        it (MLflow shows them on the model's page); spool it when the store is away.

        The points linked are the ones already logged (same value, step and timestamp), so the run's
        history gains no second point: the store keeps one row per point and adds only the link.
        """
        with self._timed():
            return self._log_model(model, name, input_example, metrics)

    def _log_model(self, model: Any, name: str, input_example: Any, metrics: Sequence[str]) -> str | None:
        if not self.log_models:  # said on the run, so a missing model is not taken for a lost one
            self.set_tags({tag("model.logged"): "no: its plan logs the model with the first repeat only"})
            return None
        points = [[k, *self._latest[k]] for k in metrics if k in self._latest]
        module, example, signature = portable_model(model, input_example)
        if self._sender.drain(self.settings.final_flush_s, while_reachable=True):
            try:
                model_id = upload_model(self.run_id, module, name, signature, example)
            except Exception as e:  # the store went away between drain and upload: spool it
                self._sender.last_error = one_line(e)
            else:
                if points:
                    self._sender.enqueue({"op": "link", "model_id": model_id, "points": points})
                return f"models:/{model_id}"
        path = self._stage(f"models/{name}")
        shutil.rmtree(path, ignore_errors=True)
        save_model(module, path, signature)
        op = {"op": "model", "path": str(Path("files") / "models" / name), "name": name, "points": points}
        self._sender.enqueue(op)
        return None

    def start_system_metrics(self, interval_s: float = 5.0) -> None:
        """MLflow's own CPU/memory/GPU (nvidia-ml-py) sampler, for runs that ask for it."""
        self._system_monitor = SystemMetricsMonitor(
            self.run_id, sampling_interval=interval_s, tracking_uri=self.settings.tracking_uri
        )
        self._system_monitor.start()

    def drain(self, timeout_s: float, while_reachable: bool = False) -> bool:
        """Wait until everything logged so far reached the store; False if it did not in time (or, with
        `while_reachable`, as soon as the store is found away: `close` still tries to the end)."""
        return self._sender.drain(timeout_s, while_reachable)

    def close(self, status: str, error: str | None = None) -> bool:
        """End the run; True when every operation reached the store, False when it was spooled."""
        if self._system_monitor is not None:
            with contextlib.suppress(Exception):  # a sampler failure must not hide the run's own status
                self._system_monitor.finish()
        if error:
            self.set_tags({tag("error"): error})
        self._sender.enqueue({"op": "end", "status": status, "ts": int(time.time() * 1000)})
        join_s = max(self.settings.store_timeout_s, 1.0) + 5
        delivered = self._sender.finish(self.settings.final_flush_s, join_s)
        if delivered:
            self.journal.remove()
        else:  # a sender still inside a request could write after `sync` took over: keep the lock until exit
            self.journal.close(release=not self._sender.alive())
        return delivered
