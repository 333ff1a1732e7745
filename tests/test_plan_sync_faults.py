"""Issue 56, "Reliability V": a plan and `sync` under faults. A run that calls `sys.exit(0)`, an item
that hangs, a warm server killed mid-plan, `log_models: first` over a failed first repeat, two reports
in one second, `sync` over a lying `sent` mark, a lost run's name, a deleted experiment and a second
`sync` at once. In-process against a real store where possible; one real suite at the end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from devicebench.config.settings import Settings, load_settings
from devicebench.errors import ExitedInsideRun, UsageError
from devicebench.plan.handoff import Handoff
from devicebench.plan.items import Ended, Parent, Starter, finish, item_verdict
from devicebench.plan.spec import DEFAULT_TIME_LIMIT_S, load_plan
from devicebench.plan.suite import _run_items, next_commands
from devicebench.report.judge.judgement import judge as judge_report
from devicebench.report.model.comparison import compare
from devicebench.report.render.files import write_report
from devicebench.tracking.journal import Journal
from devicebench.tracking.replay import sync_spool
from devicebench.tracking.runs import run_context
from devicebench.util.children import python_argv
from devicebench.util.forkserver import ForkServer
from servers import MlflowServer, devicebench_env, run_cli, runs_of
from zygote import shared


def settings_for(uri: str, tmp_path: Path, experiment: str) -> Settings:
    return load_settings(
        {
            "MLFLOW_TRACKING_URI": uri,
            "DEVICEBENCH_EXPERIMENT": experiment,
            "DEVICEBENCH_SPOOL_DIR": str(tmp_path / "spool"),
            "DEVICEBENCH_FLUSH_INTERVAL_S": "0.2",
        }
    )


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(text))
    return path


# ------------------------------------------------------------- 2: sys.exit(0) inside a run is no success


def _suite_parent(url: str, experiment: str) -> tuple[MlflowClient, str, str]:
    """A client of the store, a new experiment and a parent run in it, as a suite starts its items under."""
    client = MlflowClient(url)
    exp = client.create_experiment(experiment)
    return client, exp, client.create_run(exp).info.run_id


def test_sys_exit_0_inside_a_run_ends_it_failed_and_the_command_exits_1(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """The run ended FAILED but the command exited 0 (SystemExit(0) went up through the CLI)."""
    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    with pytest.raises(ExitedInsideRun) as err, run_context(s, "model", {}) as t:
        run_id = t.run_id
        sys.exit(0)
    assert err.value.exit_code == 1 and "\n" not in str(err.value)
    run = MlflowClient(mlflow_server.url).get_run(run_id)
    assert run.info.status == "FAILED"
    assert "called sys.exit(0)" in run.data.tags["devicebench.error"]


@pytest.mark.e2e
def test_sys_exit_0_while_the_model_is_checked_is_one_line_and_exit_1(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """A factory that calls sys.exit(0) as it builds (checked before the run exists) ended the command
    silently with exit 0."""
    (tmp_path / "quits.py").write_text("import sys\n\ndef build(num_classes=10):\n    sys.exit(0)\n")
    env = devicebench_env(mlflow_server.url, DEVICEBENCH_EXPERIMENT=experiment_name)
    proc = run_cli(
        ["model", "--model", "quits.py:build", "--input", "3x8x8"], env, cwd=tmp_path, timeout_s=120
    )
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "called sys.exit(0) before its run ended" in lines[0], proc.stderr
    assert runs_of(mlflow_server.url, experiment_name) == []


def test_an_item_is_judged_by_its_runs_status_in_the_store_not_its_exit_code(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """A child that exits 0 over a FAILED run was counted "finished" (`suite/finished=3` over three
    FAILED runs); the store's status is the verdict."""
    plan = load_plan(write(tmp_path, "name: t\nruns: [{entry: matmul}]\n"))
    item = plan.runs[0]
    client, exp, parent = _suite_parent(mlflow_server.url, experiment_name)
    child = client.create_run(
        exp, tags={"mlflow.parentRunId": parent, "devicebench.suite.item": item.item_id}
    ).info.run_id
    client.set_tag(child, "devicebench.error", "boom")
    client.set_terminated(child, "FAILED")
    where = Parent(settings_for(mlflow_server.url, tmp_path, experiment_name), exp, parent)
    verdict = item_verdict(item, Ended(0, ""), where)
    assert not verdict.finished and verdict.reason == "its run is FAILED in the store (exit 0): boom"
    client.set_terminated(child, "FINISHED")
    assert item_verdict(item, Ended(0, ""), where).finished
    assert item_verdict(item, Ended(0, ""), None).finished, "without a store, the exit code is what is known"


def test_a_run_its_process_left_running_is_settled_by_the_suite(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """A run spooled while the store was away (exit 3) is replayed once the store answers, and counts;
    a run whose process died before it had a journal (killed with its warm server between creating
    the run and journalling it) was left RUNNING for good: it ends KILLED, saying why."""
    items = load_plan(write(tmp_path, "name: t\nrepeats: 2\nruns: [{entry: matmul}]\n")).runs
    client, exp, parent = _suite_parent(mlflow_server.url, experiment_name)
    spooled, orphan = (
        client.create_run(
            exp, tags={"mlflow.parentRunId": parent, "devicebench.suite.item": i.item_id}
        ).info.run_id
        for i in items
    )
    settings = settings_for(mlflow_server.url, tmp_path, experiment_name)
    _journal(settings.spool_dir, spooled, mlflow_server.url, OPS).close()
    where = Parent(settings, exp, parent)
    assert item_verdict(items[0], Ended(3, "results spooled"), where).finished
    assert client.get_run(spooled).info.status == "FINISHED" and not (settings.spool_dir / spooled).exists()
    verdict = item_verdict(items[1], Ended(-9, ""), where)
    assert not verdict.finished and not verdict.again
    run = client.get_run(orphan)
    assert run.info.status == "KILLED"
    assert (
        run.data.tags["devicebench.error"]
        == "its process ended (-9, killed by SIGKILL) without ending its run"
    )


@pytest.mark.e2e
def test_an_item_that_failed_before_its_run_existed_is_started_once_more(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str, capsys: pytest.CaptureFixture
) -> None:
    """An item started while the tracking server restarted failed creating its run: listed failed, no
    run in the store. The store holds no run of it, so it is started again, once, and counts."""
    plan = load_plan(
        write(
            tmp_path,
            "name: t\nruns:\n  - entry: matmul\n    params: {sizes: '32', repeats: 1, warmup: 0,"
            " backends: numpy, min_time_s: 0, isolation: none}\n",
        )
    )
    client, exp, parent = _suite_parent(mlflow_server.url, experiment_name)
    (tmp_path / "once").mkdir()  # the first start dies before its run exists, as a store away would make it
    (tmp_path / "once" / "sitecustomize.py").write_text(
        "import os, pathlib\nmark = pathlib.Path(__file__).with_name('died')\n"
        "if not mark.exists():\n    mark.write_text('')\n    os._exit(1)\n"
    )
    base = devicebench_env(mlflow_server.url, DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"))

    def env_for(item: object) -> dict[str, str]:
        env = Handoff(parent, exp, f"t:{parent}", plan.runs[0].item_id, "").env(base)
        return {**env, "PYTHONPATH": f"{tmp_path / 'once'}{os.pathsep}{env['PYTHONPATH']}"}

    settings = settings_for(mlflow_server.url, tmp_path, experiment_name)
    outcome = _run_items(plan, set(), env_for, Starter(None), Parent(settings, exp, parent))
    assert (outcome.finished, outcome.failed) == (1, []), outcome.failed
    assert (
        "it left no run in the store (exit 1: no message); starting it once more" in capsys.readouterr().out
    )
    assert [r.info.status for r in client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent}'")] == [
        "FINISHED"
    ]


@pytest.mark.e2e
def test_an_item_killed_before_its_run_existed_is_a_killed_run_in_the_store(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """A factory that hangs at import is stopped at the item's time limit before its run exists: it was a
    line in the summary and suite/failed only, nothing in the store. Now a KILLED run of the item, with
    the reason, under the parent, with the plan's tag and the current schema."""
    (tmp_path / "stuck.py").write_text(
        "import time\ntime.sleep(600)\n\ndef build(num_classes=10):\n    pass\n"
    )
    plan = load_plan(
        write(
            tmp_path,
            # the factory by its absolute path: the item's process runs in the suite's folder, where a
            # bare `stuck.py` is not, and exits 2 at once (this passed only where that took over 5 s)
            f"name: t\nruns:\n  - entry: model\n    params: {{model: '{tmp_path / 'stuck.py'}:build', "
            "input: 3x8x8}\n    time_limit_s: 5\n",
        )
    )
    client, exp, parent = _suite_parent(mlflow_server.url, experiment_name)
    base = devicebench_env(mlflow_server.url, DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"))
    item = plan.runs[0]

    def env_for(_: object) -> dict[str, str]:
        return Handoff(parent, exp, f"t:{parent}", item.item_id, "").env(base)

    settings = settings_for(mlflow_server.url, tmp_path, experiment_name)
    where = Parent(settings, exp, parent, suite=f"t:{parent}")
    outcome = _run_items(plan, set(), env_for, Starter(None), where)
    assert [r for _, r in outcome.failed] == ["KILLED: ran past its time limit of 5 s (time_limit_s)"]
    (run,) = client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent}'")
    assert run.info.status == "KILLED"
    assert run.data.tags["devicebench.error"].endswith("stopped by the suite before its run existed")
    assert run.data.tags["devicebench.suite.item"] == item.item_id
    assert run.data.tags["devicebench.suite"] == f"t:{parent}" and run.data.tags["devicebench.schema"] == "1"


def test_a_store_away_is_waited_for_once_then_failed_fast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The suite waits for a store that does not answer before each item; once a wait has run out,
    a plan of many items must not wait that long again for each."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    from testbed.mlflow_server import free_port

    where = Parent(settings_for(f"http://127.0.0.1:{free_port()}", tmp_path, "x"), "0", "0" * 32)
    t0 = time.monotonic()
    where.wait_for_store(1.5)
    waited = time.monotonic() - t0
    where.wait_for_store(1.5)
    assert waited >= 1.5 and time.monotonic() - t0 - waited < 1.0 and where.gone
    assert capsys.readouterr().err.count("the tracking store does not answer") == 1


# ------------------------------------------------------------------ 12: every item has a time limit


def test_a_plan_sets_time_limits_and_refuses_a_bad_one_in_one_line(tmp_path: Path) -> None:
    runs = "[{entry: matmul}, {entry: matmul, params: {sizes: '64'}, time_limit_s: 2.5}]"
    plan = load_plan(write(tmp_path, f"name: t\ntime_limit_s: 600\nruns: {runs}\n"))
    assert [r.time_limit_s for r in plan.runs] == [600.0, 2.5]
    assert load_plan(write(tmp_path, "name: t\nruns: [{entry: matmul}]\n")).runs[0].time_limit_s == (
        DEFAULT_TIME_LIMIT_S
    )
    for bad in ("0", "-1", "true", "'1h'", "1e9"):
        with pytest.raises(UsageError) as err:
            load_plan(write(tmp_path, f"name: t\ntime_limit_s: {bad}\nruns: [{{entry: matmul}}]\n"))
        assert "time_limit_s: must be a number of seconds above 0" in str(err.value)


def test_a_child_past_its_time_limit_is_stopped_not_waited_for() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; print('started', file=sys.stderr, flush=True); time.sleep(100)",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    t0 = time.monotonic()
    ended = finish(proc, 2.0)
    assert ended.timed_out and ended.code == -signal.SIGTERM
    assert ended.stderr == "started\n", "what it said before it was stopped is kept"
    assert time.monotonic() - t0 < 10


def test_a_thread_that_never_ends_does_not_hold_the_exit(tmp_path: Path) -> None:
    """A user's factory started a non-daemon thread: the run FINISHED and its process never exited
    (the exit joins every such thread without a bound), so the plan hung on it for good."""
    code = (
        "import threading, time\n"
        "import devicebench.util.leave as leave\n"
        "leave.EXIT_WAIT_S = 1.0\n"
        "threading.Thread(target=time.sleep, args=(1000,), name='users-thread').start()\n"
        "leave.leave(0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert "thread(s) still running: ['users-thread']" in proc.stderr


# -------------------------------------------------------------- 11: a warm server killed mid-plan


def test_a_dead_warm_server_makes_the_plan_go_on_cold_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The server killed (`kill -9`, the OOM killer's first pick): the next start raised BrokenPipeError
    and the suite exited 141 with nothing said."""
    server = ForkServer([], {**devicebench_env("sqlite:///x.db")})
    try:
        assert server.ready() == 1
        server.proc.kill()
        server.proc.wait()
        starter = Starter(server)
        argv = python_argv("-m", "json.tool", "--help")
        first, second = (finish(starter.start(argv, server.env)) for _ in range(2))
    finally:
        server.close()
    assert (first.code, second.code) == (0, 0), first.stderr
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["suite: the warm server is gone (killed by SIGKILL); the runs start cold from here"]


# ------------------------------------------------------- 7: log_models: first, on a later launch


def test_a_resumed_plan_logs_no_second_model_for_a_config_an_earlier_launch_finished(tmp_path: Path) -> None:
    """The first repeat to finish logs the config's model; on `--resume`, a config that an earlier
    launch finished (whichever repeat) has it, and one that none finished logs it with its next run."""
    plan = load_plan(write(tmp_path, "name: t\nrepeats: 2\nlog_models: first\nruns: [{entry: matmul}]\n"))
    second = plan.runs[1]
    seen: list[bool] = []

    def record(item: object) -> dict[str, str]:
        seen.append(item.log_model)  # type: ignore[attr-defined]
        raise RuntimeError("no process here")

    for done in ({second.item_id}, set()):
        with pytest.raises(RuntimeError):
            _run_items(plan, done, record)
    assert seen == [False, True]


# ------------------------------------------------------------------ 6: two reports in one second


def test_two_reports_named_for_the_same_second_each_get_their_own_folder(tmp_path: Path) -> None:
    judged = judge_report(compare([]))
    first = write_report(judged, tmp_path / "reports" / "plan-20261128-120000", {"n": "1"}, fresh=True)
    second = write_report(judged, tmp_path / "reports" / "plan-20261128-120000", {"n": "2"}, fresh=True)
    assert first[0].parent.name == "plan-20261128-120000"
    assert second[0].parent.name == "plan-20261128-120000-2"
    assert {f.name for f in first} == {f.name for f in second}


# -------------------------------------------------------------------- smaller: a PostgreSQL store


def test_a_database_store_is_told_how_to_start_its_ui() -> None:
    """ "open the MLflow UI: postgresql://..." named no UI; the 127.0.0.1:5000 links below it open in
    the one this command starts."""
    _, ui = next_commands("postgresql://bench:s3cret-pass@127.0.0.1:5432/test")
    assert "mlflow ui --backend-store-uri postgresql://bench:***@127.0.0.1:5432/test" in ui
    assert "s3cret" not in ui and "password in place of ***" in ui
    assert next_commands("http://127.0.0.1:5000")[1] == "open the MLflow UI: http://127.0.0.1:5000"


# ---------------------------------------------------------------------------------------- sync


def _journal(spool: Path, run_id: str, uri: str, ops: list[dict]) -> Journal:
    journal = Journal(spool, run_id, uri)
    for op in ops:
        journal.append(op)
    journal.flush()
    return journal


OPS = [
    {"op": "tags", "values": {"devicebench.workload": "cifar", "mlflow.runName": "cifar · cpu · bs 8"}},
    {"op": "metrics", "values": {"time/train_s": 3.5}, "step": None, "ts": 1_700_000_000_000},
    {"op": "metrics", "values": {"time/total_s": 4.5}, "step": None, "ts": 1_700_000_001_000},
    {"op": "end", "status": "FINISHED", "ts": 1_700_000_005_000},
]


def test_a_sent_mark_past_the_journal_is_not_trusted(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """Item 3: `sent` said 9 of a 4-operation journal: "replayed", exit 0, the journal deleted and the
    run left RUNNING without its results."""
    client = MlflowClient(mlflow_server.url)
    run_id = client.create_run(client.create_experiment(experiment_name)).info.run_id
    journal = _journal(tmp_path / "spool", run_id, mlflow_server.url, OPS)
    Journal.mark_sent(journal.dir, 9)
    journal.close()
    out = sync_spool(settings_for(mlflow_server.url, tmp_path, experiment_name))
    assert (out.replayed, out.broken) == (0, 1) and journal.dir.exists(), "named and kept, not deleted"


def test_a_journal_whose_end_never_arrived_ends_its_run(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """Every operation marked sent, but the store shows the run RUNNING: the end is sent again."""
    client = MlflowClient(mlflow_server.url)
    run_id = client.create_run(client.create_experiment(experiment_name)).info.run_id
    journal = _journal(tmp_path / "spool", run_id, mlflow_server.url, OPS)
    Journal.mark_sent(journal.dir, len(OPS))
    journal.close()
    assert sync_spool(settings_for(mlflow_server.url, tmp_path, experiment_name)).replayed == 1
    assert client.get_run(run_id).info.status == "FINISHED"


def test_a_lost_run_is_made_again_under_its_own_name(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """Item 8: `sync --recreate-lost` gave the run MLflow's random name, which every report showed.
    The name is journalled when the run starts and the run made again under it."""
    settings = settings_for(mlflow_server.url, tmp_path, experiment_name)
    with run_context(settings, "cifar", {"epochs": "1"}, run_name="cifar · cpu · bs 8") as t:
        t.log_metrics({"time/train_s": 2.0})
        ops = [json.loads(line) for line in (t.journal.dir / "ops.jsonl").read_text().splitlines()]
    named = [op for op in ops if op["op"] == "tags" and "mlflow.runName" in op["values"]]
    assert [op["values"]["mlflow.runName"] for op in named] == ["cifar · cpu · bs 8"]
    # the same journal, of a run the store no longer has (its database made anew)
    lost = "0123456789abcdef0123456789abcdef"
    _journal(settings.spool_dir, lost, mlflow_server.url, [op for op in ops if op["op"] != "end"]).close()
    assert sync_spool(settings, recreate_lost=True).replayed == 1
    client = MlflowClient(mlflow_server.url)
    exp = client.get_experiment_by_name(experiment_name).experiment_id
    (run,) = client.search_runs([exp], f"tags.`devicebench.replayed_from` = '{lost}'")
    assert run.info.run_name == "cifar · cpu · bs 8"


def test_recreating_into_a_deleted_experiment_says_what_to_do(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str, capsys: pytest.CaptureFixture
) -> None:
    """It stayed "not replayed yet" for good with MLflow's raw message."""
    client = MlflowClient(mlflow_server.url)
    client.delete_experiment(client.create_experiment(experiment_name))
    _journal(tmp_path / "spool", "0123456789abcdef0123456789abcdef", mlflow_server.url, OPS).close()
    out = sync_spool(settings_for(mlflow_server.url, tmp_path, experiment_name), recreate_lost=True)
    assert out.pending == 1
    line = capsys.readouterr().err.strip()
    assert f"its experiment {experiment_name!r} is deleted; restore it (`mlflow experiments restore" in line
    assert "\n" not in line


def test_a_journal_another_sync_just_removed_is_not_pending(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """Item 17: two syncs at once: the one that found a journal the other had just removed said "still
    pending" and exited 1 for work that was done. Seen here as the spool listed, then the folder gone
    (and the lock file the loser made in a folder being removed)."""
    from devicebench.tracking.replay import SyncOutcome, _sync_journal

    out = SyncOutcome()
    _sync_journal(tmp_path / "spool" / "gone-already", out, mlflow_server.url, "")
    leftover = tmp_path / "spool" / "0123456789abcdef0123456789abcdef"
    leftover.mkdir(parents=True)
    (leftover / "lock").write_text("")
    _sync_journal(leftover, out, mlflow_server.url, "")
    assert (out.pending, out.replayed, out.broken) == (0, 0, 0) and not leftover.exists()


BUSY = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass\n"  # stops by itself


@pytest.mark.e2e
def test_two_syncs_at_once_beside_four_busy_loops_replay_each_run_once(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """Two `devicebench sync` at once over one spool, with four busy processes beside them: each run is
    replayed by one of them, exactly once, and neither calls one pending nor exits 1. Before, a sync
    removed a replayed journal in place, its lock file first: the other locked a new one in the
    half-removed folder and said "1 still pending" (exit 1), or sent it again."""
    client = MlflowClient(mlflow_server.url)
    exp = client.create_experiment(experiment_name)
    env = devicebench_env(mlflow_server.url, DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"))
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(4)]
    try:
        for round_ in range(3):
            runs = [client.create_run(exp).info.run_id for _ in range(6)]
            for i, run_id in enumerate(runs):
                ops = [{"op": "metrics", "values": {"sync/i": float(k)}, "step": k, "ts": 1_700_000_000_000 + k}
                       for k in range(20 + i)]  # fmt: skip
                _journal(tmp_path / "spool", run_id, mlflow_server.url, [*ops, OPS[-1]]).close()
            syncs = [shared().start(["sync"], env, tmp_path) for _ in range(2)]
            done = [s.communicate(timeout=120) for s in syncs]
            said = [
                f"{s.returncode}: {out.strip()} {err.strip()}"
                for s, (out, err) in zip(syncs, done, strict=True)
            ]
            assert [s.returncode for s in syncs] == [0, 0], said
            assert all(", 0 still pending" in line for line in said), said
            replayed = sum(int(re.search(r"(\d+) run\(s\) replayed", x).group(1)) for x in said)
            assert replayed == 6, f"round {round_}: {said}"
            for i, run_id in enumerate(runs):
                steps = [m.step for m in client.get_metric_history(run_id, "sync/i")]
                assert sorted(steps) == list(range(20 + i)), f"round {round_}: run {i} sent {len(steps)}"
                assert client.get_run(run_id).info.status == "FINISHED"
            assert not list((tmp_path / "spool").iterdir()), "a replayed journal was left behind"
    finally:
        for p in busy:
            p.kill()
            p.wait()


# ---------------------------------------------------------- one real suite: items 2, 7, 11 and 12

FACTORY = """
import os, signal, sys, time
from pathlib import Path

import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self, num_classes=10, act=None):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, num_classes)
        self.act = act

    def forward(self, x):
        if self.training and not x.is_meta and self.act is not None:
            self.act()
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def _once(name):
    if Path(name).exists():
        return False
    Path(name).write_text("")
    return True


def _misbehave():
    if _once("exited"):
        sys.exit(0)
    if _once("killed"):
        if b"devicebench.util.forkserver" not in Path(f"/proc/{os.getppid()}/cmdline").read_bytes():
            raise RuntimeError("not forked from the warm server")
        os.kill(os.getppid(), signal.SIGKILL)  # its own SIGTERM follows (it dies with the server)
        time.sleep(60)


def flaky(num_classes=10):
    return Tiny(num_classes, _misbehave)


def hang(num_classes=10):
    return Tiny(num_classes, lambda: time.sleep(600))
"""


@pytest.mark.e2e
def test_a_plan_goes_on_past_a_hang_a_sys_exit_and_its_warm_servers_death(
    tmp_path: Path, mlflow_server: MlflowServer, experiment_name: str
) -> None:
    """A hanging item is KILLED at its time limit; a repeat that calls sys.exit(0) is a failure, not
    "ok"; the next kills the warm server, and the last starts cold and logs the config's model
    (`log_models: first`: its first repeat failed). Counts from the store."""
    (tmp_path / "mine.py").write_text(FACTORY)
    small = (
        "{input: 3x8x8, batch_size: 4, train_limit: 8, test_limit: 4, cpu_threads: 1, price_per_hour: 1.0}"
    )
    path = write(
        tmp_path,
        f"""
        name: faults
        experiment: {experiment_name}
        log_models: first
        report: false
        runs:
          - entry: model
            params: {{model: 'mine.py:hang', <<: {small}}}
            time_limit_s: 15
          - entry: model
            params: {{model: 'mine.py:flaky', <<: {small}}}
            repeats: 3
        """,
    )
    proc = run_cli(["suite", str(path)], devicebench_env(mlflow_server.url), cwd=tmp_path, timeout_s=400)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "[1/4] model" in out and "FAILED: KILLED: ran past its time limit of 15 s" in out, out
    assert "called sys.exit(0)" in out and "[3/4] model" in out
    assert "the warm server died under it (killed by SIGKILL)" in out, out
    assert "suite faults: 1 finished, 3 failed, 0 skipped" in out, out
    assert "suite: the warm server is gone (killed by SIGKILL); the runs start cold from here" in proc.stderr
    runs = runs_of(mlflow_server.url, experiment_name)
    (parent,) = [r for r in runs if r.data.tags.get("devicebench.workload") == "suite"]
    assert parent.data.metrics["suite/finished"] == 1.0 and parent.data.metrics["suite/failed"] == 3.0
    children = sorted(
        (r for r in runs if r.data.tags.get("mlflow.parentRunId")), key=lambda r: r.info.start_time
    )
    assert [r.info.status for r in children] == ["KILLED", "FAILED", "KILLED", "FINISHED"]
    assert "time limit" in children[0].data.tags["devicebench.error"]
    client = MlflowClient(mlflow_server.url)
    models = client.search_logged_models(
        [parent.info.experiment_id], f"source_run_id = '{children[3].info.run_id}'"
    )
    assert len(models) == 1, "the first repeat that finished logged the config's model"
