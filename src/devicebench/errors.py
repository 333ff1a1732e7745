"""The exceptions that carry a user-facing, one-line message.

The CLI turns each into exactly one line on stderr and an exit code, never a traceback: a user who
mistyped a parameter needs the parameter's name and what is allowed, not our call stack.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence


class UsageError(Exception):
    """Bad input from the user (a parameter, a plan, a setting): exit 2."""

    exit_code = 2

    def __init__(self, message: str, *, param: str | None = None) -> None:
        self.param, self.said = param, message  # `said`: the message without its `--param: `
        super().__init__(f"--{param}: {message}" if param else message)


class DeviceUnavailable(UsageError):
    """The requested device is not on this host: the run fails instead of silently using another."""


class DataUnavailable(UsageError):
    """A dataset file is missing, corrupt or cannot be downloaded: the message names the file and the fix."""


class StoreUnavailable(UsageError):
    """The tracking store does not answer (or refuses our credentials): nothing is run."""


class OutOfMemory(UsageError):
    """The work did not fit in host or device memory: exit 2, run FAILED, and the line names what to lower.

    An allocation failure is a property of the parameters on this machine, not a bug: the user needs to
    know which knob makes the run fit, not which line of the workload happened to allocate.
    """

    @classmethod
    def from_exception(cls, exc: BaseException, params: Sequence[str]) -> OutOfMemory | None:
        """An OutOfMemory for `exc` when it is an allocation failure (NumPy, torch CPU, CUDA, MPS), else None.

        Matched by type and message rather than by importing torch: `torch.OutOfMemoryError` (CUDA),
        torch's CPU allocator (`RuntimeError: ... can't allocate memory`) and NumPy (`MemoryError`).
        """
        text = " ".join(str(exc).split())
        if isinstance(exc, MemoryError):
            where = "host"
        elif type(exc).__name__ == "OutOfMemoryError":
            where = "GPU" if "CUDA" in text or "GPU" in text else "device"
        elif isinstance(exc, RuntimeError) and "can't allocate memory" in text:
            where = "host"
        elif isinstance(exc, RuntimeError) and "out of memory" in text.lower():
            where = "device"
        else:
            return None
        lower = ", ".join(f"--{p}" for p in params) if params else "the workload's size parameters"
        detail = text[:300] if text else type(exc).__name__
        return cls(f"out of {where} memory ({detail}); lower {lower}")


class Diverged(UsageError):
    """The training loss became NaN or infinite: the run ends FAILED with `diverged at step N`, exit 1.

    Every later number of such a run (accuracy, timings of NaN arithmetic) measures nothing, so it must
    not reach a report as a result. Found where the buffered losses reach the host anyway (a LossLog
    flush, the epoch mean), never by a per-step sync. A UsageError for its one line without a traceback,
    but exit 1: the parameters were valid, the run failed.
    """

    exit_code = 1

    def __init__(self, step: int) -> None:
        self.step = step
        super().__init__(f"diverged at step {step}")


class ExitedInsideRun(UsageError):
    """Code a command ran (a user's model or factory) called `sys.exit`: its run, if it has one, ends
    FAILED, and the command exits 1.

    Whatever code it asked for, 0 included: the work stopped before the run could end, so nothing it
    logged is a result, and a plan must not count it as one."""

    exit_code = 1

    def __init__(self, code: object) -> None:
        self.code = code
        super().__init__(
            f"code the command ran (a model or factory) called sys.exit({code!r}) before its run ended; "
            "nothing of it is a result"
        )


class SpoolUnwritable(UsageError):
    """The spool folder cannot be written (a full disk): the run ends FAILED with the folder named.

    Every operation is journalled before it is sent, so a run that cannot journal is not a run whose
    results can be trusted to arrive: it stops, says where, and is not left RUNNING."""


class SpooledError(Exception):
    """The run finished but the store went away: results are safe in the local spool, exit 3."""

    exit_code = 3


class Interrupted(Exception):
    """SIGTERM or Ctrl-C: metrics so far are flushed and the run ends KILLED (exit 130 / 143)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal_name(signum)} (signal {signum})")


def signal_name(signum: int) -> str:
    """`SIGTERM` for 15: the KILLED run's error tag says which signal, in the words `kill -l` uses."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
