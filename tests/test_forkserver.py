"""The warm fork server a plan's runs start from (util/forkserver.py): each command its own process,
with its own stderr, environment, cwd and exit code; a crash or a signal is that child's alone, and the
server forks the next one. Cheap: the server preloads only the standard library here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devicebench.util.forkserver import ForkServer, module_of


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("modules")
    (path / "probe.py").write_text(
        "import os, sys\nprint(os.getcwd(), os.environ['PROBE'], sys.argv[1:], __name__, file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    return path


@pytest.fixture(scope="module")
def server(modules: Path):
    fs = ForkServer(["json"], {**os.environ, "PYTHONPATH": str(modules)})
    assert fs.ready(60) == 1  # one thread when it forks: no pool, no sender, nothing to copy half-held
    yield fs
    fs.close()
    assert fs.proc.returncode == 0


def test_a_child_runs_as_python_m_with_its_own_env_cwd_stderr_and_code(server, tmp_path: Path) -> None:
    env = {**server.env, "PROBE": "here"}
    assert server.serves(env) and not server.serves({**env, "PYTHONPATH": "/elsewhere"})
    child = server.start("probe", ["--x", "1"], env, tmp_path)
    _, err = child.communicate(30)
    assert child.pid != server.proc.pid
    assert child.returncode == 3
    assert err.strip() == f"{tmp_path} here ['--x', '1'] __main__"


def test_a_crash_and_a_signal_end_one_child_and_the_next_runs(server, tmp_path: Path) -> None:
    crash = server.start("devicebench_no_such_module", [], os.environ, tmp_path)
    _, err = crash.communicate(30)
    assert crash.returncode == 1 and "No module named devicebench_no_such_module" in err
    sleeper = server.start("http.server", ["--bind", "127.0.0.1", "0"], os.environ, tmp_path)
    sleeper.send_signal(signal.SIGTERM)  # as the suite forwards a SIGTERM of the plan
    sleeper.communicate(30)
    assert sleeper.returncode == -signal.SIGTERM
    ok = server.start("json.tool", ["--help"], os.environ, tmp_path)
    ok.communicate(30)
    assert ok.returncode == 0


def test_module_of_takes_only_this_interpreters_dash_m_commands() -> None:
    assert module_of([sys.executable, "-P", "-m", "devicebench", "cifar"]) == ("devicebench", ["cifar"])
    assert module_of([sys.executable, "-m", "devicebench"]) == ("devicebench", [])
    assert module_of(["/other/python", "-m", "devicebench"]) is None
    assert module_of([sys.executable, "-c", "pass"]) is None


def test_a_caller_that_never_asked_for_ready_closes_a_quiet_server() -> None:
    """A plan whose runs never needed the server closes it with its `ready` line unread: the server's
    next read is a reset, not an end of file, and it printed a traceback on the plan's stderr."""
    code = (
        "import select, sys\nfrom devicebench.util.forkserver import ForkServer\n"
        "fs = ForkServer(['json'], {})\n"
        "assert select.select([fs.control], [], [], 60)[0]  # 'ready' waits, unread\n"
        "fs.close()\nsys.exit(fs.proc.returncode)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stderr) == (0, "")


def test_the_plan_runs_cold_when_asked(tmp_path: Path) -> None:
    from devicebench.plan import warm

    env = {**os.environ, warm.WARM_ENV: "0"}
    code = (
        "import os; from devicebench.plan import warm\nwith warm.warm_server(dict(os.environ)) as s: print(s)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "None", out.stderr


def test_leaving_joins_threads_runs_atexit_flushes_and_keeps_the_code() -> None:
    """`util.leave`: what interpreter shutdown does that matters, without its module teardown (1.5 s of
    every cold run): a worker thread finishes, atexit handlers run after it, buffered output is kept."""
    code = (
        "import atexit, sys, threading, time\n"
        "from devicebench.util.leave import leave\n"
        "atexit.register(lambda: print('atexit'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread'))).start()\n"
        "print('buffered', end=' ')\n"
        "sys.stderr.write('err')\n"
        "leave(3)\n"
        "print('never')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout.split(), proc.stderr) == (3, ["buffered", "thread", "atexit"], "err")


def test_leaving_stops_an_idle_thread_pool_as_the_interpreter_would() -> None:
    """A ThreadPoolExecutor left open (MLflow keeps one per artifact repository: `infer` downloading a
    model from a local store) has idle non-daemon workers that only threading's exit hook stops: joined
    without it, `leave` waited for them for ever."""
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from devicebench.util.leave import leave\n"
        "pool = ThreadPoolExecutor(2)\n"
        "print(pool.submit(lambda: 'pooled').result())\n"
        "leave(4)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stdout.split(), proc.stderr) == (4, ["pooled"], "")


def test_a_plan_asks_a_warm_child_what_devices_this_host_has(server, tmp_path: Path) -> None:
    """The suite's skip check forks `devicebench.host.capacity` from its warm server rather than import
    torch itself; the child's one JSON line is the answer `capacity` gives in-process."""
    from devicebench.host.capacity import capacity
    from devicebench.plan.items import Starter
    from devicebench.plan.suite import _capacity

    child = server.start("devicebench.host.capacity", ["cpu"], server.env, tmp_path, stdout=True)
    _, out = child.communicate(timeout=120)
    assert child.returncode == 0 and out.strip().splitlines()[-1] == json.dumps(list(capacity("cpu")))
    assert _capacity("cpu", Starter(server)) == capacity("cpu")
    assert _capacity("cuda:7", Starter(server)) is None  # no such device here: skipped, not failed


def test_a_child_inherits_the_servers_objects_frozen(server, modules: Path, tmp_path: Path) -> None:
    """The server freezes what it loaded before it serves: a child's collector never walks the inherited
    heap (a full walk, ~1 s of CPU, slowed a warm matmul run's NumPy measurement to 0.85 of a cold one)."""
    (modules / "frozen_probe.py").write_text(
        "import gc, sys\nprint(gc.get_freeze_count(), file=sys.stderr)\n"
    )
    child = server.start("frozen_probe", [], server.env, tmp_path)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0 and int(err.split()[-1]) > 1000, err


def test_a_child_counts_the_servers_file_pages_as_a_fresh_process_does(
    server, modules: Path, tmp_path: Path
) -> None:
    """A fork leaves the file pages its server had resident (libraries' code) out of its own resident
    set; a child maps them again first, so a run's `memory/peak_rss_bytes` forked reads as fresh (616
    against 945 MiB for a tiny cifar run, before). Here: the child's file-backed RSS against its server's."""
    (modules / "rss_probe.py").write_text(
        "import os, sys\n"
        "def file_kb(pid):\n"
        "    with open(f'/proc/{pid}/status') as f:\n"
        "        return next(int(line.split()[1]) for line in f if line.startswith('RssFile:'))\n"
        "print(file_kb('self'), file_kb(os.getppid()), file=sys.stderr)\n"
    )
    child = server.start("rss_probe", [], server.env, tmp_path)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    mine, servers = (int(kb) for kb in err.split()[-2:])
    assert mine >= 0.95 * servers, f"the child has {mine} kB of file pages resident, its server {servers}"


def test_a_plans_warm_server_loads_gitpython_even_where_no_git_is_installed(
    modules: Path, tmp_path: Path
) -> None:
    """Each new run's commit tag (MLflow's `resolve_tags`) imports GitPython: 61 ms of every warm run
    against 13 ms once the server has it (tracking/git_source.py). Where no git executable is on PATH
    (a slim image) and nothing set GIT_PYTHON_REFRESH, GitPython's import raises unless told to be
    quiet, and the whole plan would then have started cold."""
    from devicebench.plan.warm import WARM_MODULES

    assert "devicebench.tracking.git_source" in WARM_MODULES
    (modules / "git_probe.py").write_text("import sys\nprint('git' in sys.modules, file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if k != "GIT_PYTHON_REFRESH"}
    env.update(PATH=str(tmp_path), PYTHONPATH=str(modules))  # an empty folder: no git
    fs = ForkServer(["devicebench.tracking.git_source"], env)
    try:
        assert fs.ready(60) == 1
        child = fs.start("git_probe", [], env, tmp_path)
        _, err = child.communicate(timeout=60)
    finally:
        fs.close()
    assert (child.returncode, err.strip()) == (0, "True"), err
