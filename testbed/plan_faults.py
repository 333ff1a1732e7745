"""A plan of 30 tiny runs under faults: its warm server killed once, its tracking server restarted twice.

`python -m testbed.plan_faults` (from the repository root, with the venv's python). Every item must be
accounted for, in the suite's summary and in the store (the summary's counts are the store's statuses),
and no metric point lost or doubled: after `devicebench sync`, every run the summary calls finished
holds exactly the points the first of them holds, key by key (the items are repeats of one config), and
no run is left RUNNING. Prints its figures and exits 0 when all hold, 1 when one does not. Too long for
the test suite (minutes on a 2-core host); a real `mlflow server` on 127.0.0.1 and a real suite, no mocks.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
from mlflow.tracking import MlflowClient

from testbed.mlflow_server import VENV_BIN, MlflowServer, wait_healthy

RUNS = 30
PARAMS = "{sizes: '64', repeats: 1, warmup: 0, dtypes: float32, min_time_s: 0, isolation: none, device: cpu}"
SUMMARY = re.compile(r"^suite faults: (\d+) finished, (\d+) failed, (\d+) skipped")
ITEM = re.compile(r"^\[(\d+)/\d+\] ")


def _env(url: str, spool: Path, experiment: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEVICEBENCH_"))}
    env.update(
        MLFLOW_TRACKING_URI=url,
        DEVICEBENCH_EXPERIMENT=experiment,
        DEVICEBENCH_SPOOL_DIR=str(spool),
        DEVICEBENCH_DOTENV="none",
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
        GIT_PYTHON_REFRESH="quiet",
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    return env


def _warm_server_of(suite_pid: int) -> psutil.Process | None:
    """The suite's fork server: its child running `devicebench.util.forkserver`."""
    for child in psutil.Process(suite_pid).children(recursive=True):
        try:
            if "devicebench.util.forkserver" in " ".join(child.cmdline()):
                return child
        except psutil.NoSuchProcess:
            continue
    return None


class Faults:
    """What to do after which item's line: kill the warm server, restart the tracking server."""

    def __init__(self, suite: subprocess.Popen, server: MlflowServer, kill_after: int, restarts: list[int]):
        self.suite, self.server = suite, server
        self.kill_after, self.restarts = kill_after, restarts
        self.done: list[str] = []

    def after(self, index: int) -> None:
        if index == self.kill_after:
            time.sleep(0.5)  # the next item is under way: it dies with its server
            warm = _warm_server_of(self.suite.pid)
            if warm is not None:
                warm.send_signal(signal.SIGKILL)
                self.done.append(f"warm server {warm.pid} killed after item {index}")
            else:
                self.done.append(f"no warm server to kill after item {index}")
        if index in self.restarts:
            threading.Thread(target=self._restart, args=(index,), daemon=True).start()

    def _restart(self, index: int) -> None:
        t0 = time.monotonic()
        self.server.stop()
        time.sleep(2.0)  # down for a while: the items meanwhile retry
        self.server.launch()
        wait_healthy(self.server.url, 180, self.server.proc)
        self.done.append(f"tracking server restarted after item {index} (down {time.monotonic() - t0:.1f} s)")


def _run_suite(
    plan: Path, env: dict[str, str], server: MlflowServer, cwd: Path
) -> tuple[int, list[str], Faults]:
    suite = subprocess.Popen(
        [str(VENV_BIN / "devicebench"), "suite", str(plan)],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    faults = Faults(suite, server, kill_after=5, restarts=[10, 20])
    lines = []
    assert suite.stdout is not None
    for line in suite.stdout:
        lines.append(line.rstrip("\n"))
        print(f"  | {lines[-1]}", flush=True)
        m = ITEM.match(line)
        if m:
            faults.after(int(m.group(1)))
    return suite.wait(), lines, faults


def _running(url: str, experiment: str) -> int:
    """Child runs the store shows RUNNING: the suite must have ended or replayed every one."""
    client = MlflowClient(url)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], "tags.mlflow.parentRunId != ''", max_results=1000)
    return sum(r.info.status == "RUNNING" for r in runs)


def _points(client: MlflowClient, run: object) -> Counter:
    """Points per metric key of one run, counted from its full histories."""
    counts: Counter = Counter()
    for key in run.data.metrics:  # type: ignore[attr-defined]
        counts[key] = len(client.get_metric_history(run.info.run_id, key))  # type: ignore[attr-defined]
    return counts


def _check(url: str, experiment: str, summary: tuple[int, int, int]) -> list[str]:
    """What does not hold: the store against the summary, and every finished run's points."""
    client = MlflowClient(url)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], "tags.mlflow.parentRunId != ''", max_results=1000)
    statuses = Counter(r.info.status for r in runs)
    finished = [r for r in runs if r.info.status == "FINISHED"]
    print(f"store: {len(runs)} child runs, statuses {dict(statuses)}")
    problems = []
    if summary[0] + summary[1] + summary[2] != RUNS:
        problems.append(f"the summary accounts for {sum(summary)} of {RUNS} items")
    if len(finished) != summary[0]:
        problems.append(f"the summary says {summary[0]} finished, the store holds {len(finished)} FINISHED")
    if statuses.get("RUNNING"):
        problems.append(f"{statuses['RUNNING']} run(s) left RUNNING")
    items = Counter(r.data.tags.get("devicebench.suite.item") for r in finished)
    if len(items) != len(finished):
        problems.append("two finished runs of one item")
    if finished:
        reference = _points(client, finished[0])
        total = 0
        for run in finished:
            got = _points(client, run)
            total += sum(got.values())
            if got != reference:
                diff = {
                    k: (got.get(k, 0), reference.get(k, 0))
                    for k in set(got) | set(reference)
                    if got.get(k) != reference.get(k)
                }
                problems.append(
                    f"run {run.info.run_id}: points differ from the first run's (got, expected): {diff}"
                )
        print(
            f"points: {total} in {len(finished)} finished runs, {sum(reference.values())} per run over {len(reference)} keys"
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the working folder (its path is printed)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="plan-faults-"))
    server = MlflowServer.in_folder(work).start(180)
    experiment = "plan-faults"
    env = _env(server.url, work / "spool", experiment)
    plan = work / "plan.yaml"
    plan.write_text(
        f"name: faults\nexperiment: {experiment}\nrepeats: {RUNS}\nreport: false\n"
        f"runs:\n  - entry: matmul\n    params: {PARAMS}\n"
    )
    try:
        t0 = time.monotonic()
        code, lines, faults = _run_suite(plan, env, server, work)
        elapsed = time.monotonic() - t0
        wait_healthy(server.url, 180, server.proc)
        left = _running(server.url, experiment)
        print(f"runs RUNNING when the suite ended: {left}")
        sync = subprocess.run(
            [str(VENV_BIN / "devicebench"), "sync"], env=env, cwd=work, capture_output=True, text=True
        )
        print(f"suite exit {code} in {elapsed:.0f} s; faults: {'; '.join(faults.done)}")
        again = sum("starting it once more" in ln for ln in lines)
        print(f"items started once more (they failed before their run existed): {again}")
        print(f"sync exit {sync.returncode}: {sync.stdout.strip()} {sync.stderr.strip()}")
        found = [SUMMARY.match(ln) for ln in lines]
        got = next((m for m in found if m), None)
        if got is None:
            print("FAIL: no summary line")
            return 1
        problems = _check(server.url, experiment, (int(got[1]), int(got[2]), int(got[3])))
        problems += [f"{left} run(s) RUNNING when the suite ended (before sync)"] if left else []
    finally:
        server.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    for p in problems:
        print(f"FAIL: {p}")
    print("OK: every item accounted for, no point lost or doubled" if not problems else "")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
