"""What the whole test session shares: a SQLite-backed `mlflow server` on 127.0.0.1 (a start costs ~20 s
on a loaded 2-core host) and the zygote that forks `devicebench` commands (tests/zygote.py). Under
`make test` (xdist) the controller starts both once for all workers, while the workers import and
collect (SHARED_SERVER, SHARED_ZYGOTE). PostgreSQL-backed servers are test_server_script.py's: the
compose service's own script, on a throwaway database."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from servers import MlflowServer, wait_healthy
from zygote import SHARED_ZYGOTE
from zygote import launch as launch_zygote

ROOT = Path(__file__).resolve().parents[1]


# The files that take longest, longest first. `make test` gives each of its workers a whole file at a
# time (--dist loadfile) and the next one when it is done; a long file handed out last kept one worker
# busy alone for the last minute or more while the others sat idle. Longest first keeps all busy to the end.
# xdist would put the files with most tests first instead (test_demo.py, one test of 39 s, went last and
# ran alone at the end), hence `--no-loadscope-reorder` in the Makefile.
# Order by each file's seconds on one worker in a `make test` beside other work (2026-11-29, 2-core AMD
# EPYC, load ~6; the order, not the figures, is what is kept). A file that mostly waits (the outage one
# waits out its runs' final flush) goes first too: its worker waits while the others use both cores.
SLOWEST_FIRST = (
    "test_outage_mid_run.py",  # 141 s, three real servers killed and restarted
    "test_cifar_mlflow.py",  # 278
    "test_demo.py",  # 170, one test
    "test_plan_sync_faults.py",  # 166, a suite item stopped at its 15 s time limit
    "test_bad_input.py",  # 159
    "test_report_store.py",  # 154
    "test_server_script.py",  # 152
    "test_reliability.py",  # 122
    "test_unet_workload.py",  # 109
    "test_suite.py",  # 107
    "test_faults.py",  # 106
    "test_unet_mlflow.py",  # 104
    "test_distributed.py",  # 101
    "test_serving_http.py",  # 79
    "test_compare_entry.py",  # 75
    "test_busy_host.py",  # 70
    "test_tuning.py",  # 65
    "test_cifar_workload.py",  # 63
    "test_matmul.py",  # 61
    "test_security.py",  # 52
    "test_tracking.py",  # 49
    "test_bench_repeat.py",  # 45
    "test_model_workload.py",  # 42
    "test_mlproject_python.py",  # 42
    "test_cifar_data.py",  # 39
    "test_layout.py",  # 34
    "test_docker_files.py",  # 26
    "test_report_logic.py",  # 24
    "test_report_golden.py",  # 21
    "test_report_cost.py",  # 20
    "test_training_gpu_paths.py",  # 20
    "test_reliability_v_inputs.py",  # 19
    "test_loadgen.py",  # 18
)


def _slowest_first(item: pytest.Item) -> int:
    name = item.path.name
    return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slowest files first (a stable sort: a file's own order is kept); GPU tests are kept and skipped by
    marker where torch sees no CUDA device."""
    items.sort(key=_slowest_first)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device on this host")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    _freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a file's last test (its fixtures gone): what is still alive is kept (imports, caches)."""
    try:
        return (yield)
    finally:
        if nextitem is None or nextitem.path != item.path:
            _freeze()


def _freeze() -> None:
    """What a worker keeps (torch, MLflow, every test module, each file's lazy imports: over a million
    objects) frozen out of the collector's sight, after one collection of what is new since the last
    freeze: a full collection then walks only what the running file made. Before, each of a worker's
    12-14 full collections walked all of it: ~20 CPU-s over three workers in `make test`, ~12 after
    (2026-11-25; one run each, both besides a DataLoader's 5-s shutdown wait in one of them)."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Train on one intra-op thread in tests that time nothing: on a shared 2-core host two OpenMP
    threads spin against the neighbours and a tiny step took 10-100x longer (133 ms against 12 ms)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


# Where the controller of an xdist run tells its workers about the server it started for them (JSON: its
# folder and port). One server, not one per worker: each start is ~6 CPU-s of imports, and on a
# 2-core host under three workers the first test of each worker waited 15-45 s for its own.
SHARED_SERVER = "DEVICEBENCH_TESTS_SQLITE_SERVER"
# the controller's own server and zygote, and their folder
_SHARED = pytest.StashKey[tuple[MlflowServer, subprocess.Popen, Path]]()


def _is_xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """The controller launches the shared server and the shared zygote (tests/zygote.py) before its
    workers start (they inherit os.environ), and waits for neither: both load while workers collect."""
    if not _is_xdist_controller(config) or SHARED_SERVER in os.environ:
        return
    d = Path(tempfile.mkdtemp(prefix="devicebench-tests-mlflow-"))
    server = MlflowServer.in_folder(d).launch()
    zygote = launch_zygote(d / "zygote.socket", d)
    config.stash[_SHARED] = (server, zygote, d)
    os.environ[SHARED_SERVER] = json.dumps({"folder": str(d), "port": server.port})
    os.environ[SHARED_ZYGOTE] = str(d / "zygote.socket")


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_SHARED, None)
    if shared is not None:
        server, zygote, d = shared
        server.stop()
        assert zygote.stdin is not None
        zygote.stdin.close()  # its end of file: the zygote exits
        zygote.wait(10)
        os.environ.pop(SHARED_SERVER, None)
        os.environ.pop(SHARED_ZYGOTE, None)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real `mlflow server` on a SQLite store, shared by the whole session (and, under xdist, by every
    worker: the controller's, which the workers only wait for and never stop)."""
    shared = os.environ.get(SHARED_SERVER)
    if shared:
        fields = json.loads(shared)
        server = MlflowServer.in_folder(Path(fields["folder"]), port=fields["port"])
        wait_healthy(server.url, 120)
        yield server
        return
    server = MlflowServer.in_folder(tmp_path_factory.mktemp("mlflow-sqlite"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def experiment_name(request: pytest.FixtureRequest) -> str:
    """A fresh experiment per test, so tests sharing a server never see each other's runs. Not named by
    `id(request)`: a freed request's address came back for the next parametrized case, whose name cut
    at 40 characters was the same, and its experiment already existed (seen 2026-11-29)."""
    return f"t-{request.node.name[:40]}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
