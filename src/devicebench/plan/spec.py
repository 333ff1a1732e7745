"""Read an experiment plan (experiments/*.yaml): validate it whole, then expand it into runs.

Users rarely want one run: they want "the CPU vs GPU study" or "the nightly check". A plan says that
once. It is validated whole before anything runs (a typo in run 9 must not surface after runs 1-8 took
an hour), with the workloads' own config classes and nothing heavier: reading a plan imports no torch.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devicebench.config.fields import build_config, field_names
from devicebench.config.workloads import CONFIGS, TRAINING_WORKLOADS, WORKLOADS
from devicebench.errors import UsageError
from devicebench.report.cli import parse_threshold
from devicebench.schema import MAX_EXPERIMENT, check_device_spelling
from devicebench.util.children import python_argv
from devicebench.util.yamlfile import load_capped

PLAN_KEYS = {
    "name",
    "description",
    "experiment",
    "repeats",
    "skip_unavailable",
    "tune",
    "tune_precision",
    "log_models",
    "time_limit_s",
    "runs",
    "report",
}
# Which repeats of an item log their model: `all`, or `first` (a model's logging is a large share of a
# short run, and repeats of one config train the same network; the figures are logged for every repeat)
LOG_MODELS = ("all", "first")
RUN_KEYS = {"entry", "params", "matrix", "repeats", "name", "time_limit_s"}
# How long one run of a plan may take, start to exit, before the suite stops it (its run ends KILLED and
# the plan goes on): a run that hangs (a user's thread the exit waits for) must not hold a nightly plan
# for good. Generous, since a CPU side on real data can take hours; a plan or one of its runs sets its own.
DEFAULT_TIME_LIMIT_S = 4 * 3600.0
REPORT_KEYS = {"baseline", "threshold"}
# Plans are a page of YAML; these caps turn a hostile or mistyped one into one line instead of minutes of
# CPU and gigabytes of memory (a billion-laughs alias tree, `repeats: 1000000000`).
MAX_PLAN_BYTES = 1 << 20
MAX_EXPANDED = 4_000_000  # nodes plus scalar characters, counted as if every alias were copied out
MAX_RUNS = 10_000
MAX_NAME = 100
# A plan name becomes a report folder, part of a tag and a quoted filter: a name, never a path or a quote.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class PlannedRun:
    """One expanded run: an entry point, its parameters (as strings) and which repeat it is."""

    index: int
    entry: str
    params: dict[str, str]
    repeat: int
    repeats: int
    tune: bool = False  # the plan's `tune`, for a run of a workload tuning knows (tuning.py)
    tune_precision: bool = False  # the plan's `tune_precision`: its tuning may try reduced precision
    log_model: bool = True  # False: a later repeat of `log_models: first` (logs it while none has finished)
    time_limit_s: float = DEFAULT_TIME_LIMIT_S  # past it the suite stops the run (items.py)

    @property
    def item_id(self) -> str:
        """Stable identity of this run within its plan, for --resume."""
        blob = json.dumps(
            [self.entry, sorted(self.params.items()), self.repeat, *(["tune"] if self.tune else [])]
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def config_id(self) -> str:
        """What its repeats share: the item but for which repeat it is (`log_models: first`)."""
        blob = json.dumps([self.entry, sorted(self.params.items()), *(["tune"] if self.tune else [])])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        shown = " ".join(f"{k}={v}" for k, v in self.params.items())
        rep = f" (repeat {self.repeat}/{self.repeats})" if self.repeats > 1 else ""
        return f"{'tune ' if self.tune else ''}{self.entry} {shown}{rep}".strip()

    def argv(self) -> list[str]:
        """`devicebench <entry> --k v ...`, or `devicebench tune <entry> ...` for a tuned side."""
        args = python_argv("-m", "devicebench", *(("tune",) if self.tune else ()), self.entry)
        args += ["--tune_precision"] if self.tune and self.tune_precision else []
        for k, v in self.params.items():
            args += [f"--{k}", v]
        return args


@dataclass
class Plan:
    name: str
    path: Path
    experiment: str | None
    skip_unavailable: bool
    runs: list[PlannedRun]
    baseline: str = "none"
    threshold: float = 0.10
    report: bool = True
    description: str = ""
    log_models: str = "all"  # LOG_MODELS: `first` is decided as the plan runs (suite.py)
    meta: dict[str, Any] = field(default_factory=dict)


def _err(path: Path, where: str, message: str) -> UsageError:
    return UsageError(f"plan {path}: {where}: {message}")


class _PlanTooBig(yaml.YAMLError):
    """Raised by _PlanLoader while composing: the document would expand past MAX_EXPANDED, or loops."""


class _PlanLoader(yaml.SafeLoader):
    """SafeLoader that measures a document before constructing it.

    Aliases make a small file stand for an enormous (or, with an anchor inside itself, infinite) tree.
    PyYAML builds such a tree as shared references, so the cost comes later, when anything walks it;
    measuring the composed nodes, each distinct node once, finds it in time proportional to the file.
    """

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node)
        return node


def _expanded_size(root: yaml.Node) -> int:
    """Nodes plus scalar characters of `root` with every alias copied out; _PlanTooBig past the cap."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the current path from the root: meeting one again is a loop
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            own = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            sizes[key] = 1 + own + sum(sizes[id(c)] for c in children(node))
            if sizes[key] > MAX_EXPANDED:
                raise _PlanTooBig(
                    f"its aliases expand to more than {MAX_EXPANDED:,} nodes and characters; "
                    "write the values out or use fewer nested aliases"
                )
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            mark = node.start_mark
            raise _PlanTooBig(f"line {mark.line + 1}: an anchor refers to itself (an endless structure)")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in sizes)
    return sizes[id(root)]


def _read_yaml(path: Path) -> Any:
    """The plan's document, within the size, alias and nesting caps; every failure one line."""
    return load_capped(
        path, MAX_PLAN_BYTES, "a plan", _PlanLoader, _PlanTooBig, lambda where, msg: _err(path, where, msg)
    )


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(_scalar(v) for v in value)
    return str(value)


def load_plan(path: str | Path, data: str | None = None) -> Plan:
    """Read, validate and expand a plan; every problem is one line naming the file, the key and what is allowed."""
    path = Path(path)
    doc = _plan_doc(path)
    header = _header(doc, path)
    report = _report_section(doc.get("report", {}), path)
    default_repeats = _positive_int(doc.get("repeats", 1), path, "repeats")
    skip, tune = doc.get("skip_unavailable", False), doc.get("tune", False)
    precise = doc.get("tune_precision", False)
    for key, value in (("skip_unavailable", skip), ("tune", tune), ("tune_precision", precise)):
        if not isinstance(value, bool):
            raise _err(path, key, "must be true or false")
    log_models = doc.get("log_models", "all")
    if log_models not in LOG_MODELS:
        raise _err(path, "log_models", f"{log_models!r} is not allowed; allowed: {', '.join(LOG_MODELS)}")
    specs = doc.get("runs")
    if not isinstance(specs, list) or not specs:
        raise _err(path, "runs", "required, a non-empty list of {entry, params, matrix, repeats}")
    _count_runs(specs, default_repeats, path)
    plan_limit = _time_limit(doc.get("time_limit_s", DEFAULT_TIME_LIMIT_S), path, "time_limit_s")
    planned: list[PlannedRun] = []
    for i, spec in enumerate(specs):
        for values, repeats in _expand(spec, f"runs[{i}]", default_repeats, data, path):
            limit = _time_limit(spec.get("time_limit_s", plan_limit), path, f"runs[{i}].time_limit_s")
            for r in range(1, repeats + 1):
                logs = log_models == "all" or r == 1
                planned.append(
                    PlannedRun(
                        len(planned) + 1,
                        spec["entry"],
                        values,
                        r,
                        repeats,
                        log_model=logs,
                        time_limit_s=limit,
                    )
                )
            if tune and spec["entry"] in TRAINING_WORKLOADS and _one_process(values):
                # beside the side as configured, once: the same work on this device at its best (tuning
                # measures one process, so a job of several has no tuned item)
                item = PlannedRun(
                    len(planned) + 1,
                    spec["entry"],
                    values,
                    1,
                    1,
                    tune=True,
                    tune_precision=precise,
                    time_limit_s=limit,
                )
                planned.append(item)
    return Plan(path=path, runs=planned, skip_unavailable=skip, log_models=log_models, **header, **report)


def _plan_doc(path: Path) -> dict[str, Any]:
    """The plan file's top-level mapping, with no key a plan does not have."""
    if not path.is_file():
        raise UsageError(f"plan {path}: no such file (plans live in experiments/)")
    doc = _read_yaml(path)
    if not isinstance(doc, dict):
        raise _err(path, "top level", "must be a mapping with name and runs")
    unknown = sorted(set(doc) - PLAN_KEYS)
    if unknown:
        raise _err(path, unknown[0], f"unknown key; allowed: {', '.join(sorted(PLAN_KEYS))}")
    return doc


def _one_process(values: dict[str, Any]) -> bool:
    return all(str(values.get(k, 1)).strip() == "1" for k in ("nproc", "nnodes"))


def _header(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """name, experiment and description, each checked."""
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _err(path, "name", "required, a non-empty string")
    name = name.strip()
    if len(name) > MAX_NAME or not NAME_RE.fullmatch(name):
        raise _err(
            path,
            "name",
            f"{name[:60]!r} is not a plan name; use up to {MAX_NAME} letters, digits, '.', '_' or '-' "
            "(it names the report folder, so no '/', spaces or quotes)",
        )
    experiment = doc.get("experiment")
    if experiment is not None and (
        not isinstance(experiment, str) or not experiment.strip() or len(experiment) > MAX_EXPERIMENT
    ):
        raise _err(
            path, "experiment", f"must be an experiment name, a string of 1-{MAX_EXPERIMENT} characters"
        )
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise _err(path, "description", "must be a string")
    return {
        "name": name,
        "experiment": experiment.strip() if experiment else None,
        "description": description,
    }


def _expand(
    spec: Any, where: str, default_repeats: int, data: str | None, path: Path
) -> Iterator[tuple[dict[str, str], int]]:
    """One `runs:` entry checked and expanded over its matrix: (params, repeats) per combination."""
    if not isinstance(spec, dict):
        raise _err(path, where, "must be a mapping with an entry")
    bad = sorted(set(spec) - RUN_KEYS)
    if bad:
        raise _err(path, f"{where}.{bad[0]}", f"unknown key; allowed: {', '.join(sorted(RUN_KEYS))}")
    entry = spec.get("entry")
    if entry not in WORKLOADS:
        raise _err(path, f"{where}.entry", f"unknown entry point {entry!r}; allowed: {', '.join(WORKLOADS)}")
    params = spec.get("params") or {}
    matrix = spec.get("matrix") or {}
    if not isinstance(params, dict) or not isinstance(matrix, dict):
        raise _err(path, where, "params and matrix must be mappings")
    for key, values in matrix.items():
        if not isinstance(values, list) or not values:
            raise _err(path, f"{where}.matrix.{key}", "must be a non-empty list of values")
    repeats = _positive_int(spec.get("repeats", default_repeats), path, f"{where}.repeats")
    base = {k: _scalar(v) for k, v in params.items()}
    if data == "real":  # the workload's real dataset, where it has one (its config's REAL_DATA)
        base.update(CONFIGS[entry].REAL_DATA)
    for combo in itertools.product(*matrix.values()) if matrix else [()]:
        values = {**base, **{k: _scalar(v) for k, v in zip(matrix, combo, strict=True)}}
        _check_params(entry, values, matrix, where, path)
        yield values, repeats


def _check_params(entry: str, values: dict[str, str], matrix: dict[str, Any], where: str, path: Path) -> None:
    """The parameters as the workload's own config would take them, before any run starts."""
    config_cls = CONFIGS[entry]
    known = field_names(config_cls)
    for key in values:
        if key not in known:
            section = "matrix" if key in matrix else "params"
            raise _err(
                path, f"{where}.{section}.{key}", f"unknown parameter of {entry}; known: {', '.join(known)}"
            )
    try:
        build_config(config_cls, values)
        check_device_spelling(values.get("device", "cpu"))
    except UsageError as e:
        raise _err(path, where, str(e)) from None


def _report_section(report: Any, path: Path) -> dict[str, Any]:
    """`report:` checked the way `compare` will check it, before any run (not after all of them)."""
    if report is False:
        return {"report": False}
    if not isinstance(report, dict):
        raise _err(path, "report", "must be a mapping {baseline, threshold} or false")
    bad = sorted(set(report) - REPORT_KEYS)
    if bad:
        raise _err(path, f"report.{bad[0]}", f"unknown key; allowed: {', '.join(sorted(REPORT_KEYS))}")
    baseline = str(report.get("baseline", "none"))
    if baseline not in ("none", "previous"):
        raise _err(path, "report.baseline", "must be none or previous")
    raw = report.get("threshold", 0.10)
    try:
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise UsageError("not a number")
        threshold = parse_threshold(str(raw))
    except UsageError:
        raise _err(
            path, "report.threshold", f"{raw!r} is not allowed; a fraction in (0, 1] such as 0.1, or 10%"
        ) from None
    return {"report": True, "baseline": baseline, "threshold": threshold}


def _count_runs(specs: list[Any], default_repeats: int, path: Path) -> None:
    """Refuse a plan that expands past MAX_RUNS before expanding it (matrix sizes times repeats)."""
    total = 0
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict):
            continue  # the expansion loop names it
        matrix = spec.get("matrix") or {}
        combos = 1
        if isinstance(matrix, dict):
            for values in matrix.values():
                combos *= len(values) if isinstance(values, list) and values else 1
        repeats = spec.get("repeats", default_repeats)
        repeats = repeats if isinstance(repeats, int) and not isinstance(repeats, bool) and repeats > 0 else 1
        total += combos * repeats
        if total > MAX_RUNS:
            raise _err(
                path,
                f"runs[{i}]",
                f"the plan expands to more than {MAX_RUNS:,} runs (matrix values times repeats); split it",
            )


def _positive_int(value: Any, path: Path, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _err(path, where, f"must be a whole number >= 1, not {value!r}")
    return value


MAX_TIME_LIMIT_S = 7 * 86400.0  # a week: past that a limit is a typo (seconds for minutes), not a plan


def _time_limit(value: Any, path: Path, where: str) -> float:
    """A run's time limit in seconds: a number above 0 and at most a week."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= MAX_TIME_LIMIT_S
    if not ok:
        raise _err(
            path,
            where,
            f"must be a number of seconds above 0 and at most {MAX_TIME_LIMIT_S:.0f}, not {value!r}",
        )
    return float(value)
