"""The server container stopped under a running trainer: what the trainer could not send waits in its spool
volume, and `devicebench sync` in a fresh trainer container delivers it, each point exactly once."""

from __future__ import annotations

import subprocess
import time
from typing import Any

from testbed.containers import verify
from testbed.containers.stack import Stack
from testbed.containers.steps import Steps

EXPERIMENT = "containers-spool"
EPOCHS, TRAIN_LIMIT, BATCH, LOG_EVERY = 2, 4000, 32, 5
EXPECTED_LOSS_POINTS = EPOCHS * (TRAIN_LIMIT // BATCH) // LOG_EVERY
FLAGS = (
    "cifar",
    "--data",
    "synthetic",
    "--epochs",
    str(EPOCHS),
    "--train_limit",
    str(TRAIN_LIMIT),
    "--batch_size",
    str(BATCH),
    "--log_every",
    str(LOG_EVERY),
    "--test_limit",
    "500",
    "--num_workers",
    "0",
)


def wait_for_run(mlflow: Any, trainer: subprocess.Popen[str], timeout: float = 300) -> str:
    """The spool run's id once the store has it (the trainer still running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if trainer.poll() is not None:
            raise AssertionError(
                f"the trainer ended before its run was seen: {(trainer.stdout.read() if trainer.stdout else '')[-600:]}"
            )
        experiment = mlflow.get_experiment_by_name(EXPERIMENT)
        runs = mlflow.search_runs([experiment.experiment_id]) if experiment else []
        if runs:
            return str(runs[0].info.run_id)
        time.sleep(0.5)
    raise AssertionError("the trainer's run did not appear in the store")


def spooled_files(stack: Stack) -> int:
    proc = stack.compose(
        "--profile",
        "cpu",
        "run",
        "--rm",
        "--no-deps",
        "-T",
        "--entrypoint",
        "find",
        "trainer-cpu",
        "/var/lib/devicebench/spool",
        "-type",
        "f",
    )
    return len(proc.stdout.split())


def points(mlflow: Any, run_id: str) -> dict[str, list[tuple[int, float]]]:
    return {
        key: verify.metric_points(mlflow, run_id, key)
        for key in ("train/loss", "train/epoch_loss", "time/epoch_s")
    }


def check_once(found: dict[str, list[tuple[int, float]]]) -> None:
    want = {"train/loss": EXPECTED_LOSS_POINTS, "train/epoch_loss": EPOCHS, "time/epoch_s": EPOCHS}
    for key, history in found.items():
        steps = [step for step, _ in history]
        if len(steps) != want[key] or len(set(steps)) != len(steps):
            raise AssertionError(
                f"{key}: {len(steps)} points, {len(set(steps))} steps; want {want[key]} once each"
            )


def spool_across_restart(steps: Steps, stack: Stack, mlflow: Any) -> None:
    env = {"DEVICEBENCH_EXPERIMENT": EXPERIMENT, "DEVICEBENCH_FINAL_FLUSH_S": "5"}
    with steps.step("server stopped under a running trainer: the spool keeps what it could not send"):
        trainer = stack.popen_trainer(*FLAGS, env=env)
        try:
            run_id = wait_for_run(mlflow, trainer)
            stack.compose("stop", "-t", "1", "mlflow")
            output, _ = trainer.communicate(timeout=900)
        finally:
            if trainer.poll() is None:
                trainer.kill()
        files = spooled_files(stack)
        if files == 0:
            raise AssertionError(f"nothing in the spool volume; the trainer said: {output[-600:]}")
        steps.say(f"run {run_id}: trainer exit {trainer.returncode}, {files} files in the spool volume")
    with steps.step("server started again; devicebench sync delivers the spool, no point lost or doubled"):
        stack.compose("start", "mlflow")
        stack.wait_healthy()
        before = {k: len(v) for k, v in points(mlflow, run_id).items()}
        stack.trainer("sync", timeout=600)
        run = mlflow.get_run(run_id)
        found = points(mlflow, run_id)
        check_once(found)
        if run.info.status != "FINISHED":
            raise AssertionError(f"the run is {run.info.status} after sync")
        counts = {k: len(v) for k, v in found.items()}
        steps.figures.append(f"spool: points in the store before sync {before}, after {counts}")
        steps.say(steps.figures[-1])
        if spooled_files(stack) != 0:
            raise AssertionError("the spool still holds files after sync")
