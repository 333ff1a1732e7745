"""A run that keeps logging until told to stop: the fault tests kill its server or signal it meanwhile.

`python tests/fault_driver.py WORKDIR` opens a run with `run_context` (settings from the environment, as
the CLI reads them) and logs one point of `fault/i` (value and step = i) and `fault/t` (the wall time)
every `FAULT_DRIVER_INTERVAL_S` seconds until `WORKDIR/finish` exists or `FAULT_DRIVER_MAX_S` passes.

A real workload logs only at the end of a phase; this one logs all the time, so a test can count exactly
which points were logged while the server was away. It writes, all in WORKDIR:
  run_id     as soon as the run exists
  attempted  the number of points whose log call started (rewritten each step)
  logged     the number of points whose log call returned (rewritten each step)
and exits like the CLI: 0, 2 on a user error, 3 when spooled, 128+N on signal N, 130 on Ctrl-C.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from devicebench.config.settings import load_settings
from devicebench.errors import Interrupted, SpooledError, UsageError
from devicebench.tracking.runs import run_context


def _write(path: Path, value: object) -> None:
    """Atomic rewrite, so the test never reads a half-written number."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(value))
    tmp.replace(path)


def drive(workdir: Path) -> int:
    interval = float(os.environ.get("FAULT_DRIVER_INTERVAL_S", "0.05"))
    max_s = float(os.environ.get("FAULT_DRIVER_MAX_S", "120"))
    settings = load_settings()
    with run_context(settings, "fault-driver", {"interval_s": interval}) as tracker:
        _write(workdir / "run_id", tracker.run_id)
        end = time.monotonic() + max_s
        i = 0
        while not (workdir / "finish").exists() and time.monotonic() < end:
            _write(workdir / "attempted", i + 1)
            tracker.log_metrics({"fault/i": float(i), "fault/t": time.time()}, step=i)
            i += 1
            _write(workdir / "logged", i)
            time.sleep(interval)
        tracker.log_text(f"{i} points\n", "driver.txt")
    return 0


def main() -> int:
    workdir = Path(sys.argv[1])
    try:
        return drive(workdir)
    except (SpooledError, UsageError) as e:  # one line, like the CLI (a locked SQLite store, a bad setting)
        print(f"devicebench: error: {e}", file=sys.stderr)
        return e.exit_code
    except Interrupted as e:
        return e.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
