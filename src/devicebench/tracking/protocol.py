"""What a workload sees of tracking: the `Tracker` protocol, the in-memory tracker and `one_line`.

Workloads import this module and nothing else of the package: it never imports mlflow (a test checks
`sys.modules`), so a workload, its unit tests and untracked benchmark baselines do not pay for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from devicebench.errors import UsageError
from devicebench.schema import MAX_TAG_VALUE
from devicebench.util.redact import redact


class Tracker(Protocol):
    """What a workload may do with the store. Values are plain Python numbers (no tensors)."""

    run_id: str | None

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...
    def set_tags(self, tags: Mapping[str, str]) -> None: ...
    def log_dict(self, obj: Any, artifact_file: str) -> None: ...
    def log_text(self, text: str, artifact_file: str) -> None: ...
    def log_figure(self, figure: Any, artifact_file: str) -> None: ...
    def log_image(self, image: Any, artifact_file: str) -> None: ...
    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None: ...
    def log_table(self, data: Mapping[str, Sequence[Any]], artifact_file: str) -> None: ...
    def log_model(self, model: Any, name: str, input_example: Any, metrics: Sequence[str] = ()) -> str | None:
        """Log `model` as `name`; `metrics` names metrics this run already logged that measure it
        (its final evaluation): their latest points are linked to the logged model. Its URI
        (`models:/<id>`), or None where the store does not hold it yet (spooled) or it was not logged."""
        ...


def one_line(exc: BaseException) -> str:
    """An exception as one line: what a user reads on stderr and in the `devicebench.error` tag, with
    any password redacted (a driver's error quotes the URI it could not open)."""
    text = redact(" ".join(str(exc).split())) or type(exc).__name__
    if not isinstance(exc, UsageError):
        text = f"{type(exc).__name__}: {text}"
    return text[:MAX_TAG_VALUE]


@dataclass
class MemoryTracker:
    """Keeps everything in memory: for unit tests of workloads and for untracked baselines in benchmarks."""

    run_id: str | None = None
    metrics: list[tuple[str, float, int | None]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    model_metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # model name → linked metrics
    tables: set[str] = field(default_factory=set)  # which artifacts are tables

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.metrics.extend((k, float(v), step) for k, v in metrics.items())

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.tags.update({k: str(v) for k, v in tags.items()})

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self.artifacts[artifact_file] = obj

    def log_text(self, text: str, artifact_file: str) -> None:
        self.artifacts[artifact_file] = text

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        self.artifacts[artifact_file] = figure

    def log_image(self, image: Any, artifact_file: str) -> None:
        self.artifacts[artifact_file] = image

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        name = Path(local_path).name
        self.artifacts[f"{artifact_path}/{name}" if artifact_path else name] = Path(local_path)

    def log_table(self, data: Mapping[str, Sequence[Any]], artifact_file: str) -> None:
        self.artifacts[artifact_file] = {k: list(v) for k, v in data.items()}
        self.tables.add(artifact_file)

    def log_model(self, model: Any, name: str, input_example: Any, metrics: Sequence[str] = ()) -> str | None:
        self.models[name] = (model, input_example)
        self.model_metrics[name] = {key: self.values(key)[-1] for key in metrics if self.values(key)}
        return None

    def values(self, key: str) -> list[float]:
        """Every value logged under `key`, in order (a test helper)."""
        return [v for k, v, _ in self.metrics if k == key]


class NullTracker:
    """The one tracker that keeps nothing: what a rank other than rank 0 logs to (its figures are the
    job's, logged once), a tuning trial, and the untracked baseline of the overhead benchmarks."""

    run_id: str | None = None

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def set_tags(self, tags: Mapping[str, str]) -> None:
        pass

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        pass

    def log_text(self, text: str, artifact_file: str) -> None:
        pass

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        pass

    def log_image(self, image: Any, artifact_file: str) -> None:
        pass

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        pass

    def log_table(self, data: Mapping[str, Sequence[Any]], artifact_file: str) -> None:
        pass

    def log_model(self, model: Any, name: str, input_example: Any, metrics: Sequence[str] = ()) -> str | None:
        return None


def null_tracker() -> Tracker:
    """A tracker that records nothing (NullTracker)."""
    return NullTracker()
