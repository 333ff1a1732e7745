"""Session-wide real servers: one SQLite-backed and (where PostgreSQL answers) one PostgreSQL-backed
`mlflow server` on 127.0.0.1, each started once per test session because a start costs ~20 s."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from servers import MlflowServer, pg_available, pg_database

ROOT = Path(__file__).resolve().parents[1]


# The files that take longest, longest first. `make test` gives each of its workers a whole file at a
# time (--dist loadfile) and the next one when it is done; a long file handed out last kept one worker
# busy alone for the last minute or more while the others sat idle. Longest first keeps all busy to the end.
# Order by each file's total seconds in a fresh-clone run (2026-11-25, `--durations=0` summed per file).
SLOWEST_FIRST = (
    "test_matmul.py",  # 78 s
    "test_server_script.py",  # 68
    "test_faults.py",  # 62
    "test_bad_input.py",  # 58
    "test_suite.py",  # 58
    "test_cifar_mlflow.py",  # 57
    "test_demo.py",  # 56, one test
    "test_reliability.py",  # 39
    "test_distributed.py",  # 33
    "test_tuning.py",  # 31
    "test_report_store.py",  # 31
    "test_prices.py",  # 27
    "test_unet_mlflow.py",  # 26
    "test_security.py",  # 21
    "test_model_workload.py",  # 17
    "test_unet_workload.py",  # 10
    "test_cifar_workload.py",  # 8
    "test_cli.py",  # 8
    "test_compare_entry.py",  # 8
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


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real `mlflow server` on a SQLite store, shared by the whole session."""
    d = tmp_path_factory.mktemp("mlflow-sqlite")
    server = MlflowServer(f"sqlite:///{d / 'mlflow.db'}", d / "artifacts", log_path=d / "server.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_uri() -> Iterator[str]:
    """A throwaway PostgreSQL database for this session (dropped afterwards)."""
    if not pg_available():
        pytest.skip("PostgreSQL is not answering on 127.0.0.1:5432")
    with pg_database() as uri:
        yield uri


@pytest.fixture(scope="session")
def pg_mlflow_server(pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real `mlflow server` on PostgreSQL, shared by the whole session."""
    d = tmp_path_factory.mktemp("mlflow-pg")
    server = MlflowServer(pg_uri, d / "artifacts", log_path=d / "server.log")
    server.start(timeout_s=120)
    yield server
    server.stop()


@pytest.fixture
def experiment_name(request: pytest.FixtureRequest) -> str:
    """A fresh experiment per test, so tests sharing a server never see each other's runs."""
    return f"t-{request.node.name[:40]}-{os.getpid()}-{id(request)}"


os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
