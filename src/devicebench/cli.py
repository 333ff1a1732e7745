"""`devicebench <command> ...`: the one entry point; MLproject's entry points call it too.

User errors are one line on stderr and exit 2, never a traceback: the parameter and what is allowed.
Exit codes: 0 ok, 1 a run failed (or a regression was found), 2 bad input / device / data / store,
3 finished but spooled locally (store unreachable at the end), 128+N killed by signal N.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from devicebench.errors import DataUnavailable, Interrupted, OutOfMemory, SpooledError, UsageError
from devicebench.schema import UNSET_WORDS, WORKLOADS, tag
from devicebench.settings import redact_uri

PROG = "devicebench"


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error over several lines; we print the error alone.

    No abbreviations (`--epoch 1` was silently taken as `--epochs`, and a later flag could make a
    once-unique prefix ambiguous); an unknown flag or command names its closest match instead.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(
                f"unrecognized arguments: {' '.join(extras)}{_closest_flag(extras, self._flags(parsed))}"
            )
        return parsed

    def _flags(self, parsed: argparse.Namespace) -> dict[str, str]:
        """Every option string of this parser and of the chosen command's → its `--long` spelling."""
        parsers: list[argparse.ArgumentParser] = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                parsers += [chosen] if chosen is not None else []
        flags = {}
        for p in parsers:
            for text, action in p._option_string_actions.items():
                flags[text] = next((o for o in action.option_strings if o.startswith("--")), text)
        return flags

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """`devicebench cifr` names `cifar`; the same for any flag with choices."""
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}{hint} (choose from {', '.join(choices)})"
            )
        super()._check_value(action, value)


def _closest_flag(extras: Sequence[str], flags: dict[str, str]) -> str:
    """The hint "; did you mean --epochs?" for the first unknown flag close to a known one, else ""."""
    for token in extras:
        if token.startswith("-") and len(token) > 1:
            close = difflib.get_close_matches(token.split("=", 1)[0], list(flags), n=1)
            if close:
                return f"; did you mean {flags[close[0]]}?"
    return ""


def _fail(message: str, code: int, error: BaseException | None = None) -> int:
    """One line on stderr; a rank of a job reports to its launcher instead, which names the rank."""
    from devicebench.launch import record_failure, worker_rank

    if worker_rank() is not None:
        record_failure(error, message, code)
        return code
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


# --------------------------------------------------------------------------------------------- workloads


def _add_workload(sub: argparse._SubParsersAction, name: str, help: str) -> None:
    """The workload's arguments from its torch-free config: a typo is refused in well under a second,
    before torch (seconds of import) is loaded; the docstring is read from the source for the same reason."""
    from devicebench.config import add_config_arguments
    from devicebench.configs import CONFIGS

    spec = importlib.util.find_spec(f"devicebench.workloads.{name}")
    source = Path(spec.origin).read_text() if spec and spec.origin else ""
    doc = (ast.get_docstring(ast.parse(source)) or "") if source else ""
    p = sub.add_parser(name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(p, CONFIGS[name])
    p.set_defaults(handler=lambda args: run_workload(name, args))


def run_workload(name: str, args: argparse.Namespace) -> int:
    """Parse → check the store → start the run → resolve the device → work → log → end the run.

    With `nproc > 1` or `nnodes > 1` this process launches the job instead (launch.py), and each of its
    ranks comes back here: rank 0 runs exactly this path, the others train without a run."""
    from devicebench.config import config_from_args
    from devicebench.configs import CONFIGS
    from devicebench.costs import log_costs
    from devicebench.launch import record_run, worker_rank
    from devicebench.prices import pricing_for
    from devicebench.schema import check_device_spelling
    from devicebench.settings import load_settings, preflight_store

    cfg = config_from_args(CONFIGS[name], args)  # bad input is refused here, before torch is imported
    check_device_spelling(cfg.device)
    settings = load_settings()
    # a bad price table is refused here too, before any run exists
    pricing = pricing_for(cfg.price_per_hour, settings.price_per_hour, settings.prices_path)
    rank = worker_rank()
    if rank is None or rank == 0:  # a rank other than 0 never talks to the store
        preflight_store(settings)

    from devicebench.workloads import Context, load, progress_enabled

    module = load(name)
    world_size = getattr(cfg, "nproc", 1) * getattr(cfg, "nnodes", 1)
    if rank is None and world_size > 1:
        return _launch_job(name, cfg, settings, module)
    if rank:
        return _work_as_rank(module, cfg, settings)
    with _open_run(name, cfg, settings, module, world_size) as tracker:
        # `time/total_s` counts from here, when the run exists (its start_time is set): resolving the
        # device, the host fingerprint, the data, warm-up, training, evaluation and logging the artifacts
        # and model. Not in it: starting Python, imports, the store check, creating the run, ending it.
        started = time.perf_counter()
        if rank == 0:
            record_run(str(tracker.run_id))  # the launcher ends it FAILED if another rank fails
        if getattr(cfg, "system_metrics", False):
            tracker.start_system_metrics()
        world, device = _join(cfg.device, rank)
        price = _log_host(tracker, device, settings, cfg, pricing)
        if world.distributed:
            tracker.set_tags({tag("dist.backend"): world.backend(device)})
        ctx = Context(device=device, data_root=settings.data_dir, progress=progress_enabled(), world=world)
        try:
            result = _work(module, cfg, ctx, tracker)
        finally:
            world.leave()
        total_s = time.perf_counter() - started
        tracker.log_metrics({"time/total_s": total_s})
        log_costs(tracker, price, name, total_s, result, cfg)  # what the work cost, from the same wall time
        on = f"{device} ×{world.size} ({world.backend(device)})" if world.distributed else str(device)
        print(
            f"{PROG}: {name} run {tracker.run_id} finished on {on} -> {redact_uri(settings.tracking_uri)}",
            file=sys.stderr,
        )
    return 0


def _open_run(name: str, cfg: Any, settings: Any, module: Any, world_size: int) -> Any:
    """The run's context (run_context): its params, tags, name and the plan that started it, if any.

    A training config also logs `global_batch_size`: `batch_size` is per process, and the batch one
    optimizer step sees is what a scaling series keeps in mind."""
    from devicebench.config import config_key, to_params
    from devicebench.handoff import Handoff
    from devicebench.naming import run_name
    from devicebench.tracking import run_context

    params = to_params(cfg)
    tags = {tag("device"): cfg.device, tag("config_key"): config_key(name, cfg)}
    tags[tag("data")] = getattr(cfg, "data", module.DATA)
    if hasattr(cfg, "nproc"):
        tags[tag("world_size")] = str(world_size)
        params["global_batch_size"] = str(cfg.batch_size * world_size)
    handoff = Handoff.from_env(os.environ)  # set when a plan started this run
    if handoff:
        tags.update(handoff.tags())
    return run_context(
        settings,
        name,
        params,
        tags=tags,
        run_name=run_name(name, _planned_device(cfg.device), cfg, handoff.run_name if handoff else ""),
        parent_run_id=(handoff and handoff.parent_run_id) or None,
    )


def _join(requested: str, rank: int | None) -> tuple[Any, Any]:
    """(this process's World, its device), resolved, made current, and the process group joined."""
    from devicebench.device import activate, resolve_device
    from devicebench.distributed import World

    world = World.from_env() if rank is not None else World()
    device = world.device(resolve_device(requested))
    activate(device)
    world.join(device)
    return world, device


def _work_as_rank(module: Any, cfg: Any, settings: Any) -> int:
    """A rank other than 0: the same work, its stdout silenced (rank 0 prints the run's lines) and
    nothing logged; its figures reach rank 0 through the process group."""
    from devicebench.launch import worker_rank
    from devicebench.tracking import null_tracker
    from devicebench.workloads import Context

    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the life of this process
    world, device = _join(cfg.device, worker_rank())
    ctx = Context(device=device, data_root=settings.data_dir, progress=False, world=world)
    try:
        _work(module, cfg, ctx, null_tracker())
    finally:
        world.leave()
    return 0


def _launch_job(name: str, cfg: Any, settings: Any, module: Any) -> int:
    """Check that the job can run here, then run it under torchrun (launch.py). A job refused before
    it starts still leaves its FAILED run (on node 0), as `device=cuda` on a CPU host does."""
    from devicebench.config import to_params
    from devicebench.device import resolve_device, usable_cores
    from devicebench.launch import check_job, launch

    try:
        check_job(cfg, resolve_device(cfg.device))
    except UsageError as e:
        if cfg.node_rank == 0:
            with _open_run(name, cfg, settings, module, cfg.nproc * cfg.nnodes):
                raise
        raise e from None
    argv = [a for k, v in to_params(cfg).items() for a in (f"--{k}", v)]
    return launch(name, argv, cfg, settings, usable_cores())


def _planned_device(requested: str) -> str:
    """The device the run will resolve to, for its name (`auto` -> `cuda:0`); when it cannot resolve, the
    request as typed: the error itself is raised inside the run, which then ends FAILED."""
    from devicebench.device import resolve_device

    try:
        return str(resolve_device(requested))
    except UsageError:  # DeviceUnavailable: raised again inside the run, which reports it
        return requested


def _log_host(tracker: Any, device: Any, settings: Any, cfg: Any, pricing: Any) -> Any:
    """The resolved device and the host fingerprint, as tags and host.json; for training, the cores the
    run could use against its threads and loader processes (an oversubscribed CPU baseline is named).
    Returns this host's price (or why it has none), priced from the same fingerprint: the OCI metadata
    service is asked once."""
    from devicebench.costs import log_price
    from devicebench.device import cpu_budget, device_name, host_fingerprint
    from devicebench.prices import resolve_price

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
    if hasattr(cfg, "num_workers"):
        workers = cfg.num_workers if getattr(cfg, "loader", "dataloader") == "dataloader" else 0
        budget = cpu_budget(int(host["torch_threads"]), workers)
        tracker.set_tags({tag(k): v for k, v in budget.items()})
    tracker.log_dict(host, "host.json")
    price = resolve_price(pricing, host)
    log_price(tracker, price)
    return price


def _work(module: Any, cfg: Any, ctx: Any, tracker: Any) -> Any:
    """The workload itself, returning its result; a permission problem or an out-of-memory becomes one
    line naming the fix."""
    from devicebench.tracking import one_line

    try:
        return module.run(cfg, ctx, tracker)
    except PermissionError as e:  # a data dir, list or file the user pointed at that we may not read
        raise DataUnavailable(
            f"permission denied: {e.filename or one_line(e)}; give this user access or choose another path"
        ) from None
    except Exception as e:  # out of memory: one line naming the parameters to lower, exit 2, run FAILED
        oom = OutOfMemory.from_exception(e, getattr(module, "MEMORY_PARAMS", ()))
        if oom is None:
            raise
        raise oom from None


# --------------------------------------------------------------------------------------------- others


def _add_sync(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sync", help="replay runs spooled while the tracking store was unreachable")
    p.set_defaults(handler=_run_sync)


def _run_sync(args: argparse.Namespace) -> int:
    from devicebench.settings import load_settings
    from devicebench.tracking import sync_spool

    settings = load_settings()
    out = sync_spool(settings)
    died = f" ({out.died} ended FAILED: process died)" if out.died else ""
    live = f", {out.live} live run(s) skipped" if out.live else ""
    print(
        f"{PROG}: sync: {out.replayed} run(s) replayed{died}, {out.pending} still pending{live} "
        f"in {settings.spool_dir}"
    )
    return 1 if out.pending else 0


def _add_module_command(sub: argparse._SubParsersAction, name: str, module_name: str, help: str) -> None:
    """Commands whose arguments live with their code (`report.cli`, `suite`): add_arguments + run."""
    module = importlib.import_module(module_name)
    p = sub.add_parser(name, help=help, description=(module.__doc__ or "").strip())
    module.add_arguments(p)
    words = UNSET_WORDS.get(name, {})
    p.set_defaults(handler=lambda args: module.run(_unset(args, words)), **words)


def _unset(args: argparse.Namespace, words: dict[str, str]) -> argparse.Namespace:
    """An option given as its unset word (`--since all`) becomes the empty value the command reads."""
    for dest, word in words.items():
        value = getattr(args, dest)
        if isinstance(value, str) and value.strip().lower() == word:
            setattr(args, dest, "")
    return args


COMMANDS: dict[str, str] = {
    "matmul": "NumPy on the CPU vs torch on any device: GFLOP/s per matrix size and dtype",
    "cifar": "the PyTorch CIFAR-10 tutorial network, measured on any device",
    "unet": "a UNet on a 300/100 sample of Pascal VOC 2012, measured on any device",
    "compare": "compare CPU and GPU runs side by side: speedups, why, regressions",
    "suite": "run an experiment plan (experiments/*.yaml), then its report",
    "sync": "replay runs spooled while the tracking store was unreachable",
}


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser, with full arguments only for the selected command.

    Building a workload's arguments imports torch (seconds); `compare` and `sync` must not pay that.
    """
    parser = OneLineParser(
        prog=PROG,
        description="How much faster is this PyTorch workload on the GPU than on the CPU? Runs are tracked in MLflow.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, help in COMMANDS.items():
        if name != selected:
            sub.add_parser(name, help=help, add_help=False)
        elif name in WORKLOADS:
            _add_workload(sub, name, help)
        elif name == "compare":
            _add_module_command(sub, name, "devicebench.report.cli", help)
        elif name == "suite":
            _add_module_command(sub, name, "devicebench.suite", help)
        else:
            _add_sync(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; translate our exceptions to one line and an exit code."""
    debug = os.environ.get("DEVICEBENCH_DEBUG") == "1"
    # MLflow logs store migrations at INFO on stderr; our stderr is for our one line.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        parser = build_parser(next((a for a in argv if not a.startswith("-")), None))
        args = parser.parse_args(argv)
        handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return 2
        return handler(args)
    except (UsageError, SpooledError, Interrupted) as e:
        return _fail(str(e), e.exit_code, e)
    except KeyboardInterrupt as e:
        return _fail("interrupted by Ctrl-C", 130, e)
    except BrokenPipeError:  # `devicebench ... | head`: the reader left; not an error worth a line
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        if debug:
            raise
        from devicebench.launch import worker_rank
        from devicebench.tracking import one_line

        if worker_rank() is not None:
            return _fail(one_line(e), 1, e)
        return _fail(f"{one_line(e)} (DEVICEBENCH_DEBUG=1 shows the traceback)", 1, e)


if __name__ == "__main__":
    sys.exit(main())
