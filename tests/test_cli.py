"""The CLI: bad input is one line and exit 2, no traceback, no FINISHED run; an unreachable store fails fast."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from own_tags import facts_of

from servers import (
    ABSENT_GPU,
    ABSENT_GPU_SAYS,
    devicebench_env,
    migrated_sqlite,
    one_error_line,
    run_cli,
    runs_of,
)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["matmul", "--sizes=-5"], "--sizes"),
        (["matmul", "--dtypes=float8"], "--dtypes: unknown value 'float8'"),
        (["matmul", "--device", "gpu"], "--device: unknown device 'gpu'"),
        (["matmul", "--repeats", "many"], "--repeats: 'many' is not an integer"),
        (["matmul", "--colour", "red"], "unrecognized arguments: --colour red"),
        (["nosuchworkload"], "invalid choice: 'nosuchworkload'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    env = devicebench_env(f"sqlite:///{tmp_path / 'm.db'}")
    proc = run_cli(args, env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert needle in one_error_line(proc.stderr)
    assert not (tmp_path / "m.db").exists(), "validation happens before any store is touched"


def test_help_explains_each_parameter(tmp_path: Path) -> None:
    proc = run_cli(["matmul", "--help"], devicebench_env("sqlite:///x.db"), cwd=tmp_path, real=True)
    assert proc.returncode == 0
    for flag in ("--sizes", "--dtypes", "--backends", "--repeats", "--warmup", "--device"):
        assert flag in proc.stdout
    assert "default 8000" in proc.stdout


def test_an_unreachable_tracking_uri_fails_within_15_s_naming_it(tmp_path: Path) -> None:
    """15 s on an idle machine; on a loaded one, what matters is that the store check adds little to
    starting Python at all, so a refused typo started at the same moment is the yardstick."""
    from concurrent.futures import ThreadPoolExecutor

    env = devicebench_env("http://127.0.0.1:9")

    def timed(args: list[str]) -> tuple[float, object]:
        t0 = time.monotonic()
        proc = run_cli(args, env, cwd=tmp_path, timeout_s=60)
        return time.monotonic() - t0, proc

    with ThreadPoolExecutor(2) as pool:
        unreachable = pool.submit(timed, ["matmul", "--sizes", "64"])
        typo = pool.submit(timed, ["matmul", "--sizes", "-1"])
        (took, proc), (startup, _) = unreachable.result(), typo.result()
    assert took < max(15.0, startup + 10.0), f"{took:.1f} s (a refused typo took {startup:.1f} s)"
    assert proc.returncode == 2
    assert "http://127.0.0.1:9" in one_error_line(proc.stderr)


def test_an_absent_gpu_leaves_a_failed_run_on_the_embedded_store(tmp_path: Path) -> None:
    uri = migrated_sqlite(tmp_path / "m.db")
    env = devicebench_env(uri, DEVICEBENCH_EXPERIMENT="cli", DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"))
    proc = run_cli(["matmul", "--device", ABSENT_GPU, "--sizes", "64"], env, cwd=tmp_path)
    assert proc.returncode == 2
    assert ABSENT_GPU_SAYS.search(one_error_line(proc.stderr))
    (run,) = runs_of(uri, "cli")
    assert run.info.status == "FAILED"
    assert ABSENT_GPU_SAYS.match(facts_of(run)["devicebench.error"])  # a failed run's tags few too


@pytest.mark.parametrize("flags", [["--bogus", "1"], ["--sizes", "0"]])
def test_a_flag_refused_under_mlflow_run_says_why_on_the_run_mlflow_made(
    tmp_path: Path, flags: list[str]
) -> None:
    """Issue 40, item 17: `mlflow run . -e matmul -P bogus=1` (or sizes=0) left a FAILED run with MLflow's
    random name and nothing saying why. `mlflow run` makes the run and hands its id to the command
    (MLFLOW_RUN_ID); the command's one-line refusal now reaches that run, which ends FAILED."""
    from mlflow.tracking import MlflowClient

    uri = migrated_sqlite(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("x")).info.run_id
    proc = run_cli(["matmul", *flags], devicebench_env(uri, MLFLOW_RUN_ID=run_id), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    run = client.get_run(run_id)
    line = proc.stderr.strip().removeprefix("devicebench: error: ")
    assert run.data.tags["devicebench.error"] == line and run.data.tags["devicebench.workload"] == "matmul"
    assert run.info.status == "FAILED"
