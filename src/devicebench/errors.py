"""The exceptions that carry a user-facing, one-line message.

The CLI turns each into exactly one line on stderr and an exit code, never a traceback: a user who
mistyped a parameter needs the parameter's name and what is allowed, not our call stack.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user (a parameter, a plan, a setting): exit 2."""

    exit_code = 2

    def __init__(self, message: str, *, param: str | None = None) -> None:
        self.param = param
        super().__init__(f"--{param}: {message}" if param else message)


class DeviceUnavailable(UsageError):
    """The requested device is not on this host: the run fails instead of silently using another."""


class DataUnavailable(UsageError):
    """A dataset file is missing, corrupt or cannot be downloaded: the message names the file and the fix."""


class StoreUnavailable(UsageError):
    """The tracking store does not answer (or refuses our credentials): nothing is run."""


class SpooledError(Exception):
    """The run finished but the store went away: results are safe in the local spool, exit 3."""

    exit_code = 3


class Interrupted(Exception):
    """SIGTERM or Ctrl-C: metrics so far are flushed and the run ends KILLED (exit 130 / 143)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by signal {signum}")
