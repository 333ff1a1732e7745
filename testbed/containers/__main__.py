"""`make test-containers`: both images built as shipped, the compose stack run end to end on the host
network, and everything it started taken down again. Exit 0 when every step passed, 1 naming the step
that failed; with no engine and none that can be started, one SKIPPED line (exit 1 where
DEVICEBENCH_CONTAINERS_REQUIRED=1, as in CI)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from testbed.containers import engine as eng
from testbed.containers import scenario
from testbed.containers.steps import Failed, Steps

PREFIX = "test-containers"


def find_engine(steps: Steps, cleanup: ExitStack, scratch: Path) -> eng.Engine:
    """The user's engine, else a private one (installed first where missing); Skip when neither."""
    found = eng.existing_engine()
    if found is not None:
        return found
    why = eng.can_start_private()
    if why is not None:
        raise eng.Skip(
            f"no container engine answers (DOCKER_HOST unset, `docker info` fails) and none can be started here ({why})"
        )
    with steps.step("install Debian's engine (docker.io, debootstrap, docker-compose)"):
        installed = eng.install_debian_engine()
        steps.say(f"installed: {', '.join(installed) or 'nothing, all present'}")
    with steps.step("start a private dockerd on the host network only"):
        engine = eng.start_private(scratch / "engine")
        cleanup.callback(eng.stop_private, engine)
        steps.say(engine.what)
    return engine


def main() -> int:
    started = time.monotonic()
    steps = Steps(PREFIX)
    interfaces = sorted(os.listdir("/sys/class/net"))
    status = 0
    keep = os.environ.get(
        "DEVICEBENCH_CONTAINERS_SCRATCH", ""
    )  # reuse a folder (its engine's images) when set
    with tempfile.TemporaryDirectory(prefix="devicebench-containers-") as tmp, ExitStack() as cleanup:
        scratch = Path(keep or tmp)
        try:
            engine = find_engine(steps, cleanup, scratch)
            scenario.run(steps, engine, scratch, cleanup)
        except eng.Skip as e:
            print(f"{PREFIX}: SKIPPED: {e}", flush=True)
            return 1 if os.environ.get("DEVICEBENCH_CONTAINERS_REQUIRED") == "1" else 0
        except Failed as e:
            print(f"{PREFIX}: FAILED at step '{e.step}': {e.detail}", flush=True)
            status = 1
    left = sorted(os.listdir("/sys/class/net"))
    if left != interfaces:
        print(f"{PREFIX}: FAILED: network interfaces changed: {interfaces} -> {left}", flush=True)
        status = 1
    print(
        f"{PREFIX}: {'passed' if status == 0 else 'FAILED'} in {time.monotonic() - started:.0f} s wall",
        flush=True,
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
