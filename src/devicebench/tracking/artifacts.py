"""Files and models on their way to the store: how a model is packaged, uploaded or spooled, and the
artifact repositories that uploads go through; tables named for the UI, metrics linked to models.

Every model goes through `upload_model` (live, or replayed from the spool) or `save_model` (spooled),
both with `model_options`, so a model logged late is packaged exactly like one logged on time. torch
(and MLflow's pytorch flavour, which imports it) is imported only where a model is handled: the report
logs its own run through this package, on hosts where torch need not be installed.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import mlflow
import numpy as np
from mlflow.entities import LoggedModelStatus, Metric
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.store.artifact import artifact_repository_registry
from mlflow.types import TensorSpec
from mlflow.types.schema import Schema
from mlflow.utils import requirements_utils
from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

import devicebench
from devicebench.errors import UsageError
from devicebench.host.context import LoadedModel

_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
LINK_NONE_STEP = -1  # no devicebench metric has a negative step (epochs, sizes and batches count from 0)
_REPO_CACHE_SIZE = 8  # runs whose repository is kept; a process sends to one or two runs at a time
_REPOS: OrderedDict[tuple[str, str], Any] = OrderedDict()
_REPOS_LOCK = threading.Lock()


def _artifact_repo(client: Any, run_id: str) -> Any:
    """The run's artifact repository, looked up once (MlflowClient.log_artifact re-reads the run each call).

    The cache is bounded (least recently used out): a long-lived process, such as a `sync` replaying a
    big spool, must not keep a repository for every run it ever touched.
    """
    key = (client.tracking_uri, run_id)
    with _REPOS_LOCK:
        if key in _REPOS:
            _REPOS.move_to_end(key)
            return _REPOS[key]
    repo = artifact_repository_registry.get_artifact_repository(client.get_run(run_id).info.artifact_uri)
    with _REPOS_LOCK:
        _REPOS[key] = repo
        while len(_REPOS) > _REPO_CACHE_SIZE:
            _REPOS.popitem(last=False)
    return repo


def upload_files(client: Any, run_id: str, files: list[dict[str, Any]], journal_dir: Path) -> None:
    """Upload the journal's staged files of artifact operations; they are independent: side by side."""
    repo = _artifact_repo(client, run_id)
    with ThreadPoolExecutor(max_workers=min(4, len(files))) as pool:
        done = [
            pool.submit(repo.log_artifact, str(journal_dir / f["path"]), f.get("artifact_path"))
            for f in files
        ]
        for future in done:
            future.result()


def mark_tables(client: Any, run_id: str, paths: list[str]) -> None:
    """Name artifacts as tables in the `mlflow.loggedArtifacts` run tag, which the MLflow UI reads to
    render them, as `MlflowClient.log_table` does; an entry already there is not added again."""
    if not paths:
        return
    current = json.loads(client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
    new = [e for e in ({"path": p, "type": "table"} for p in dict.fromkeys(paths)) if e not in current]
    if new:
        client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps(current + new))


def link_metrics(client: Any, run_id: str, model_id: str, points: list[list[Any]]) -> None:
    """Link metric points `[key, value, step, timestamp_ms]` the run already has to a logged model.

    Logged again with the model's id and the same value, step and timestamp, each point stays one row of
    the run's history (the store drops an identical point) and gains its link: repeating this is harmless.
    """
    if points:
        metrics = [Metric(k, float(v), int(ts), int(step), model_id=model_id) for k, v, step, ts in points]
        client.log_batch(run_id, metrics=metrics)


PINNED = ("torch", "torchvision", "numpy", "cloudpickle")  # a logged model's requirements (and mlflow)


# Where a logged model's code starts: the modules whose classes a pickled devicebench model holds.
MODEL_MODULES = ("devicebench.models",)


@contextmanager
def model_options() -> Iterator[dict[str, Any]]:
    """How every model is saved: pickled eager modules, their code carried along, requirements pinned.

    Pickle (not MLflow's graph export) keeps the batch dimension free. `code_paths` ships the part of
    devicebench the pickle can need (`model_code`), so the model loads where devicebench is not
    installed. Explicit requirements spare MLflow's inference of them, which starts a subprocess
    and took seconds of every run (docs/measured.md).
    """
    seed_requirements_map()
    reqs = []
    for dist in PINNED:
        try:
            reqs.append(f"{dist}=={importlib.metadata.version(dist).split('+')[0]}")
        except importlib.metadata.PackageNotFoundError:
            continue
    with tempfile.TemporaryDirectory(prefix="devicebench-model-code-") as tmp:
        package = Path(tmp) / "devicebench"
        root = Path(devicebench.__file__).resolve().parent
        for rel in model_code():
            (package / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, package / rel)
        yield {"serialization_format": "pickle", "code_paths": [str(package)], "pip_requirements": reqs}


@cache
def model_code() -> tuple[str, ...]:
    """The files of devicebench (relative to the package) that MODEL_MODULES import, transitively,
    with every package's `__init__.py` on the way: 11 files, not the whole package's 110. Each file of
    a model is one upload (one request to the server, more across a WAN),
    and the report, plans and tracking code were shipped inside every model for nothing."""
    root = Path(devicebench.__file__).resolve().parent
    seen: dict[str, Path] = {}
    todo = list(MODEL_MODULES)
    while todo:
        name = todo.pop()
        path = _module_file(root, name)
        if name in seen or path is None:
            continue
        seen[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the packages it sits in
        if path.name == "__init__.py" and name in MODEL_MODULES:
            todo += [f"{name}.{f.stem}" for f in path.parent.glob("*.py") if f.stem != "__init__"]
        todo += _devicebench_imports(path)
    return tuple(sorted({str(path.relative_to(root)) for path in seen.values()}))


def _module_file(root: Path, name: str) -> Path | None:
    """`devicebench.a.b`'s file under the package `root`: a/b/__init__.py or a/b.py; None if neither."""
    if name != "devicebench" and not name.startswith("devicebench."):
        return None
    base = root.joinpath(*name.split(".")[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _devicebench_imports(path: Path) -> list[str]:
    """Every devicebench module (or name in one, which may be a module) that `path` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return [n for n in found if n == "devicebench" or n.startswith("devicebench.")]


def seed_requirements_map() -> None:
    """Spare MLflow its scan of every installed distribution when it checks a model's requirements.

    Before it saves a model, MLflow checks the pinned requirements against this environment, and for
    that it first maps every installed distribution's files to its modules
    (`importlib.metadata.packages_distributions()`: torch's and CUDA's file lists, about a second of
    each cold run that logs a model). The check looks a version up by the distribution's
    name and needs a module name only where that fails; the requirements are `PINNED`, whose module
    names are their own. So the map starts as exactly those, unless MLflow has already built its own
    (or renamed the attribute in a later version: then it scans, as before).
    """
    if getattr(requirements_utils, "_MODULES_TO_PACKAGES", False) is None:
        requirements_utils._MODULES_TO_PACKAGES = {d: [d] for d in (*PINNED, "mlflow")}


@contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """MLflow warns on stderr while saving a pickled model, and draws a progress bar there while it
    downloads one (MLflow reads the setting at each download); our stderr carries one line per outcome."""
    logger = logging.getLogger("mlflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    bar = os.environ.get(_PROGRESS_BAR)
    os.environ[_PROGRESS_BAR] = "false"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
        os.environ.pop(_PROGRESS_BAR, None) if bar is None else os.environ.__setitem__(_PROGRESS_BAR, bar)


def portable_model(model: Any, input_example: Any) -> tuple[Any, Any, Any]:
    """A CPU copy of the model, a numpy example of batch >= 2 and a signature with a free batch dimension.

    MLflow's graph export specialises the batch dimension to the example's; pickled eager modules with a
    `-1` batch dimension in the signature accept any batch size.
    """
    import torch  # lazy: only a model needs it; the report logs through this module without torch

    module = getattr(model, "_orig_mod", model)  # unwrap torch.compile
    module = copy.deepcopy(module).to("cpu").float().eval()
    module = module.to(memory_format=torch.contiguous_format)
    example = torch.as_tensor(input_example).detach().to("cpu").float()
    if example.shape[0] < 2:
        example = example.repeat(2, *([1] * (example.dim() - 1)))
    example = example[:2].contiguous()
    with torch.no_grad():
        out = module(example)
    in_spec = TensorSpec(np.dtype(np.float32), (-1, *example.shape[1:]))
    out_spec = TensorSpec(np.dtype(np.float32), (-1, *out.shape[1:]))
    signature = ModelSignature(inputs=Schema([in_spec]), outputs=Schema([out_spec]))
    return module, example.numpy(), signature


def _pytorch_flavor() -> ModuleType:
    """`mlflow.pytorch`, which imports torch."""
    import mlflow.pytorch  # lazy: it imports torch, which the report's own run never loads

    return mlflow.pytorch


def upload_model(run_id: str, module: Any, name: str, signature: Any, input_example: Any = None) -> str:
    """Log a portable module (see `portable_model`) to the run as a logged model called `name`; its id.

    MLflow links to a logged model every run metric logged at its `step` (0 by default), reading each
    metric's whole history to find them: a run's summary figures (`time/*`, `cost/*`) would be shown as
    the model's own, at one request per metric name. The metrics that measure the model are linked by
    `link_metrics`; `LINK_NONE_STEP` is a step no devicebench metric is logged at."""
    with mlflow.start_run(run_id=run_id), _quiet_mlflow(), model_options() as options:
        info = _pytorch_flavor().log_model(
            module,
            name=name,
            signature=signature,
            input_example=input_example,
            step=LINK_NONE_STEP,
            **options,
        )
    return str(info.model_id)


def save_model(module: Any, path: Path, signature: Any) -> None:
    """Save a portable module to a folder of the spool, packaged as `upload_model` would log it."""
    with _quiet_mlflow(), model_options() as options:
        _pytorch_flavor().save_model(module, str(path), signature=signature, **options)


def _logged_model_id(client: Any, run_id: str, name: str) -> str | None:
    """The id of the run's READY logged model called `name`, if it has one; unfinished ones are deleted.

    Replay must be exactly-once, and a `sync` killed after the upload but before it acknowledged the
    operation would otherwise log the model a second time. A PENDING or FAILED model of that name is
    what an interrupted upload leaves: it is removed so the run ends with exactly one.
    """
    experiment_id = client.get_run(run_id).info.experiment_id
    quoted = name.replace("'", "\\'")
    found = client.search_logged_models(
        experiment_ids=[experiment_id], filter_string=f"source_run_id = '{run_id}' AND name = '{quoted}'"
    )
    for m in found:
        if m.status == LoggedModelStatus.READY:
            return str(m.model_id)
    for m in found:
        client.delete_logged_model(m.model_id)
    return None


def log_saved_model(client: Any, run_id: str, path: Path, name: str) -> str:
    """Log a model that was saved to the spool while the store was away, unless a replay already did;
    the logged model's id either way."""
    model_id = _logged_model_id(client, run_id, name)
    if model_id is not None:
        return model_id
    model = _pytorch_flavor().load_model(str(path))
    info = mlflow.models.Model.load(str(path))
    return upload_model(run_id, model, name, info.signature)


# Served models' local copies: kept while the process runs (a model's logged code may be imported
# lazily from its folder), removed at exit (the folders' finalizers run at exit, util/leave.py too).
_SERVED: list[tempfile.TemporaryDirectory] = []


def load_logged_model(uri: str) -> LoadedModel:
    """The logged model at `uri` (`models:/<id>`, `runs:/<run>/<path>`) on the CPU, with one sample's
    shape from its signature; a URI that names no model is one line naming `model_uri`.

    Downloaded once, into a folder of ours: MLflow's loaders, given a URI behind a server, each download
    it into a temporary folder they never remove (get_model_info and load_model: two a run, for good)."""
    folder = tempfile.TemporaryDirectory(prefix="devicebench-served-")
    _SERVED.append(folder)
    try:
        with _quiet_mlflow():
            local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=folder.name)
            if not (Path(local) / mlflow.models.model.MLMODEL_FILE_NAME).is_file():
                raise MlflowException("it holds no MLmodel file")
            info = mlflow.models.Model.load(local)
            module = _pytorch_flavor().load_model(local, map_location="cpu")
    except (MlflowException, OSError) as e:
        said = " ".join(str(getattr(e, "message", e)).split())[:300]
        raise UsageError(f"no loadable model at {uri}: {said}", param="model_uri") from None
    shape = None
    inputs = info.signature.inputs if info.signature is not None else None
    if inputs is not None and inputs.is_tensor_spec():
        dims = inputs.inputs[0].shape
        shape = tuple(int(d) for d in dims[1:]) if dims and all(d > 0 for d in dims[1:]) else None
    return LoadedModel(module.eval(), shape, uri, _served_name(uri, getattr(info, "model_id", None)))


def _served_name(uri: str, model_id: str | None) -> str:
    """What a served model is called: its logged model's name, else the last part of its URI."""
    if model_id:
        with _quiet_mlflow(), contextlib.suppress(MlflowException):
            return str(mlflow.get_logged_model(model_id).name)
    return uri.rstrip("/").rsplit("/", 1)[-1]
