"""One `devicebench <workload>` run, from checked flags to an ended MLflow run (the CLI's biggest job).

Start the run → resolve the device → work → log → end the run; the CLI has checked the flags, the price
table and the store before this module (torch and MLflow) is imported. With `nproc > 1` or `nnodes > 1`
this process launches a job instead (launch.py): its rank 0 comes back here and runs the single-process
path, with its run; the other ranks train without one, and without MLflow (work.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from typing import NamedTuple

import torch

from devicebench.config.fields import config_key, to_params, work_key
from devicebench.config.naming import run_name
from devicebench.config.parts import Fed, Job, Serving, SystemMetrics, Training
from devicebench.config.serving_fields import ServingLoad
from devicebench.config.settings import Settings
from devicebench.config.workloads import WorkloadConfig
from devicebench.errors import UsageError
from devicebench.host.busy import CpuSample, busy_figures, sample
from devicebench.host.context import Context, LoadedModel
from devicebench.host.cpu import cpu_budget, peak_rss_bytes, usable_cores
from devicebench.host.device import ResolvedDevice, device_name, host_fingerprint
from devicebench.host.distributed import World
from devicebench.host.job import record_run, worker_rank
from devicebench.plan.handoff import Handoff
from devicebench.pricing.costs import log_costs, log_price, usable_price
from devicebench.pricing.prices import Pricing, Usage, gpu_to_weigh, mig_share, price_side
from devicebench.run import scoring, tuning
from devicebench.run.launch import check_job, launch
from devicebench.run.run_line import glance_metrics, quiet_cost, summary_line
from devicebench.run.work import join_world, run_module
from devicebench.schema import ARTIFACTS_S, HOST_S, NOTE_TAG, PROCESS_S, SCHEMA_VERSION, TOTAL_S, tag
from devicebench.tracking.artifacts import load_logged_model
from devicebench.tracking.protocol import Tracker
from devicebench.tracking.runs import FromPlan, process_age_s, run_context
from devicebench.tracking.tracker import MlflowTracker
from devicebench.util.busy_host import is_busy
from devicebench.util.children import death_signal, python_argv, wait_through_ctrl_c
from devicebench.util.fmt import PROG, fmt_s
from devicebench.util.redact import redact
from devicebench.workloads import Workload, load, progress_enabled


class Tuned(NamedTuple):
    """What `devicebench tune` hands the run that measures its fastest setting."""

    tags: dict[str, str]  # the tuned run's tags: the setting chosen, the budget, the trials' count
    trials: dict[str, list]  # the trials table, logged as tuning.json
    home: str = ""  # the experiment of the runs of its work, where it is not the configured one


def run_workload(
    name: str,
    cfg: WorkloadConfig,
    settings: Settings,
    pricing: Pricing,
    tune_budget_s: float | None = None,
    tune_precision: bool = False,
) -> int:
    """The run of `name` as `cfg` asks (checked by the CLI); the CLI's exit code. With `tune_budget_s`, the
    device's setting is tuned first (tuning.py) and the run measures it the fastest way found."""
    rank = worker_rank()
    module = load(name)
    world_size = cfg.world_size if isinstance(cfg, Job) else 1
    resolved = ResolvedDevice.of(cfg.device)  # once: the run's name, its work, a job's check, a tuning
    if tune_budget_s is not None:
        tuned_cfg, tuned_by = _tune(name, cfg, settings, tune_budget_s, tune_precision, world_size, resolved)
        return _measure_tuned(name, tuned_cfg, tuned_by)
    if rank is None and isinstance(cfg, Job) and world_size > 1:
        return _launch_job(name, cfg, settings, module, resolved)
    return _run_here(name, cfg, settings, pricing, module, resolved)


def _run_here(
    name: str,
    cfg: WorkloadConfig,
    settings: Settings,
    pricing: Pricing,
    module: Workload,
    resolved: ResolvedDevice,
) -> int:
    """The run in this process (a single process, or a job's rank 0): created, worked, priced, ended;
    its one line printed last."""
    rank = worker_rank()
    world_size = cfg.world_size if isinstance(cfg, Job) else 1
    tuned = _tuned_from_env()
    served = _checked_before_run(module, cfg, settings.tracking_uri)
    if served is not None and served.name:  # an infer run logs, and is named by, the model it served
        cfg = dataclasses.replace(cfg, model=served.name)
    with _workload_run(
        name, cfg, settings, module, world_size, resolved, tuned.tags if tuned else None
    ) as tracker:
        # `time/total_s` counts from here, when the run exists (its start_time is set): resolving the
        # device, the host fingerprint, the data, warm-up, training, evaluation and logging the artifacts
        # and model. Not in it: starting Python, imports, the store check, creating the run, ending it.
        started = time.perf_counter()
        before = sample()  # how busy the host was while it ran: the cores' time others took from here
        if rank == 0:
            record_run(str(tracker.run_id))  # the launcher ends it FAILED if another rank fails
        if tuned:
            tracker.log_table(tuned.trials, "tuning.json")
        if isinstance(cfg, SystemMetrics) and cfg.system_metrics:
            tracker.start_system_metrics()
        world, device, host, budget, host_s = _join_here(tracker, cfg, resolved, rank, settings)
        ctx = Context(device, settings.data_dir, progress_enabled(), world, served)
        try:
            result = run_module(module, cfg, ctx, tracker)
        finally:
            world.leave()
        total_s, busy = _log_times(tracker, time.perf_counter() - started, host_s, before, world.distributed)
        busy = {**busy, **_busy_cost(tracker, settings, config_key(name, cfg), str(device), result, busy)}
        usage = _usage(device, world.size, host, cfg)  # its memory is known now
        price = usable_price(price_side(pricing, host, usage))
        log_price(tracker, price)
        tracker.set_tags(gpu_to_weigh(pricing, usage))
        costs = log_costs(tracker, price, name, total_s, result, cfg)  # from the same wall time
        glance = glance_metrics(name, result, costs)
        gpu = getattr(result, "gpu", {})  # over its epochs (host/gpu_state.py): a GPU run's caveat
        steadiness = getattr(result, "host", {})  # a served model's CPU tail (host/steadiness.py)
        line = summary_line(name, str(device), glance, price, world.size, budget, gpu, {**busy, **steadiness})
        _log_answer(tracker, glance, line)
        on = f"{device} ×{world.size} ({world.backend(device)})" if world.distributed else str(device)
        run_id = tracker.run_id
    # said once the run has ended FINISHED: a run whose end did not reach the store says only that
    print(f"{PROG}: {name} run {run_id} finished on {on} -> {redact(settings.tracking_uri)}", file=sys.stderr)
    print(line, flush=True)  # the last thing the command (and `mlflow run`'s entry point) prints
    return 0


class Here(NamedTuple):
    """Where a run works: its place in the job, its device, the host's fingerprint, its CPU budget
    (`_log_budget`), and the seconds joining and fingerprinting took (`time/host_s`)."""

    world: World
    device: torch.device
    host: dict[str, str]
    budget: dict[str, str]
    seconds: float


def _join_here(
    tracker: Tracker, cfg: WorkloadConfig, resolved: ResolvedDevice, rank: int | None, settings: Settings
) -> Here:
    """The run's device made current, its job joined, the host fingerprinted and its CPU budget logged."""
    t0 = time.perf_counter()
    world, device = join_world(resolved.get(), rank, cfg.cpu_threads)
    host = _log_host(tracker, device, settings)
    budget = _log_budget(tracker, host, cfg)
    here = Here(world, device, host, budget, time.perf_counter() - t0)
    if world.distributed:
        tracker.set_tags({tag("dist.backend"): world.backend(device)})
    return here


def _busy_cost(
    tracker: Tracker,
    settings: Settings,
    key: str,
    device: str,
    result: object,
    busy: dict[str, float],
) -> dict[str, float]:
    """What a busy host cost a training run against the last quiet run of its config (run_line.quiet_cost),
    logged; {} for a quiet run, or one that trained nothing. `key`: the run's config key."""
    train_s = getattr(result, "train_s", None)
    if not is_busy(busy) or not isinstance(train_s, float):
        return {}
    cost = quiet_cost(settings.tracking_uri, str(tracker.run_id), key, device, train_s)
    tracker.log_metrics(cost)
    return cost


def _log_times(
    tracker: Tracker, total_s: float, host_s: float, before: CpuSample | None, distributed: bool
) -> tuple[float, dict[str, float]]:
    """Log the run's times and how busy the host was since `before` (host/busy.py; nothing in a job of
    several processes: its other ranks are not this process's descendants, and their CPU time would
    read as others'); returns (`total_s`, the busy figures) for its price and its line."""
    busy = busy_figures(before, sample()) if not distributed else {}
    fixed = {TOTAL_S: total_s, HOST_S: host_s, ARTIFACTS_S: tracker.artifacts_s, PROCESS_S: process_age_s()}
    tracker.log_metrics({**fixed, **busy})
    return total_s, busy


def _checked_before_run(module: Workload, cfg: WorkloadConfig, tracking_uri: str) -> LoadedModel | None:
    """What must hold before a run is created, so that its failure leaves no run: the workload's own
    `check` (the `model` workload's model builds and takes its input), and a model URI to serve names a
    logged model, which is loaded here, once (an `infer` run's model), and checked by infer's `check`
    (it has an input shape and gives one output per sample); over HTTP, MLflow's scoring server is
    started for it here (run/scoring.py), so a model that does not serve leaves no run either."""
    uri = cfg.model_uri if isinstance(cfg, Serving) else ""
    if uri:  # a logged model's download and load took minutes with nothing printed; stderr is for errors
        print(f"{PROG}: loading the logged model {uri} ...", flush=True)
    t0 = time.perf_counter()
    served = load_logged_model(uri) if uri else None
    if served is not None:
        print(f"{PROG}: loaded {uri} in {fmt_s(time.perf_counter() - t0)}", flush=True)
    check = getattr(module, "check", None)
    if check is not None and served is not None:
        check(cfg, served)
    elif check is not None:
        check(cfg)
    if (
        served is not None and isinstance(cfg, ServingLoad) and "http" in cfg.via
    ):  # infer over MLflow's scoring server
        server = scoring.start(uri, cfg.serve_port, tracking_uri, cfg.cpu_threads)
        served = dataclasses.replace(served, url=server.url, log=server.log)
    return served


def _tune(
    name: str,
    cfg: WorkloadConfig,
    settings: Settings,
    budget_s: float,
    precision: bool,
    world_size: int,
    resolved: ResolvedDevice,
) -> tuple[WorkloadConfig, Tuned]:
    """(the config the fastest trial used, (its run's tags, the trials table)): trials before the run, on
    the run's device, within `budget_s`; reduced precision tried where `precision` asks. A device that
    is not here leaves a FAILED run, as the run itself would."""
    if world_size > 1:
        raise UsageError("tune measures one process; use nproc=1 and nnodes=1", param="nproc")
    try:
        device = resolved.get()
    except UsageError:
        with _workload_run(name, cfg, settings, load(name), 1, resolved):
            raise
    here = dataclasses.replace(cfg, device=str(device))
    trials = tuning.tune(name, here, budget_s, usable_cores(), settings.data_dir, tuning.stderr, precision)
    chosen = tuning.best(trials)
    tuning.stderr(f"tune {name}: fastest on {device}: {chosen.setting}; measuring it that way")
    home = tuning.tuned_home(settings.tracking_uri, name, cfg)
    return chosen.setting.applied(cfg), Tuned(
        tuning.tags(trials, chosen, budget_s),
        tuning.trials_table(trials),
        home if home != settings.experiment else "",
    )


TUNED_ENV = "DEVICEBENCH_TUNED_FILE"  # a tuned run's tags and trials, from `devicebench tune` to its child


def _measure_tuned(name: str, cfg: WorkloadConfig, tuned: Tuned) -> int:
    """The measured side of a tuning, in a fresh process with the fastest setting as its flags.

    Not in the process that ran the trials: after the trials have resized torch's thread pools and
    forked DataLoader workers, a run measured there trains measurably slower than the same flags in a
    fresh process (docs/measured.md). The child logs the trials (TUNED_ENV) into its own run, in the
    experiment of the stored runs of the same work (tuning.tuned_home), where their report finds it;
    its exit code is the command's.
    """

    argv = [a for k, v in to_params(cfg).items() for a in (f"--{k}", v)]
    with tempfile.TemporaryDirectory(prefix="devicebench-tune-") as tmp:
        path = os.path.join(tmp, "tuned.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"tags": tuned.tags, "table": tuned.trials}, f)
        child = python_argv("-m", "devicebench", name, *argv)
        env = {**os.environ, TUNED_ENV: path}
        if tuned.home:  # beside the runs it tunes, where their report reads
            tuning.stderr(
                f"tune {name}: the tuned run goes to experiment {tuned.home}, beside its work's runs"
            )
            env["DEVICEBENCH_EXPERIMENT"] = tuned.home
        return wait_through_ctrl_c(subprocess.Popen(child, env=env, preexec_fn=death_signal()))


def _tuned_from_env() -> Tuned | None:
    """The tags and trials table `devicebench tune` handed this run (TUNED_ENV), or None."""

    path = os.environ.get(TUNED_ENV)
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        got = json.load(f)
    return Tuned(got["tags"], got["table"])


def _log_answer(tracker: Tracker, glance: dict[str, float], line: str) -> None:
    """The run's answer where a person looks first: its `at_a_glance/*` metrics, which sort before every
    other name, and its one-line description (the UI shows it above the metrics; run_line.summary_line
    says there an oversubscribed CPU, a host other processes kept busy and a GPU run whose speed may
    not repeat)."""
    tracker.log_metrics(glance)
    tracker.set_tags({NOTE_TAG: line})


def _workload_run(
    name: str,
    cfg: WorkloadConfig,
    settings: Settings,
    module: Workload,
    world_size: int,
    resolved: ResolvedDevice,
    extra_tags: dict[str, str] | None = None,
) -> AbstractContextManager[MlflowTracker]:
    """The run's context (run_context): its params, tags, name and the plan that started it, if any.

    A training config also logs `global_batch_size`: `batch_size` is per process, and the batch one
    optimizer step sees is what a scaling series keeps in mind."""

    params = to_params(cfg)
    tags = {
        tag("device"): cfg.device,
        tag("config_key"): config_key(name, cfg),
        tag("work_key"): work_key(name, cfg),
        tag("schema"): str(SCHEMA_VERSION),
    }
    tags[tag("data")] = cfg.data if isinstance(cfg, Training) else module.DATA
    if isinstance(cfg, Job):
        tags[tag("world_size")] = str(world_size)
        params["global_batch_size"] = str(cfg.batch_size * world_size)
    tags.update(extra_tags or {})
    handoff = Handoff.from_env(os.environ)  # set when a plan started this run
    if handoff:
        tags.update(handoff.tags())
    return run_context(
        settings,
        name,
        params,
        tags=tags,
        run_name=run_name(name, resolved.name, cfg, handoff.run_name if handoff else ""),
        plan=FromPlan(
            parent_run_id=(handoff and handoff.parent_run_id) or None,
            log_models=handoff.log_model if handoff else True,
            store_checked=bool(handoff and handoff.store_is_checked(settings.tracking_uri)),
        ),
    )


def _launch_job(name: str, cfg: Job, settings: Settings, module: Workload, resolved: ResolvedDevice) -> int:
    """Check that the job can run here, then run it under torchrun (launch.py). A job refused before
    it starts still leaves its FAILED run (on node 0), as `device=cuda` on a CPU host does."""

    try:
        check_job(cfg, resolved.get())
    except UsageError as e:
        if cfg.node_rank == 0:
            with _workload_run(name, cfg, settings, module, cfg.world_size, resolved):
                raise
        raise e from None
    argv = [a for k, v in to_params(cfg).items() for a in (f"--{k}", v)]
    return launch(name, argv, cfg, settings, usable_cores())


def _log_host(tracker: Tracker, device: torch.device, settings: Settings) -> dict[str, str]:
    """The resolved device and the host fingerprint, as `devicebench.host.*` facts (params but for
    `host.label` and the device's name: schema.RUN_TAGS) and host.json. Returns the fingerprint, which
    the run is priced from when it ends: the OCI metadata service is asked once."""

    host = host_fingerprint(device, settings.oci_metadata_url, settings.oci_timeout_s)
    if settings.host_label:
        host["label"] = settings.host_label  # what the report groups by, not the container's hostname
    tracker.set_tags(
        {
            tag("device.resolved"): str(device),
            tag("device.name"): device_name(device),
            **{tag(f"host.{k}"): v for k, v in host.items()},
        }
    )
    tracker.log_dict(host, "host.json")
    return host


def _log_budget(tracker: Tracker, host: dict[str, str], cfg: WorkloadConfig) -> dict[str, str]:
    """For training, the cores the run could use against its threads and loader processes, logged as
    `cpu.*` facts and returned for the run's line ({} for a workload without a loader): an
    oversubscribed CPU run is named there and in the report."""
    if not isinstance(cfg, Fed):
        return {}
    budget = cpu_budget(int(host["torch_threads"]), cfg.loader_workers)
    tracker.set_tags({tag(k): v for k, v in budget.items()})
    return budget


def _usage(device: torch.device, processes: int, host: dict[str, str], cfg: WorkloadConfig) -> Usage:
    """What the run used, to be priced as (docs/design.md, pricing rules): the GPUs of its job (a MIG slice
    its share), the vCPUs its threads and loader workers kept busy in every process, and the memory it
    needed, its processes' peak RSS (forked loader workers share their parent's pages, and the peak
    of reaped children depends on when they were reaped: they are not added). A matmul run's NumPy
    child runs one product at a time beside no torch work, on the same thread count."""
    workers = cfg.loader_workers if isinstance(cfg, Fed) else 0
    gpus = processes * mig_share(host.get("gpu_mig_profile", "")) if device.type == "cuda" else 0.0
    return Usage(
        device=device.type,
        gpus=gpus,
        vcpus=(int(host["torch_threads"]) + workers) * processes,
        memory_gb=peak_rss_bytes() * processes / 2**30,
    )
