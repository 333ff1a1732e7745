"""Issue 27 (Reliability III): no password in any output, no code from the working directory, no run
rewritten, nothing stuck RUNNING. Each reproduction of the issue that is not a row of the bad-input
table (test_bad_input.py) is a test here, against real stores, real processes and real full disks
(a small tmpfs, where this user may mount one)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from own_tags import facts_of

from servers import (
    QUICK_MATMUL,
    devicebench_env,
    fake_oci_metadata,
    migrated_sqlite,
    one_error_line,
    pg_database,
    run_cli,
)

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ["matmul", "--sizes", "32", "--repeats", "1", *QUICK_MATMUL]


def env_for(tmp: Path, uri: str, **extra: str) -> dict[str, str]:
    base = {
        "DEVICEBENCH_SPOOL_DIR": str(tmp / "spool"),
        "DEVICEBENCH_OCI_METADATA_URL": "http://127.0.0.1:9/",
        "DEVICEBENCH_OCI_TIMEOUT_S": "0.2",
        "OMP_NUM_THREADS": "1",
    }
    return devicebench_env(uri, **{**base, **extra})


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real small filesystem at `path` (root only); the test is skipped where none can be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder: Path) -> None:
    """Fill the filesystem holding `folder` to its last byte."""
    with open(folder / "fill", "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()


# --------------------------------------------------------------------------------------------- secrets


def test_redact_covers_each_form() -> None:
    from devicebench.util.redact import redact

    cases = {
        "postgresql://postgres:SECRET@127.0.0.1:5432/db": "postgresql://postgres:***@127.0.0.1:5432/db",
        "postgresql://u@h/db?sslmode=x&password=SECRET": "postgresql://u@h/db?sslmode=x&password=***",
        "mysql://root:pa@ss@h/db": "mysql://root:***@h/db",
        "MLFLOW_TRACKING_PASSWORD=SECRET DATABASE_URL=postgresql://a:SECRET@b/c": (
            "MLFLOW_TRACKING_PASSWORD=*** DATABASE_URL=postgresql://a:***@b/c"
        ),
        "http://[::1": "http://[::1",
        "sqlite:///mlflow.db": "sqlite:///mlflow.db",
    }
    for raw, want in cases.items():
        assert redact(raw) == want, raw
        assert "SECRET" not in redact(f"error: could not open {raw}")


@pytest.fixture(scope="module")
def canary_store() -> Iterator[tuple[str, str]]:
    """A PostgreSQL database (trust auth: any password is accepted, and none may leak)."""
    from servers import pg_available

    if not pg_available():
        pytest.skip("PostgreSQL is not answering on 127.0.0.1:5432")
    with pg_database("devicebench_canary") as uri:
        yield uri, uri.rsplit("/", 1)[1]


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_no_canary_in_any_file_output_or_argv(canary_store: tuple[str, str], tmp_path: Path) -> None:
    """Canaries as `user:pw@` and `?password=` in the tracking URI: a workload, `compare` (its report
    files and report run), `suite`, a spooled journal and `sync` leave them in no file under the store's
    artifacts, the spool or the reports, in no output and in no process's argv."""
    uri, _ = canary_store
    user_pw = f"userpw-{secrets.token_hex(8)}"
    query_pw = f"querypw-{secrets.token_hex(8)}"
    forms = {
        "user:pw@": uri.replace("postgres@", f"postgres:{user_pw}@"),
        "?password=": f"{uri}?password={query_pw}",
    }
    outputs: list[str] = []
    argvs: list[str] = []
    stop = threading.Event()

    def watch_argv() -> None:  # every process's command line, while the commands run
        while not stop.is_set():
            for proc in Path("/proc").iterdir():
                with contextlib.suppress(OSError):
                    if proc.name.isdigit():
                        argvs.append((proc / "cmdline").read_bytes().decode(errors="replace"))
            time.sleep(0.25)

    watcher = threading.Thread(target=watch_argv, daemon=True)
    watcher.start()
    try:
        for i, (form, tracking) in enumerate(forms.items()):
            env = env_for(tmp_path, tracking, DEVICEBENCH_EXPERIMENT=f"canary-{i}")
            cwd = tmp_path / f"cwd{i}"
            cwd.mkdir()
            for args in (MATMUL, ["compare", "--out", str(tmp_path / "reports" / f"r{i}")]):
                proc = run_cli(args, env, cwd=cwd, timeout_s=120)
                assert proc.returncode == 0, (form, args, proc.stderr[-2000:])
                outputs += [proc.stdout, proc.stderr]
            if form == "user:pw@":  # one plan run (a real child interpreter) is enough for argv and output
                (cwd / "plan.yaml").write_text(
                    "name: canary\nreport: false\nruns:\n  - entry: matmul\n"
                    "    params: {sizes: 32, repeats: 1, min_time_s: 0, isolation: none}\n"
                )
                proc = run_cli(["suite", "plan.yaml"], env, cwd=cwd, timeout_s=150)
                assert proc.returncode == 0, proc.stdout + proc.stderr
                outputs += [proc.stdout, proc.stderr]
            # a journal left by a run whose process died: its run.json, and `sync` replaying it
            from devicebench.tracking.journal import Journal

            client = MlflowClient(tracking)
            exp = client.get_experiment_by_name(f"canary-{i}")
            run = client.create_run(exp.experiment_id, tags={"devicebench.workload": "matmul"})
            journal = Journal(tmp_path / "spool", run.info.run_id, tracking)
            journal.append({"op": "metrics", "values": {"x": 1.0}, "step": 0, "ts": 1})
            journal.close()
            proc = run_cli(["sync"], env, cwd=cwd, timeout_s=120)
            assert proc.returncode == 0 and "1 run(s) replayed" in proc.stdout, proc.stdout + proc.stderr
            outputs += [proc.stdout, proc.stderr]
            assert client.get_run(run.info.run_id).data.metrics == {"x": 1.0}
            assert client.get_run(run.info.run_id).info.status == "FAILED"  # it died without an end record
    finally:
        stop.set()
        watcher.join()
    import psycopg2

    with psycopg2.connect(uri) as conn, conn.cursor() as cur:  # the store's own tables
        cur.execute("SELECT value FROM tags UNION ALL SELECT value FROM params")
        stored = " ".join(str(v) for (v,) in cur.fetchall())
    conn.close()
    reports = list((tmp_path / "reports").rglob("report.md"))
    assert len(reports) == 2 and "tracking store" in reports[0].read_text()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "report.html" for p in files)
    leaks = []
    for canary in (user_pw, query_pw):
        leaks += [f"{canary[:7]} in file {p}" for p in files if canary.encode() in p.read_bytes()]
        leaks += [f"{canary[:7]} in output" for text in outputs if canary in text]
        leaks += [f"{canary[:7]} in the store's tags or params"] if canary in stored else []
        leaks += [f"{canary[:7]} in argv {a[:200]}" for a in argvs if canary in a]
    assert not leaks, leaks


def test_the_journal_keeps_the_uri_redacted_and_sync_finds_the_password(tmp_path: Path) -> None:
    from devicebench.tracking.journal import Journal
    from devicebench.tracking.replay import store_uri

    secret = "postgresql://u:hunter2@127.0.0.1:5432/db"
    journal = Journal(tmp_path, "abc", secret)
    journal.close()
    meta = json.loads((tmp_path / "abc" / "run.json").read_text())
    assert meta["tracking_uri"] == "postgresql://u:***@127.0.0.1:5432/db"
    assert store_uri(meta["tracking_uri"], secret) == secret  # the same store: its password from settings
    assert store_uri(meta["tracking_uri"], "sqlite:///other.db") is None  # another store: not guessed


# --------------------------------------------------------------------------------------------- code execution


@pytest.mark.timeout(120)
def test_a_numpy_py_in_the_working_directory_is_not_imported(tmp_path: Path) -> None:
    """The isolated matmul child (a real interpreter) once imported ./numpy.py and ran it."""
    (tmp_path / "numpy.py").write_text('open("PWNED", "w")\n')
    env = env_for(tmp_path, migrated_sqlite(tmp_path / "m.db"))
    args = ["matmul", "--sizes", "32", "--repeats", "1", "--min_time_s", "0", "--backends", "numpy"]
    proc = run_cli([*args, "--dtypes", "float32"], env, cwd=tmp_path, timeout_s=110)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "PWNED").exists()


def test_every_child_is_started_without_the_working_directory() -> None:
    from devicebench.plan.handoff import child_env
    from devicebench.plan.spec import PlannedRun

    argv = PlannedRun(1, "matmul", {"sizes": "32"}, 1, 1).argv()
    assert argv[:4] == [sys.executable, "-P", "-m", "devicebench"]
    assert child_env({})["PYTHONSAFEPATH"] == "1"


def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    """What a SIGKILLed suite does to its child: the kernel sends it SIGTERM (PR_SET_PDEATHSIG)."""
    code = (
        "import subprocess, sys, time\n"
        "from devicebench.util.children import death_signal\n"
        "p = subprocess.Popen(['sleep', '60'], preexec_fn=death_signal())\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child, os.WNOHANG)
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the child outlived its SIGKILLed parent")


# --------------------------------------------------------------------------------------------- runs


@pytest.mark.timeout(120)
def test_resume_refuses_a_run_that_is_not_a_suite_parent_of_the_plan(tmp_path: Path) -> None:
    uri = migrated_sqlite(tmp_path / "m.db")
    env = env_for(tmp_path, uri, DEVICEBENCH_EXPERIMENT="resume")
    proc = run_cli(MATMUL, env, cwd=tmp_path, timeout_s=100)
    assert proc.returncode == 0, proc.stderr
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("resume")
    (matmul,) = client.search_runs([exp.experiment_id])
    other = client.create_run(exp.experiment_id, tags={"devicebench.workload": "suite"})
    client.log_param(other.info.run_id, "name", "another-plan")
    client.set_terminated(other.info.run_id, "FINISHED")
    (tmp_path / "plan.yaml").write_text("name: demo\nruns:\n  - entry: matmul\n    params: {sizes: 32}\n")
    for run_id, says in (
        (matmul.info.run_id, "is a matmul run, not a suite's parent run"),
        (other.info.run_id, "of plan 'another-plan', not of 'demo'"),
    ):
        proc = run_cli(["suite", "plan.yaml", "--resume", run_id], env, cwd=tmp_path, timeout_s=100)
        assert proc.returncode == 2 and says in one_error_line(proc.stderr), proc.stderr
    after = client.get_run(matmul.info.run_id)
    assert after.data.tags["devicebench.workload"] == "matmul" and after.info.status == "FINISHED"
    assert len(client.search_runs([exp.experiment_id])) == 2  # no run was started


@pytest.mark.timeout(120)
def test_a_full_spool_disk_is_refused_before_the_run(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "full", "256k") as full:
        fill(full)
        uri = f"sqlite:///{tmp_path / 'm.db'}"
        env = env_for(tmp_path, uri, DEVICEBENCH_SPOOL_DIR=str(full / "spool"))
        proc = run_cli(MATMUL, env, cwd=tmp_path, timeout_s=100)
        line = one_error_line(proc.stderr)
        assert proc.returncode == 2 and f"DEVICEBENCH_SPOOL_DIR='{full / 'spool'}'" in line, line
        assert "full" in line
    client = MlflowClient(uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    assert not client.search_runs(exps) if exps else True  # no run was created, none left RUNNING


def test_a_spool_that_fills_mid_run_fails_the_run_once_and_keeps_going_in_memory(tmp_path: Path) -> None:
    from devicebench.errors import SpoolUnwritable
    from devicebench.tracking.journal import Journal

    with tmpfs(tmp_path / "spool", "64k") as spool:
        journal = Journal(spool, "run1", "sqlite:///x.db")
        fill(spool)
        with pytest.raises(SpoolUnwritable, match=str(spool / "run1")):
            for i in range(10_000):  # the line buffer reaches the full disk within a few lines
                journal.append({"op": "metrics", "values": {"x": float(i)}, "step": i, "ts": 0})
        assert journal.append({"op": "end", "status": "FAILED"}) > 0  # ending the run still works
        journal.remove()
        assert not (spool / "run1").exists()


def test_a_lock_is_not_held_by_forked_children_of_a_dead_holder(tmp_path: Path) -> None:
    """DataLoader workers (forks) of an OOM-killed run kept its journal locked for minutes."""
    from devicebench.tracking.locks import try_lock

    lock = tmp_path / "lock"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the run: takes the lock, forks a long-lived worker, dies
        try:
            try_lock(lock)
            worker = os.fork()
            if worker == 0:
                time.sleep(30)
                os._exit(0)
            os.write(w, str(worker).encode())
        finally:
            os._exit(0)
    os.close(w)
    worker = int(os.read(r, 32))
    os.close(r)
    os.waitpid(pid, 0)
    try:
        fd = try_lock(lock)
        assert fd is not None, "the dead run's worker still holds its lock"
        os.close(fd)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_a_corrupt_journal_is_skipped_named_and_the_others_replayed(tmp_path: Path) -> None:
    from devicebench.tracking.journal import Journal

    uri = migrated_sqlite(tmp_path / "m.db")
    env = env_for(tmp_path, uri)
    spool = tmp_path / "spool"
    (spool / "aaa-bad-json").mkdir(parents=True)
    (spool / "aaa-bad-json" / "run.json").write_text("{not json")
    client = MlflowClient(uri)
    exp = client.create_experiment("journals")
    runs = [client.create_run(exp).info.run_id for _ in range(2)]
    for run_id in runs:
        journal = Journal(spool, run_id, uri)
        journal.append({"op": "metrics", "values": {"x": 2.0}, "step": 0, "ts": 1})
        journal.append({"op": "end", "status": "FINISHED", "ts": 2})
        journal.close()
    (spool / runs[0] / "sent").write_text("twelve")
    dup = spool / runs[0][::-1]  # a journal with one line twice: sent twice if read as it is
    dup.mkdir()
    (dup / "run.json").write_text(json.dumps({"run_id": runs[0][::-1], "tracking_uri": uri}))
    line = json.dumps({"op": "metrics", "values": {"x": 1.0}, "step": 0, "ts": 1, "seq": 1})
    (dup / "ops.jsonl").write_text(f"{line}\n{line}\n")
    proc = run_cli(["sync"], env, cwd=tmp_path, timeout_s=100)
    assert proc.returncode == 2, proc.stdout + proc.stderr  # the user's to fix: not "try again later"
    assert f"journal {dup} skipped: its `sent` mark or operations are corrupt" in proc.stderr
    assert "operation 1 is in its ops.jsonl twice" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(spool / "aaa-bad-json") in proc.stderr and str(spool / runs[0]) in proc.stderr
    assert "1 run(s) replayed" in proc.stdout and "3 corrupt journal(s) skipped" in proc.stdout
    good = client.get_run(runs[1])
    assert good.info.status == "FINISHED" and good.data.metrics == {"x": 2.0}
    assert (spool / runs[0]).is_dir() and not (spool / runs[1]).exists()


# --------------------------------------------------------------------------------------------- input


def test_an_unknown_mlflow_run_parameter_reaches_the_cli_and_is_refused(tmp_path: Path) -> None:
    """MLflow appends an unknown `-P bogus=1` as ` --bogus 1`; after a `|` block it ran as a shell
    command of its own once the whole workload had run. MLflow's own code computes the command here."""
    import shlex

    from mlflow.projects._project_spec import load_project

    project = load_project(str(ROOT))
    for entry in ("matmul", "cifar", "unet", "suite", "compare"):
        command = project.get_entry_point(entry).compute_command({"bogus": "1"}, str(tmp_path))
        joined = command.replace("\\\n", "")  # what bash does with a backslash-newline
        assert "\n" not in joined, command  # one shell command, not a second one after the workload
        assert shlex.split(joined)[-2:] == ["--bogus", "1"], command
    matmul = project.get_entry_point("matmul").compute_command({"bogus": "1"}, str(tmp_path))
    words = shlex.split(matmul.replace("\\\n", ""))
    args = words[words.index("devicebench") + 1 :]
    proc = run_cli(args, env_for(tmp_path, f"sqlite:///{tmp_path / 'm.db'}"), cwd=tmp_path, timeout_s=60)
    assert proc.returncode == 2 and "unrecognized arguments: --bogus 1" in one_error_line(proc.stderr)
    assert not (tmp_path / "m.db").exists()  # refused before any work, before the store


@pytest.mark.timeout(120)
def test_read_only_store_and_atomic_report(tmp_path: Path) -> None:
    """`compare --no-log` reads a store on a read-only filesystem; a report that cannot be written
    whole (a full disk) leaves nothing behind."""
    import shutil

    made = f"sqlite:///{tmp_path / 'made.db'}"
    proc = run_cli(MATMUL, env_for(tmp_path, made), cwd=tmp_path, timeout_s=100)
    assert proc.returncode == 0, proc.stderr
    with tmpfs(tmp_path / "ro", "8m") as ro:
        shutil.copy(tmp_path / "made.db", ro / "m.db")
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True, capture_output=True)
        env = env_for(tmp_path, f"sqlite:///{ro / 'm.db'}")
        proc = run_cli(
            ["compare", "--no-log", "--out", str(tmp_path / "rep")], env, cwd=tmp_path, timeout_s=100
        )
        assert proc.returncode == 0 and "read 1 run" in proc.stdout, proc.stderr
        assert (tmp_path / "rep" / "report.md").is_file()
        with tmpfs(tmp_path / "small", "48k") as small:
            proc = run_cli(
                ["compare", "--no-log", "--out", str(small / "r")], env, cwd=tmp_path, timeout_s=100
            )
            line = one_error_line(proc.stderr)
            assert proc.returncode == 2 and "--out: cannot write the report" in line, line
            assert [p.name for p in small.iterdir()] == [], "a half-written report was left"


def test_duplicate_sizes_are_one_size_and_one_config_key() -> None:
    from devicebench.config.fields import build_config, config_key, to_params
    from devicebench.config.workloads import MatmulConfig

    once = build_config(MatmulConfig, {"sizes": "64"})
    thrice = build_config(MatmulConfig, {"sizes": "64,64,64"})
    assert to_params(thrice)["sizes"] == "64" and config_key("matmul", thrice) == config_key("matmul", once)


def test_the_lr_help_says_above_zero() -> None:
    import argparse

    from devicebench.config.fields import add_config_arguments
    from devicebench.config.workloads import CifarConfig

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, CifarConfig)
    (lr,) = [a for a in parser._actions if "--lr" in a.option_strings]
    assert "a number > 0" in (lr.help or "") and ">= 0" not in (lr.help or "")


def test_absurd_instance_metadata_sizes_are_ignored() -> None:
    from devicebench.host.device import oci_metadata

    doc = {"shape": "VM.Standard.E5.Flex", "shapeConfig": {"ocpus": 1e308, "memoryInGBs": 16}}
    with fake_oci_metadata(lambda: doc) as url:
        facts = oci_metadata(url, 2.0)
    assert facts["oci.shape"] == "VM.Standard.E5.Flex" and "oci.ocpus" not in facts
    assert facts["oci.memory_gb"] == "16.0"


@pytest.mark.timeout(120)
def test_a_batch_larger_than_the_data_is_tagged_with_the_batch_used(tmp_path: Path) -> None:
    uri = migrated_sqlite(tmp_path / "m.db")
    args = ["cifar", "--data", "synthetic", "--epochs", "1", "--num_workers", "0", "--batch_size"]
    args += ["1000000000000", "--train_limit", "20", "--test_limit", "8", "--log_every", "1"]
    proc = run_cli(args, env_for(tmp_path, uri, DEVICEBENCH_EXPERIMENT="batch"), cwd=tmp_path, timeout_s=110)
    assert proc.returncode == 0, proc.stderr
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("batch").experiment_id])
    assert facts_of(run)["devicebench.batch_size.used"] == "20"
    assert "every batch holds 20" in proc.stdout
