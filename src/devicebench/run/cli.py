"""`devicebench <command> ...`: the one entry point; MLproject's entry points call it too.

User errors are one line on stderr and exit 2, never a traceback: the parameter and what is allowed.
Exit codes: 0 ok, 1 a run failed (or a regression was found), 2 bad input / device / data / store,
3 finished but spooled locally (store unreachable at the end), 128+N killed by signal N.

This module imports neither torch nor MLflow: a workload's flags, values, device spelling, price table
and store are all checked (`_checked`) before the run's own module (`run.workload`) loads them, so a
typo is refused in well under a second.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from devicebench import __version__
from devicebench.config.fields import add_config_arguments, config_from_args
from devicebench.config.settings import Settings, load_settings, preflight_store
from devicebench.config.workloads import CONFIGS, TRAINING_WORKLOADS, WORKLOADS, WorkloadConfig
from devicebench.errors import ExitedInsideRun, Interrupted, SpooledError, UsageError
from devicebench.host.job import record_failure, worker_rank
from devicebench.pricing.prices import Pricing, pricing_for
from devicebench.schema import (
    MAX_TAG_VALUE,
    UNSET_WORDS,
    check_device_spelling,
    tag,
)
from devicebench.tracking.protocol import one_line
from devicebench.tracking.signals import exiting
from devicebench.util.collector import paused_for_imports
from devicebench.util.fmt import PROG
from devicebench.util.leave import leave
from devicebench.util.redact import redact


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


def _explain_mlflow_run(message: str, argv: Sequence[str] | None) -> None:
    """Under `mlflow run` (MLFLOW_RUN_ID set) MLflow made the run before this command started: a flag
    refused here left it FAILED under a random name with nothing saying why (`-P bogus=1`). The run is
    tagged with its workload and the one line, and ended FAILED; a run already explained (a refusal
    inside a run, which ends it itself) is left as it is."""
    run_id = os.environ.get("MLFLOW_RUN_ID", "").strip()
    if not run_id or worker_rank() is not None:
        return
    # lazy: MLflow only under `mlflow run`, after a refused flag (a bad flag elsewhere never loads it)
    from mlflow.tracking import MlflowClient

    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a store gone since `mlflow run` made
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")  # the run costs seconds, not minutes
    with contextlib.suppress(Exception):  # the refusal's own line is what matters; the store may be down
        client = MlflowClient()
        run = client.get_run(run_id)
        if tag("error") in run.data.tags:
            return
        client.set_tag(run_id, tag("error"), redact(message)[:MAX_TAG_VALUE])
        if words and words[0] in WORKLOADS:
            client.set_tag(run_id, tag("workload"), words[0])
        if run.info.status == "RUNNING":
            client.set_terminated(run_id, "FAILED")


def _fail(message: str, code: int, error: BaseException | None = None) -> int:
    """One line on stderr, passwords redacted; a rank of a job reports to its launcher instead, which
    names the rank."""
    exiting()  # no SIGTERM may cut this line short or follow it with a traceback
    if worker_rank() is not None:
        record_failure(error, redact(message), code)
        return code
    print(f"{PROG}: error: {redact(message)}", file=sys.stderr)
    return code


# --------------------------------------------------------------------------------------------- workloads


def _docstring(module: str) -> str:
    """A module's docstring read from its source, not by importing it (a workload's imports torch)."""
    spec = importlib.util.find_spec(module)
    source = Path(spec.origin).read_text() if spec and spec.origin else ""
    return (ast.get_docstring(ast.parse(source)) or "") if source else ""


def _add_workload(sub: argparse._SubParsersAction, name: str, help: str) -> None:
    """The workload's arguments from its torch-free config, its help from its module's source."""
    doc = _docstring(f"devicebench.workloads.{name}")
    p = sub.add_parser(name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(p, CONFIGS[name])
    p.set_defaults(handler=lambda args: _run_workload(name, args))


def _checked(name: str, args: argparse.Namespace) -> tuple[WorkloadConfig, Settings, Pricing]:
    """(config, settings, pricing), every input checked before torch is imported or a run exists: the
    flags, the device's spelling, the price table and (on the process that owns the run) the store."""
    cfg = config_from_args(CONFIGS[name], args)
    check_device_spelling(cfg.device)
    settings = load_settings()
    pricing = pricing_for(
        cfg.price_per_hour,
        settings.price_per_hour,
        settings.prices_path,
        cfg.illustrative_price,
        cpu_shape=cfg.cpu_shape or settings.cpu_shape,
        gpu_shape=cfg.price_shape or settings.price_shape,
        whole_shape=settings.whole_shape,
    )
    rank = worker_rank()
    if rank is None or rank == 0:  # a rank other than 0 never talks to the store
        preflight_store(settings)
    return cfg, settings, pricing


def _run_workload(
    name: str, args: argparse.Namespace, tune_budget_s: float | None = None, tune_precision: bool = False
) -> int:
    cfg, settings, pricing = _checked(name, args)
    if worker_rank():  # a job's rank other than 0: the work alone, no run and so no MLflow (work.py)
        with paused_for_imports():
            from devicebench.run.work import work_as_rank  # lazy: torch, once all is checked

        return work_as_rank(name, cfg, settings)
    with paused_for_imports():
        from devicebench.run.workload import run_workload  # lazy: torch and MLflow, once all is checked

    return run_workload(name, cfg, settings, pricing, tune_budget_s, tune_precision)


def _add_tune(sub: argparse._SubParsersAction, argv: Sequence[str]) -> None:
    """`devicebench tune <workload> [its flags] [--tune_budget_s S] [--tune_precision]`: the workload's own
    flags, so a tuned side is asked for exactly as the run it stands in for, on any device."""
    p = sub.add_parser(
        "tune",
        help=COMMANDS["tune"],
        description=_docstring("devicebench.run.tuning"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    after = list(argv[list(argv).index("tune") + 1 :]) if "tune" in argv else []
    workload = next((a for a in after if not a.startswith("-")), "")
    p.add_argument("workload", choices=TRAINING_WORKLOADS, help="the workload whose side is tuned")
    p.add_argument(
        "--tune_budget_s",
        "--tune-budget-s",
        dest="tune_budget_s",
        type=float,
        default=60.0,
        help="seconds for all trials together, before the measured run (default 60)",
    )
    p.add_argument(
        "--tune_precision",
        "--tune-precision",
        dest="tune_precision",
        action="store_true",
        help="also try bf16 (and on a GPU fp16) autocast: faster on tensor cores, but it changes the "
        "numerics, so a setting that uses it says so wherever it is shown",
    )
    if workload in TRAINING_WORKLOADS:
        add_config_arguments(p, CONFIGS[workload])
    p.set_defaults(handler=lambda args: _run_tuned(args))


def _run_tuned(args: argparse.Namespace) -> int:
    budget = args.tune_budget_s
    if not 1 <= budget <= 3600:
        raise UsageError(f"{budget!r} is out of range; expected 1 to 3600 seconds", param="tune_budget_s")
    return _run_workload(args.workload, args, tune_budget_s=budget, tune_precision=args.tune_precision)


# --------------------------------------------------------------------------------------------- others


def _add_sync(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sync", help=COMMANDS["sync"], description=SYNC_DESCRIPTION)
    p.add_argument(
        "--recreate-lost",
        "--recreate_lost",
        dest="recreate_lost",
        action="store_true",
        help="make a spooled run the store no longer has (its database dropped or replaced) again, in "
        "DEVICEBENCH_EXPERIMENT, from its journal; only for the store that lost it",
    )
    p.set_defaults(handler=_run_sync)


def _run_sync(args: argparse.Namespace) -> int:
    with paused_for_imports():
        from devicebench.tracking.replay import sync_spool  # lazy: MLflow, for this command alone

    settings = load_settings()
    out = sync_spool(settings, recreate_lost=getattr(args, "recreate_lost", False))
    died = f" ({out.died} ended FAILED: process died)" if out.died else ""
    live = f", {out.live} live run(s) skipped" if out.live else ""
    broken = f", {out.broken} corrupt journal(s) skipped" if out.broken else ""
    print(
        f"{PROG}: sync: {out.replayed} run(s) replayed{died}, {out.pending} still pending{live}{broken} "
        f"in {settings.spool_dir}"
    )
    # a corrupt journal waits for the user (fix or remove it); a pending run only for the store
    return 2 if out.broken else 1 if out.pending else 0


def _add_module_command(sub: argparse._SubParsersAction, name: str, module_name: str, help: str) -> None:
    """Commands whose arguments live with their code (`report.cli`, `plan.cli`): add_arguments + run."""
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


SYNC_DESCRIPTION = (
    "Send the runs kept in the local spool (DEVICEBENCH_SPOOL_DIR) while the tracking store was "
    "unreachable to the store, each exactly once. A run whose process still lives is skipped; one whose "
    "process died without ending is sent and ended FAILED. Exit 1 while a run is still pending (the store "
    "is away), 2 when a journal is unreadable (named: fix or remove it)."
)

# One line each in `devicebench --help`: a whole phrase, never one that reads as cut off (a test looks).
COMMANDS: dict[str, str] = {
    **{name: config_cls.ABOUT for name, config_cls in CONFIGS.items()},
    "compare": "compare CPU and GPU runs side by side: speedups, costs, why, regressions",
    "suite": "run an experiment plan (experiments/*.yaml), then write its report",
    "sync": "replay runs spooled while the tracking store was unreachable",
    "tune": "find the fastest way a device runs a config (feeding, threads, NHWC, compiling), then measure it",
}


def build_parser(selected: str | None = None, argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser, with full arguments only for the selected command: `compare` and `suite` take theirs
    from the report's and the suite's own modules, which no other command needs to import. None of it
    imports torch: a workload's arguments come from its torch-free config (`_add_workload`)."""
    parser = OneLineParser(
        prog=PROG,
        description="How much faster is this PyTorch workload on the GPU than on the CPU? Runs are tracked in MLflow.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, help in COMMANDS.items():
        if name != selected:
            sub.add_parser(name, help=help, add_help=False)
        elif name in WORKLOADS:
            _add_workload(sub, name, help)
        elif name == "compare":
            _add_module_command(sub, name, "devicebench.report.cli", help)
        elif name == "suite":
            _add_module_command(sub, name, "devicebench.plan.cli", help)
        elif name == "tune":
            _add_tune(sub, argv)
        else:
            _add_sync(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; translate our exceptions to one line and an exit code."""
    try:
        return _main(argv)
    finally:
        exiting()


def _main(argv: Sequence[str] | None) -> int:
    debug = os.environ.get("DEVICEBENCH_DEBUG") == "1"
    # MLflow logs store migrations at INFO on stderr; our stderr is for our one line.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        parser = build_parser(next((a for a in argv if not a.startswith("-")), None), argv)
        args = parser.parse_args(argv)
        handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return 2
        return _handled(handler, args)
    except UsageError as e:
        _explain_mlflow_run(str(e), argv)
        return _fail(str(e), e.exit_code, e)
    except (SpooledError, Interrupted) as e:
        return _fail(str(e), e.exit_code, e)
    except KeyboardInterrupt as e:
        return _fail("interrupted by Ctrl-C", 130, e)
    except BrokenPipeError:  # `devicebench ... | head`: the reader left; not an error worth a line
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        if debug:
            raise
        if worker_rank() is not None:
            return _fail(one_line(e), 1, e)
        return _fail(f"{one_line(e)} (DEVICEBENCH_DEBUG=1 shows the traceback)", 1, e)


def _handled(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """The command's work. Code it runs that calls `sys.exit` (a user's factory, as its model is checked
    before the run exists) is a failure in one line, exit 1: `sys.exit(0)` there exited 0 over no work."""
    try:
        return handler(args)
    except SystemExit as e:
        raise ExitedInsideRun(e.code) from None


def console() -> NoReturn:
    """The `devicebench` console script: `main`, then leave without interpreter finalisation
    (`util.leave` says why: 1.5 s of every cold run). Callers in a process of their own use `main`."""
    leave(main())


if __name__ == "__main__":
    console()
