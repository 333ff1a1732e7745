"""Run an experiment plan (experiments/*.yaml): every expanded run in a fresh process, then the report.

Users rarely want one run: they want "the CPU vs GPU study" or "the nightly check". A plan says that
once. It is validated whole before anything runs (a typo in run 9 must not surface after runs 1-8 took
an hour). Each run gets its own process, so GPU memory, allocator caches and cuDNN autotuning cannot
leak from one measurement into the next; a failed run does not stop the plan.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devicebench.errors import UsageError
from devicebench.handoff import Handoff, child_env
from devicebench.schema import WORKLOADS, tag
from devicebench.settings import redact_uri

PLAN_KEYS = {"name", "description", "experiment", "repeats", "skip_unavailable", "runs", "report"}
RUN_KEYS = {"entry", "params", "matrix", "repeats", "name"}
REPORT_KEYS = {"baseline", "threshold"}
ENTRIES = WORKLOADS
# Plans are a page of YAML; these caps turn a hostile or mistyped one into one line instead of minutes of
# CPU and gigabytes of memory (a billion-laughs alias tree, `repeats: 1000000000`).
MAX_PLAN_BYTES = 1 << 20
MAX_EXPANDED = 4_000_000  # nodes plus scalar characters, counted as if every alias were copied out
MAX_RUNS = 10_000
MAX_NAME = 100
MAX_EXPERIMENT = 500  # MLflow's limit on an experiment name
# A plan name becomes a report folder, part of a tag and a quoted filter: a name, never a path or a quote.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
REAL_DATA = {
    "cifar": {"data": "cifar10", "download": "true"},
    "unet": {"data": "voc2012", "download": "true"},
}


@dataclass(frozen=True)
class PlannedRun:
    """One expanded run: an entry point, its parameters (as strings) and which repeat it is."""

    index: int
    entry: str
    params: dict[str, str]
    repeat: int
    repeats: int

    @property
    def item_id(self) -> str:
        """Stable identity of this run within its plan, for --resume."""
        blob = json.dumps([self.entry, sorted(self.params.items()), self.repeat])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        shown = " ".join(f"{k}={v}" for k, v in self.params.items())
        rep = f" (repeat {self.repeat}/{self.repeats})" if self.repeats > 1 else ""
        return f"{self.entry} {shown}{rep}".strip()

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "devicebench", self.entry]
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
    size = path.stat().st_size
    if size > MAX_PLAN_BYTES:
        raise _err(path, "file", f"{size:,} bytes; a plan is at most {MAX_PLAN_BYTES:,} bytes")
    try:
        return yaml.load(path.read_text(), Loader=_PlanLoader)  # a SafeLoader subclass: no tags run code
    except _PlanTooBig as e:
        raise _err(path, "YAML", str(e)) from None
    except RecursionError:
        raise _err(path, "YAML", "nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        raise _err(path, where, f"not valid YAML ({getattr(e, 'problem', None) or e})") from None
    except UnicodeDecodeError:
        raise _err(path, "file", "not UTF-8 text") from None


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(_scalar(v) for v in value)
    return str(value)


def load_plan(path: str | Path, data: str | None = None) -> Plan:
    """Read, validate and expand a plan; every problem is one line naming the file, the key and what is allowed."""
    from devicebench.config import build_config
    from devicebench.configs import CONFIGS

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"plan {path}: no such file (plans live in experiments/)")
    doc = _read_yaml(path)
    if not isinstance(doc, dict):
        raise _err(path, "top level", "must be a mapping with name and runs")
    unknown = sorted(set(doc) - PLAN_KEYS)
    if unknown:
        raise _err(path, unknown[0], f"unknown key; allowed: {', '.join(sorted(PLAN_KEYS))}")
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
    report_cfg = _report_section(doc.get("report", {}), path)
    default_repeats = _positive_int(doc.get("repeats", 1), path, "repeats")
    skip = doc.get("skip_unavailable", False)
    if not isinstance(skip, bool):
        raise _err(path, "skip_unavailable", "must be true or false")
    specs = doc.get("runs")
    if not isinstance(specs, list) or not specs:
        raise _err(path, "runs", "required, a non-empty list of {entry, params, matrix, repeats}")
    _count_runs(specs, default_repeats, path)
    planned: list[PlannedRun] = []
    for i, spec in enumerate(specs):
        where = f"runs[{i}]"
        if not isinstance(spec, dict):
            raise _err(path, where, "must be a mapping with an entry")
        bad = sorted(set(spec) - RUN_KEYS)
        if bad:
            raise _err(path, f"{where}.{bad[0]}", f"unknown key; allowed: {', '.join(sorted(RUN_KEYS))}")
        entry = spec.get("entry")
        if entry not in ENTRIES:
            raise _err(
                path, f"{where}.entry", f"unknown entry point {entry!r}; allowed: {', '.join(ENTRIES)}"
            )
        params = spec.get("params") or {}
        matrix = spec.get("matrix") or {}
        if not isinstance(params, dict) or not isinstance(matrix, dict):
            raise _err(path, where, "params and matrix must be mappings")
        for key, values in matrix.items():
            if not isinstance(values, list) or not values:
                raise _err(path, f"{where}.matrix.{key}", "must be a non-empty list of values")
        repeats = _positive_int(spec.get("repeats", default_repeats), path, f"{where}.repeats")
        base = {k: _scalar(v) for k, v in params.items()}
        if data == "real" and entry in REAL_DATA:
            base.update(REAL_DATA[entry])
        config_cls = CONFIGS[entry]
        known = [f.name for f in dataclasses.fields(config_cls)]
        for combo in itertools.product(*matrix.values()) if matrix else [()]:
            values = {**base, **{k: _scalar(v) for k, v in zip(matrix, combo, strict=True)}}
            for key in values:
                if key not in known:
                    section = "matrix" if key in matrix else "params"
                    raise _err(
                        path,
                        f"{where}.{section}.{key}",
                        f"unknown parameter of {entry}; known: {', '.join(known)}",
                    )
            try:
                build_config(config_cls, values)
                from devicebench.device import check_device_spelling

                check_device_spelling(values.get("device", "cpu"))
            except UsageError as e:
                raise _err(path, where, str(e)) from None
            for r in range(1, repeats + 1):
                planned.append(PlannedRun(len(planned) + 1, entry, values, r, repeats))
    return Plan(
        name=name,
        path=path,
        experiment=experiment.strip() if experiment else None,
        skip_unavailable=skip,
        runs=planned,
        description=description,
        **report_cfg,
    )


def _report_section(report: Any, path: Path) -> dict[str, Any]:
    """`report:` checked the way `compare` will check it, before any run (not after all of them)."""
    from devicebench.report.cli import parse_threshold

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


def _device_available(device: str) -> bool:
    from devicebench.device import resolve_device
    from devicebench.errors import DeviceUnavailable

    try:
        resolve_device(device)
    except DeviceUnavailable:
        return False
    return True


def _finished_items(settings: Any, parent_run_id: str) -> set[str]:
    """Items of an earlier launch of this plan that already FINISHED (they are not run again)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(settings.tracking_uri)
    parent = client.get_run(parent_run_id)
    done: set[str] = set()
    token = None
    while True:
        page = client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}' and attributes.status = 'FINISHED'",
            max_results=500,
            page_token=token,
        )
        done |= {r.data.tags.get(tag("suite.item"), "") for r in page}
        token = page.token
        if not token:
            return done


def _child_env(parent_run_id: str, experiment_id: str, suite_tag: str, item: PlannedRun) -> dict[str, str]:
    run_name = f"{item.index:03d} {item.label}"
    return Handoff(parent_run_id, experiment_id, suite_tag, item.item_id, run_name).env(os.environ)


def _run_child(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run one plan item; when the suite itself is stopped, stop the child the same way and wait for it,
    so its run ends KILLED with its metrics flushed instead of being left RUNNING by a SIGKILL."""
    import signal

    from devicebench.errors import Interrupted

    with subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            _, stderr = proc.communicate()
        except (Interrupted, KeyboardInterrupt) as e:
            proc.send_signal(e.signum if isinstance(e, Interrupted) else signal.SIGINT)
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, None, stderr)


def _fmt_s(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def run_plan(plan: Plan, resume: str | None = None) -> int:
    """Run every planned item in its own process under one parent run; report; exit 0, or 1 on any failure."""
    from devicebench.settings import load_settings, preflight_store
    from devicebench.tracking import TAG_PREFIX, configure_mlflow_client, ensure_experiment, run_context

    settings = load_settings()
    if plan.experiment:
        settings = dataclasses.replace(settings, experiment=plan.experiment)
    preflight_store(settings)
    configure_mlflow_client(settings)
    started = time.monotonic()
    skipped: list[PlannedRun] = []
    failed: list[tuple[PlannedRun, str]] = []
    finished = 0
    params = {"plan": str(plan.path), "name": plan.name, "runs": len(plan.runs), "baseline": plan.baseline}
    if not resume:
        ensure_experiment(
            settings
        )  # once, before any child: a fresh SQLite store migrated in parallel breaks
    with run_context(
        settings, "suite", params, run_name=f"suite {plan.name}", run_id=resume or None
    ) as parent:
        from mlflow.tracking import MlflowClient

        experiment_id = MlflowClient(settings.tracking_uri).get_run(parent.run_id).info.experiment_id
        suite_tag = f"{plan.name}:{parent.run_id}"
        parent.set_tags({f"{TAG_PREFIX}suite": suite_tag})
        done = _finished_items(settings, parent.run_id) if resume else set()
        available: dict[str, bool] = {}
        durations: list[float] = []
        total = len(plan.runs)
        print(
            f"suite {plan.name}: {total} runs -> {redact_uri(settings.tracking_uri)} (parent run {parent.run_id})",
            flush=True,
        )
        for item in plan.runs:
            prefix = f"[{item.index}/{total}] {item.label}"
            if item.item_id in done:
                print(f"{prefix} ... already finished, kept", flush=True)
                finished += 1
                continue
            device = item.params.get("device", "cpu")
            if device not in available:
                available[device] = _device_available(device)
            if not available[device] and plan.skip_unavailable:
                print(f"{prefix} ... skipped: no {device} device on this host", flush=True)
                skipped.append(item)
                continue
            t0 = time.monotonic()
            proc = _run_child(item.argv(), _child_env(parent.run_id, experiment_id, suite_tag, item))
            took = time.monotonic() - t0
            durations.append(took)
            left = sum(durations) / len(durations) * (total - item.index)
            eta = f", ~{_fmt_s(left)} left" if item.index < total else ""
            if proc.returncode == 0:
                finished += 1
                print(f"{prefix} ... ok in {_fmt_s(took)}{eta}", flush=True)
            else:
                lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
                reason = (
                    lines[-1].removeprefix("devicebench: error: ") if lines else f"exit {proc.returncode}"
                )
                failed.append((item, reason))
                print(f"{prefix} ... FAILED (exit {proc.returncode}): {reason}{eta}", flush=True)
        parent.log_metrics(
            {"suite/finished": finished, "suite/failed": len(failed), "suite/skipped": len(skipped)}
        )
        parent.log_dict(
            {
                "finished": finished,
                "failed": [{"run": i.label, "reason": r} for i, r in failed],
                "skipped": [i.label for i in skipped],
            },
            "suite.json",
        )
        report_code = _report(plan, settings, suite_tag) if plan.report and finished else 0
    elapsed = time.monotonic() - started
    print(
        f"suite {plan.name}: {finished} finished, {len(failed)} failed, {len(skipped)} skipped in {_fmt_s(elapsed)}"
    )
    for item, reason in failed:
        print(f"  failed: {item.label}: {reason}")
    for item in skipped:
        print(f"  skipped: {item.label}")
    if settings.tracking_uri.startswith("sqlite:"):
        print(
            f"open the MLflow UI on these runs: mlflow ui --backend-store-uri {redact_uri(settings.tracking_uri)}"
        )
    else:
        print(f"open the MLflow UI: {redact_uri(settings.tracking_uri)}")
    return 1 if failed or report_code else 0


def _report(plan: Plan, settings: Any, suite_tag: str) -> int:
    """The compare report over this launch's runs (a subprocess: the report never imports torch)."""
    out = Path("reports") / f"{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    cmd = [
        sys.executable,
        "-m",
        "devicebench",
        "compare",
        "--experiment",
        settings.experiment,
        "--filter",
        f"tags.`devicebench.suite` = '{suite_tag}'",
        "--baseline",
        plan.baseline,
        "--threshold",
        str(plan.threshold),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, env=child_env(os.environ))
    if proc.returncode not in (0, 1):
        print(f"suite {plan.name}: the report failed (exit {proc.returncode})", file=sys.stderr)
    return proc.returncode


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan_file", nargs="?", metavar="PLAN", help="the plan, e.g. experiments/demo.yaml")
    parser.add_argument("--plan", dest="plan_opt", metavar="PLAN", help="the plan (as MLproject passes it)")
    parser.add_argument(
        "--resume",
        default="",
        metavar="RUN_ID",
        help="re-run only what has not FINISHED under this parent run",
    )
    parser.add_argument(
        "--dry-run",
        "--dry_run",
        dest="dry_run",
        nargs="?",
        const="true",
        default="false",
        help="print the expanded runs only",
    )
    parser.add_argument(
        "--data",
        choices=("synthetic", "real"),
        default=None,
        help="real: run cifar/unet on CIFAR-10 and VOC (downloading them)",
    )


def run(args: argparse.Namespace) -> int:
    path = args.plan_file or args.plan_opt
    if not path:
        raise UsageError("suite: name a plan, e.g. devicebench suite experiments/demo.yaml")
    if str(args.dry_run).lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise UsageError(f"--dry_run: {args.dry_run!r} is not true or false")
    plan = load_plan(path, data=args.data)
    if str(args.dry_run).lower() in ("true", "1", "yes"):
        print(f"plan {plan.name} ({plan.path}): {len(plan.runs)} runs")
        for item in plan.runs:
            print(f"  {item.index:3d}. {item.label}")
        return 0
    return run_plan(plan, resume=args.resume or None)
