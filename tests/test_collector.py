"""The garbage collector paused while a command imports (util/collector.py): inside the block it does not
run, what the block loaded is frozen out of its sight, and a cold run pays no full collection over its
imports (8 in a tiny cifar run before, 1.15 s of its fixed cost: docs/measured.md)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from devicebench.util.collector import paused_for_imports
from servers import devicebench_env, migrated_sqlite


@pytest.fixture
def collector_state():
    was_on = gc.isenabled()
    yield
    gc.unfreeze()  # this test process's objects back in the collector's sight
    gc.enable() if was_on else gc.disable()


def test_no_collection_inside_and_what_it_loaded_is_frozen(collector_state: None) -> None:
    gc.enable()
    runs: list[int] = []
    callback = lambda phase, info: runs.append(info["generation"]) if phase == "start" else None  # noqa: E731
    gc.callbacks.append(callback)
    try:
        frozen = gc.get_freeze_count()
        with paused_for_imports():
            assert not gc.isenabled()
            kept = [[i] for i in range(50_000)]  # far past the young generation's threshold
            assert runs == []
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(kept)
    finally:
        gc.callbacks.remove(callback)


def test_a_process_that_turned_the_collector_off_keeps_it_off(collector_state: None) -> None:
    gc.disable()
    with paused_for_imports():
        pass
    assert not gc.isenabled()
    gc.enable()
    with pytest.raises(RuntimeError), paused_for_imports():
        raise RuntimeError("an import that failed")
    assert gc.isenabled()  # resumed on the way out


# A cold `devicebench cifar` with a callback that counts full collections (generation 2) and their time.
COUNTED = """
import gc, json, sys, time
from devicebench.run.cli import main
full = []
def count(phase, info, t=[0.0]):
    if phase == "start":
        t[0] = time.perf_counter()
    elif info["generation"] == 2:
        full.append(time.perf_counter() - t[0])
gc.callbacks.append(count)
code = main(sys.argv[1:])
print(json.dumps({"code": code, "full": full}), file=sys.stderr)
"""


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("argv", "code", "before"),
    [
        (
            ["cifar", "--data", "synthetic", "--train_limit", "64", "--test_limit", "32", "--epochs", "1"],
            0,
            8,
        ),
        # a store with no runs: the report's pipeline and MLflow load, then "no runs match", exit 2
        (["compare", "--no-log"], 2, 5),
    ],
    ids=["cifar", "compare"],
)
def test_a_cold_command_pays_no_full_collection_over_its_imports(
    tmp_path: Path, argv: list[str], code: int, before: int
) -> None:
    env = devicebench_env(
        migrated_sqlite(tmp_path / "mlflow.db"), DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool")
    )
    proc = subprocess.run(
        [sys.executable, "-c", COUNTED, *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    seen = json.loads(proc.stderr.strip().splitlines()[-1])
    assert seen["code"] == code, proc.stderr[-2000:]
    # `before` full collections before (0.02-0.30 s each: 1.15 s in cifar's), as the heap grew through
    # torch, MLflow and torch._dynamo
    assert len(seen["full"]) <= 1, (before, seen)
