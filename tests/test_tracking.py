"""The tracking layer against a real `mlflow server`: runs, batched metrics, models, failure status."""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient

from devicebench.config.settings import Settings, load_settings
from devicebench.errors import Interrupted, SpoolUnwritable, StoreUnavailable
from devicebench.tracking.journal import Journal
from devicebench.tracking.protocol import MemoryTracker
from devicebench.tracking.replay import sync_spool
from devicebench.tracking.runs import process_age_s, run_context
from devicebench.tracking.store import store_error_hint
from servers import MlflowServer, devicebench_env


def test_a_process_age_starts_at_the_process_not_a_second_before() -> None:
    """A child's age, read as soon as it is forked, is the few milliseconds it has lived: the age a run's
    `time/start_s` and `time/process_s` are read from (psutil's, through /proc/stat's whole-second boot
    time, read 0.95 s for a process 0.01 s old here)."""
    read, write = os.pipe()
    forked_at = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child only reads two clocks and writes one line: nothing a fork may not do
        os.write(write, repr(process_age_s()).encode())
        os._exit(0)
    os.close(write)
    age = float(os.read(read, 64).decode())
    os.waitpid(pid, 0)
    os.close(read)
    assert 0 <= age <= time.monotonic() - forked_at + 0.02  # + the kernel's 10 ms clock tick, rounded


def settings_for(uri: str, tmp_path: Path, experiment: str, **extra: str) -> Settings:
    return load_settings(
        {
            "MLFLOW_TRACKING_URI": uri,
            "DEVICEBENCH_EXPERIMENT": experiment,
            "DEVICEBENCH_SPOOL_DIR": str(tmp_path / "spool"),
            "DEVICEBENCH_FLUSH_INTERVAL_S": "0.2",
            **extra,
        }
    )


def test_a_finished_run_has_params_tags_and_every_metric(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    with run_context(s, "matmul", {"sizes": "64", "repeats": 3}, tags={"devicebench.device": "cpu"}) as t:
        for step in range(2500):  # more than two log_batch pages
            t.log_metrics({"train/loss": 1.0 / (step + 1), "other": step}, step=step)
        t.log_dict({"a": 1}, "per_class.json")
        t.log_text("x,y\n", "sub/table.csv")
        t.log_table({"class": ["cat", "dog"], "accuracy": [0.5, None]}, "sub/results.json")
        run_id = t.run_id
    client = MlflowClient(mlflow_server.url)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"sizes": "64", "repeats": "3"}
    assert run.data.tags["devicebench.workload"] == "matmul"
    assert run.data.tags["devicebench.device"] == "cpu"
    history = client.get_metric_history(run_id, "train/loss")
    assert len(history) == 2500
    assert sorted(m.step for m in history) == list(range(2500))
    paths = {a.path for a in client.list_artifacts(run_id)} | {
        a.path for a in client.list_artifacts(run_id, "sub")
    }
    assert {"per_class.json", "sub/table.csv", "sub/results.json"} <= paths
    assert not (tmp_path / "spool" / run_id).exists(), "a delivered run leaves no spool behind"
    # a table in MLflow's own format, named a table for the UI, read back by MLflow's own reader
    assert json.loads(run.data.tags["mlflow.loggedArtifacts"]) == [
        {"path": "sub/results.json", "type": "table"}
    ]
    table = client.load_table(run.info.experiment_id, "sub/results.json", run_ids=[run_id])
    assert table["class"].tolist() == ["cat", "dog"] and table["accuracy"].tolist()[0] == 0.5
    local = client.download_artifacts(run_id, "sub/results.json", str(tmp_path))
    assert json.loads(Path(local).read_text()) == {
        "columns": ["class", "accuracy"],
        "data": [["cat", 0.5], ["dog", None]],
    }


def test_an_exception_marks_the_run_failed_with_a_one_line_error(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    with pytest.raises(RuntimeError), run_context(s, "cifar", {"batch_size": 4}) as t:
        t.log_metrics({"train/loss": 2.0}, step=1)
        run_id = t.run_id
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")
    run = MlflowClient(mlflow_server.url).get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["devicebench.error"] == "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
    assert run.data.metrics["train/loss"] == 2.0, "metrics logged before the failure are kept"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_run_whose_signal_was_swallowed_ends_killed_not_finished(
    mlflow_server: MlflowServer,
    tmp_path: Path,
    experiment_name: str,
    signum: int,
    request: pytest.FixtureRequest,
) -> None:
    """Issue 40, item 1: a signal landing in the warm-up raised inside a finaliser or weakref callback,
    whose exception Python prints ("Exception ignored in ...") and drops; the run went on and ended
    FINISHED with its throughput 4-25x low. Here the body swallows it; the run still ends KILLED."""
    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    saved = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    request.addfinalizer(lambda: [signal.signal(n, h) for n, h in saved.items()])  # pytest's own back
    # a terminal where Ctrl-C works: a test run started in the background (`make test &`, some CI) has
    # SIGINT ignored, and a run leaves an ignored SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(Interrupted) as err, run_context(s, "cifar", {"batch_size": 4}) as t:
        run_id = t.run_id
        try:
            os.kill(os.getpid(), signum)
            time.sleep(1)  # the handler raises here
        except (KeyboardInterrupt, Interrupted):
            pass  # as a weakref callback's caller drops it
        t.log_metrics({"throughput/train_samples_per_s": 14.0})
    assert err.value.exit_code == 128 + signum
    run = MlflowClient(mlflow_server.url).get_run(run_id)
    assert run.info.status == "KILLED" and "its figures are not kept" in run.data.tags["devicebench.error"]


def test_params_already_logged_by_mlflow_run_are_not_rewritten(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mlflow run` logs `-P lr=1e-3` itself; logging `0.001` again would be a conflicting param."""
    client = MlflowClient(mlflow_server.url)
    exp_id = client.create_experiment(experiment_name)
    run = client.create_run(exp_id)
    client.log_param(run.info.run_id, "lr", "1e-3")
    monkeypatch.setenv("MLFLOW_RUN_ID", run.info.run_id)
    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    with run_context(s, "cifar", {"lr": 0.001, "epochs": 2}) as t:
        assert t.run_id == run.info.run_id
    got = client.get_run(run.info.run_id)
    assert got.info.status == "FINISHED"
    assert got.data.params == {"lr": "1e-3", "epochs": "2"}


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).mean(dim=(2, 3)))


def test_a_logged_model_accepts_any_batch_size(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """MLflow's graph export pins the batch to the example's; ours must predict batches of 1 and 7."""
    import mlflow.pytorch

    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    model = Tiny()
    with run_context(s, "cifar", {}) as t:
        t.log_metrics({"eval/accuracy": 0.5, "eval/loss": 2.0}, step=1)
        t.log_metrics({"eval/accuracy": 0.75, "time/train_s": 3.0}, step=2)
        t.log_model(model, "model", torch.randn(1, 3, 8, 8), metrics=["eval/accuracy", "eval/loss"])
        run_id = t.run_id
    # the metrics that measure the model are linked to it (their latest points), not copied
    client = MlflowClient(mlflow_server.url)
    (logged,) = client.search_logged_models(experiment_ids=[client.get_run(run_id).info.experiment_id])
    linked = client.get_logged_model(logged.model_id).metrics
    assert sorted((m.key, m.value, m.step) for m in linked) == [
        ("eval/accuracy", 0.75, 2),
        ("eval/loss", 2.0, 1),
    ]
    assert [(m.value, m.step) for m in client.get_metric_history(run_id, "eval/accuracy")] == [
        (0.5, 1),
        (0.75, 2),
    ]
    mlflow.set_tracking_uri(mlflow_server.url)
    (tmp_path / "loaded").mkdir()
    (tmp_path / "pyfunc").mkdir()
    loaded = mlflow.pytorch.load_model(f"runs:/{run_id}/model", dst_path=str(tmp_path / "loaded"))
    for n in (1, 7):
        x = torch.randn(n, 3, 8, 8)
        assert torch.allclose(loaded(x), model(x), atol=1e-6)
    pyfunc = mlflow.pyfunc.load_model(f"runs:/{run_id}/model", dst_path=str(tmp_path / "pyfunc"))
    assert pyfunc.predict(np.random.rand(7, 3, 8, 8).astype(np.float32)).shape == (7, 10)


def test_an_unreachable_server_fails_fast_naming_the_uri(tmp_path: Path) -> None:
    s = settings_for("http://127.0.0.1:9", tmp_path, "x", DEVICEBENCH_STORE_TIMEOUT_S="3")
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable, match=r"http://127\.0\.0\.1:9"), run_context(s, "matmul", {}):
        pytest.fail("no work may start against an unreachable store")
    assert time.monotonic() - t0 < 10


def test_a_deleted_experiment_is_an_error_not_a_silent_restore(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    from devicebench.errors import UsageError

    client = MlflowClient(mlflow_server.url)
    client.delete_experiment(client.create_experiment(experiment_name))
    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    with pytest.raises(UsageError, match="is deleted; restore it"), run_context(s, "matmul", {}):
        pytest.fail("unreachable")


def test_memory_tracker_records_what_a_workload_logs() -> None:
    t = MemoryTracker()
    t.log_metrics({"a": 1, "b": 2.5}, step=3)
    t.set_tags({"k": 1})
    t.log_table({"class": ("x", "y"), "n": (1, 2)}, "t.json")
    t.log_metrics({"b": 3.5}, step=4)
    t.log_model(object(), "m", None, metrics=["b", "never-logged"])
    assert t.metrics == [("a", 1.0, 3), ("b", 2.5, 3), ("b", 3.5, 4)]
    assert t.values("b") == [2.5, 3.5]
    assert t.tags == {"k": "1"}
    assert t.artifacts["t.json"] == {"class": ["x", "y"], "n": [1, 2]} and t.tables == {"t.json"}
    assert t.model_metrics == {"m": {"b": 3.5}}


def test_a_half_migrated_sqlite_store_is_named_with_the_way_out(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    """Eight processes migrating one fresh store at once left `_alembic_tmp_*` tables that no later run or
    `mlflow db upgrade` gets past; the line must say what happened and how to recover."""
    import sqlite3

    from devicebench.tracking.store import check_store

    db = tmp_path / "broken.db"
    src = sqlite3.connect(mlflow_server.backend_uri.removeprefix("sqlite:///"))
    dst = sqlite3.connect(db)
    src.backup(dst)  # a migrated store, copied consistently while its server runs
    src.close()
    dst.execute("CREATE TABLE _alembic_tmp_tags (key VARCHAR(250), value VARCHAR(5000))")
    dst.commit()
    dst.close()
    s = settings_for(f"sqlite:///{db}", tmp_path, "x")
    with pytest.raises(StoreUnavailable) as caught:
        check_store(s)
    line = str(caught.value)
    assert "\n" not in line
    assert "half-migrated" in line and "_alembic_tmp_tags" in line, line
    assert f"delete {db}" in line and "backup" in line, line


def test_a_spool_dir_that_cannot_be_created_is_refused_before_the_run_exists(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """The journal exists before the run: with DEVICEBENCH_SPOOL_DIR=/dev/null no run may be created."""
    from devicebench.errors import UsageError
    from servers import runs_of

    s = settings_for(mlflow_server.url, tmp_path, experiment_name, DEVICEBENCH_SPOOL_DIR="/dev/null")
    with (
        pytest.raises(UsageError, match=r"DEVICEBENCH_SPOOL_DIR='/dev/null'") as caught,
        run_context(s, "matmul", {}),
    ):
        pytest.fail("no work may start without a journal")
    assert "\n" not in str(caught.value)
    assert runs_of(mlflow_server.url, experiment_name) == []


def test_replaying_a_model_twice_logs_it_once(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """A `sync` killed after the model upload but before it acknowledged the operation replays the model
    step again: the run must still have exactly one model called `model`."""
    import shutil

    from devicebench.tracking.artifacts import portable_model, save_model
    from devicebench.tracking.journal import Journal
    from devicebench.tracking.replay import sync_spool

    client = MlflowClient(mlflow_server.url)
    run_id = client.create_run(client.create_experiment(experiment_name)).info.run_id
    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    journal = Journal(s.spool_dir, run_id, mlflow_server.url)
    module, _, signature = portable_model(Tiny(), torch.randn(2, 3, 8, 8))
    save_model(module, journal.files / "models" / "model", signature)
    ts = int(time.time() * 1000)
    journal.append({"op": "metrics", "values": {"eval/accuracy": 0.75}, "step": 2, "ts": ts})
    (journal.files / "per_class.json").write_text(json.dumps({"columns": ["class"], "data": [["cat"]]}))
    table = {
        "op": "artifact",
        "path": "files/per_class.json",
        "artifact_path": None,
        "table": "per_class.json",
    }
    journal.append(table)
    points = [["eval/accuracy", 0.75, 2, ts]]
    journal.append({"op": "model", "path": "files/models/model", "name": "model", "points": points})
    journal.append({"op": "end", "status": "FINISHED", "ts": int(time.time() * 1000)})
    journal.close()
    copy = tmp_path / "journal-copy"
    shutil.copytree(journal.dir, copy)

    sync_spool(s)
    assert not journal.dir.exists(), "the first sync replayed the journal"
    shutil.copytree(copy, journal.dir)  # as if the first sync died before writing `sent`
    sync_spool(s)
    assert not journal.dir.exists(), "the second sync replayed the journal"

    models = client.search_logged_models(experiment_ids=[client.get_run(run_id).info.experiment_id])
    assert [(m.name, m.source_run_id, str(m.status)) for m in models] == [("model", run_id, "READY")]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    # its metric linked once, the run's point kept once, the table named once
    linked = client.get_logged_model(models[0].model_id).metrics
    assert [(m.key, m.value, m.step, m.timestamp) for m in linked] == [("eval/accuracy", 0.75, 2, ts)]
    assert len(client.get_metric_history(run_id, "eval/accuracy")) == 1
    assert json.loads(run.data.tags["mlflow.loggedArtifacts"]) == [
        {"path": "per_class.json", "type": "table"}
    ]


def test_sync_makes_a_run_the_store_lost_again_from_its_journal(tmp_path: Path) -> None:
    """Issue 40, item 18: the store's database dropped mid-run and made anew empty; `sync` answered
    "Run ... not found" on every try although the journal holds every operation (sent or not). The run
    is made again in the configured experiment, tagged with the id it replaces, whole, when asked
    (`sync --recreate-lost`); unasked it stays spooled, with the line that says how."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings = load_settings(devicebench_env(uri, DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool")))
    MlflowClient(uri).create_experiment(settings.experiment)  # the store made anew: no runs
    lost = "0123456789abcdef0123456789abcdef"
    journal = Journal(tmp_path / "spool", lost, uri)
    for op in (
        {"op": "tags", "values": {"devicebench.workload": "cifar"}},
        {"op": "params", "values": {"epochs": "2"}},
        {"op": "metrics", "values": {"time/train_s": 3.5}, "step": None, "ts": 1_700_000_000_000},
        {"op": "end", "status": "FINISHED", "ts": 1_700_000_005_000},
    ):
        journal.append(op)
    journal.flush()
    Journal.mark_sent(journal.dir, 4)  # all four had reached the database that was dropped
    journal.close()
    kept = sync_spool(settings)  # unasked: this may be another store (a relative path elsewhere)
    assert (kept.replayed, kept.pending) == (0, 1) and (tmp_path / "spool" / lost).exists()
    assert sync_spool(settings, recreate_lost=True).replayed == 1
    exp = MlflowClient(uri).get_experiment_by_name(settings.experiment)
    (run,) = MlflowClient(uri).search_runs([exp.experiment_id])
    assert run.data.tags["devicebench.replayed_from"] == lost and run.data.params["epochs"] == "2"
    assert run.data.metrics["time/train_s"] == 3.5 and run.info.status == "FINISHED"
    assert not (tmp_path / "spool" / lost).exists(), "replayed once: the journal is gone"


def test_a_spool_that_fills_while_staging_an_artifact_is_one_line_and_a_failed_run(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """Issue 40, item 15: a spool disk that filled during a run (the check before it held) gave a raw
    `OSError 28` while staging an artifact; now the journal's one line, and the run ends FAILED."""

    class FullDisk:
        def savefig(self, path: Path, **_: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    with (
        pytest.raises(SpoolUnwritable, match=r"^the spool folder .* cannot be written \(No space left"),
        run_context(s, "cifar", {}) as t,
    ):
        run_id = t.run_id
        t.log_figure(FullDisk(), "loss.png")
    run = MlflowClient(mlflow_server.url).get_run(run_id)
    assert run.info.status == "FAILED" and "No space left on device" in run.data.tags["devicebench.error"]


def test_a_run_the_store_lost_is_not_called_unreachable() -> None:
    """Issue 40, item 18: with the store's database dropped mid-run, the run's end said the store was
    unreachable (it answered: the run was gone); the line now says what happened."""
    uri = "http://alice:secret@127.0.0.1:5000"
    said = store_error_hint(uri, "RESOURCE_DOES_NOT_EXIST: Run 'abc' not found")
    assert said == (
        "the tracking store http://alice:***@127.0.0.1:5000 no longer has this run (was its database dropped "
        "or replaced?)"
    )
    assert store_error_hint(uri, "Connection refused") is None


def test_a_run_leaves_an_ignored_ctrl_c_ignored(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str, request: pytest.FixtureRequest
) -> None:
    """`devicebench ... &` from a script starts with SIGINT ignored; a Ctrl-C meant for the shell must not
    end that run KILLED."""
    saved = signal.getsignal(signal.SIGINT)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, saved))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with run_context(settings_for(mlflow_server.url, tmp_path, experiment_name), "cifar", {}) as t:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        run_id = t.run_id
    assert MlflowClient(mlflow_server.url).get_run(run_id).info.status == "FINISHED"


def test_saving_a_model_never_scans_every_installed_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow's requirement check maps every installed distribution's files to modules first (0.8-1.4 s
    a cold run); devicebench pins its requirements, so the map starts as those and the scan never runs,
    while the check still compares each pin with what is installed."""
    from mlflow.utils import requirements_utils

    from devicebench.tracking.artifacts import PINNED, portable_model, save_model

    def scan() -> None:
        raise AssertionError("MLflow scanned every installed distribution")

    monkeypatch.setattr(requirements_utils, "_MODULES_TO_PACKAGES", None)  # a fresh process's state
    monkeypatch.setattr(requirements_utils.importlib_metadata, "packages_distributions", scan)
    module, _, signature = portable_model(Tiny(), torch.randn(2, 3, 8, 8))
    save_model(module, tmp_path / "model", signature)
    reqs = (tmp_path / "model" / "requirements.txt").read_text().split()
    assert {r.split("==")[0] for r in reqs} >= {*PINNED, "mlflow"} - {"torchvision"}
    assert f"torch=={torch.__version__.split('+')[0]}" in reqs
    mismatches = [requirements_utils._check_requirement_satisfied(r) for r in ("torch==0.0.1", "numpy")]
    assert str(mismatches[0]).startswith("torch (current: ") and mismatches[1] is None


def test_a_saved_model_loads_where_devicebench_is_not_installed(tmp_path: Path) -> None:
    """A UNet and the tutorial net, saved as every run saves its model, load and predict in an interpreter
    that cannot import devicebench: the model carries the code its pickle needs, and only that (each
    file is one upload to the server; the report, plan and tracking code once went with every model)."""
    import subprocess
    import sys

    from devicebench.models.cifar_net import Net
    from devicebench.models.unet import UNet
    from devicebench.tracking.artifacts import portable_model, save_model

    for name, model, example in (
        ("net", Net(), torch.randn(2, 3, 32, 32)),
        ("unet", UNet(3, 21, base_channels=4), torch.randn(2, 3, 32, 32)),
    ):
        module, _, signature = portable_model(model, example)
        save_model(module, tmp_path / name, signature)
    code = tmp_path / "unet" / "code" / "devicebench"
    shipped = sorted(str(p.relative_to(code)) for p in code.rglob("*.py"))
    assert "models/unet.py" in shipped and "models/cifar_net.py" in shipped and "__init__.py" in shipped
    assert not [p for p in shipped if p.startswith(("report/", "plan/", "tracking/", "run/"))], shipped
    assert len(shipped) < 20, shipped
    script = (
        "import importlib.util, sys\n"
        "sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        "sys.path = [p for p in sys.path if not p.rstrip('/').endswith('/src')]\n"
        "assert importlib.util.find_spec('devicebench') is None, 'devicebench is importable here'\n"
        "import mlflow.pytorch, torch\n"
        "for name, shape in (('net', (10,)), ('unet', (21, 32, 32))):\n"
        "    out = mlflow.pytorch.load_model(sys.argv[1] + '/' + name)(torch.randn(3, 3, 32, 32))\n"
        "    assert tuple(out.shape) == (3, *shape), out.shape\n"
        "print('loaded', sys.modules['devicebench'].__file__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loaded " in proc.stdout and "/code/devicebench/" in proc.stdout, proc.stdout
