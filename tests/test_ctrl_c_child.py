"""A command that waits on a child of its own terminal (`tune`'s measured run) leaves a Ctrl-C to the child:
the child ends its run and says "interrupted" once, and the command returns its exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from devicebench.util.children import wait_through_ctrl_c

CHILD = textwrap.dedent(
    """
    import sys, time
    print("ready", flush=True)
    try:
        time.sleep(30)
    except KeyboardInterrupt:
        time.sleep(1.0)  # ending its run: longer than subprocess.run's quarter second
        print("devicebench: error: interrupted by Ctrl-C", file=sys.stderr, flush=True)
        sys.exit(130)
    """
)

PARENT = textwrap.dedent(
    """
    import subprocess, sys
    from devicebench.util.children import wait_through_ctrl_c
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
    sys.exit(wait_through_ctrl_c(child))
    """
)


def test_a_ctrl_c_is_the_childs_to_say_and_its_exit_code_the_commands() -> None:
    # the terminal's Ctrl-C goes to the whole foreground group: the parent and its child
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a shell starts background jobs (CI's, nohup's) with SIGINT ignored, and Python then never
        # raises KeyboardInterrupt: the default given back, as a terminal's foreground job has it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
    time.sleep(0.2)  # the parent is inside wait_through_ctrl_c
    os.killpg(parent.pid, signal.SIGINT)
    _, err = parent.communicate(timeout=30)
    assert parent.returncode == 130, err
    assert err.count("interrupted by Ctrl-C") == 1 and "Traceback" not in err, err


def test_a_child_that_ends_normally_gives_its_own_code() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    started = time.monotonic()
    assert wait_through_ctrl_c(proc) == 3 and time.monotonic() - started < 30
