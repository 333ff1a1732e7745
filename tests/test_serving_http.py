"""infer over HTTP: a logged model served by MLflow's own scoring server (`mlflow models serve
--env-manager local` on 127.0.0.1), LoadGen's queries sent as `/invocations` requests, each figure read
from LoadGen's logs; the server's log kept, the server stopped when the command ends. Bad input: a
port in use, a model URI that does not serve, a server that stops answering mid-test."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from devicebench.config.serving_fields import HTTP_BODIES
from devicebench.errors import UsageError
from devicebench.run import scoring
from devicebench.schema import SERVE_MAX_QPS, SERVE_RATE, loadgen_key, loadgen_tag
from devicebench.util.fmt import fmt_s
from devicebench.workloads.serving import BODIES, Body, over_http
from servers import devicebench_env, run_cli


def tiny() -> nn.Module:
    """Built of torch's own modules: its pickle needs nothing of this file where the server loads it."""
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)
    )


def _logged_model(url: str, experiment: str) -> str:
    import mlflow
    import mlflow.pytorch
    from mlflow.tracking import MlflowClient

    # no fluent state left behind (an active experiment, a tracking URI): the worker's next test file
    # starts its own runs in this process, and MLflow refused them against another active experiment
    exp_id = MlflowClient(url).create_experiment(experiment)
    was = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(url)
    x = torch.zeros(1, 3, 8, 8)
    try:
        with mlflow.start_run(experiment_id=exp_id):
            # requirements given: MLflow's own inference of them imports the model in a child (~8 s here)
            info = mlflow.pytorch.log_model(
                tiny().eval(),
                name="tiny",
                input_example=x.numpy(),
                serialization_format="pickle",
                pip_requirements=["torch"],
            )
    finally:
        mlflow.set_tracking_uri(was)
    return info.model_uri


@pytest.fixture(scope="module")
def tiny_uri(mlflow_server) -> str:
    """The tiny model logged once for this file's tests, in an experiment of its own (the runs each
    test looks for are in the test's experiment)."""
    return _logged_model(mlflow_server.url, f"models-{os.getpid()}")


def _summary_ns(text: str, label: str) -> float:
    match = re.search(rf"^{re.escape(label)}\s*:\s*([0-9.]+)", text, re.M)
    assert match, label
    return float(match.group(1))


def test_infer_over_http_reads_loadgens_figures_and_leaves_no_server(
    mlflow_server, tiny_uri: str, experiment_name: str, tmp_path: Path
) -> None:
    """single_stream and server, in-process and over HTTP in one command: every way's figures equal
    LoadGen's summary text, the answer is the HTTP server's highest VALID QPS, the scoring server's
    log is an artifact and no server is left running. The promise is loose (2 s): under `make test`
    on two busy cores an HTTP p99 passed 500 ms at 69 QPS."""
    from mlflow.tracking import MlflowClient

    uri = tiny_uri
    temp = tmp_path / "temp"  # the command's own temporary folders, each removed at its exit
    temp.mkdir()
    env = devicebench_env(mlflow_server.url, DEVICEBENCH_EXPERIMENT=experiment_name, TMPDIR=str(temp))
    args = ["infer", "--model_uri", uri, "--input", "3x8x8", "--scenarios", "single_stream,server",
            "--via", "in_process,http", "--p99_ms", "2000", "--min_duration_s", "0.3", "--min_queries", "500",
            "--serve_budget_s", "3", "--cpu_threads", "1", "--price_per_hour", "1.0"]  # fmt: skip
    done = run_cli(args, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "/M predictions" in done.stdout
    assert f"predictions/s held within p99 {fmt_s(2.0)} over HTTP at batch 1" in done.stdout
    client = MlflowClient(mlflow_server.url)
    (run,) = client.search_runs(
        [client.get_experiment_by_name(experiment_name).experiment_id],
        "tags.`devicebench.workload` = 'infer'",
    )
    m, params = run.data.metrics, run.data.params
    folder = Path(client.download_artifacts(run.info.run_id, "loadgen", str(tmp_path)))
    for via in ("in_process", "http"):
        single = (folder / via / "single_stream_summary.txt").read_text()
        p90 = _summary_ns(single, "90.00 percentile latency (ns)") * 1e-9
        assert m[loadgen_key(via, "single_stream", "p90_s")] == pytest.approx(p90, rel=1e-9)
        assert params[loadgen_tag(via, "server")] == "VALID"
    assert m[SERVE_RATE] == m[SERVE_MAX_QPS] == m[loadgen_key("http", "server", "max_qps")]
    assert '"POST /invocations HTTP/1.1" 200' in (folder / "http" / "scoring_server.log").read_text()
    assert "models serve" not in _processes_of(tmp_path)
    assert not list(temp.iterdir())  # the server's log folder went with it


def _processes_of(folder: Path) -> str:
    """Every process's command line now (a left scoring server would show its `models serve`)."""
    lines = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                lines.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return "\n".join(x for x in lines if str(folder) in x or "127.0.0.1" in x)


@pytest.fixture(scope="class")
def tiny_server(mlflow_server, tiny_uri: str) -> Iterator[scoring.ScoringServer]:
    """The tiny model's scoring server on one torch thread, shared by the tests of one class that only
    ask it, and stopped when the class ends: the tests after it look for a server of the same model and
    must find only their own."""
    server = scoring.start(tiny_uri, 0, mlflow_server.url, threads=1)
    try:
        yield server
    finally:
        server.stop()


def _predictions(server: scoring.ScoringServer, body: Body, indices: list[int]) -> list[list[float]]:
    conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=60)
    try:
        conn.request("POST", "/invocations", body.of(indices), {"Content-Type": body.content_type})
        answer = conn.getresponse()
        text = answer.read()
    finally:
        conn.close()
    assert answer.status == 200, text[:500]
    return json.loads(text)["predictions"]


class TestOneScoringServer:
    """Tests that only send requests to a server, sharing one (`tiny_server`)."""

    def test_the_scoring_server_predicts_on_the_runs_cpu_threads(
        self, tiny_server: scoring.ScoringServer, tiny_uri: str
    ) -> None:
        """`--cpu_threads N` reaches the process that predicts behind `/invocations` (OMP_NUM_THREADS,
        which torch's pool starts with), as it sets in-process: without it the HTTP side ran torch's
        default whatever the flag said, so in-process and HTTP did not compute on the same threads."""
        uvicorn = [pid for pid, (_, cmd) in _serving_processes(tiny_uri).items() if "uvicorn" in cmd]
        environs = [Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") for pid in uvicorn]
        assert environs, "no uvicorn process behind the scoring server"
        for env in environs:
            assert b"OMP_NUM_THREADS=1" in env and b"MKL_NUM_THREADS=1" in env

    def test_a_parquet_body_predicts_what_the_json_one_does(self, tiny_server: scoring.ScoringServer) -> None:
        """`--http_body parquet`: MLflow's scoring server reads a batch's Parquet rows as the samples the
        JSON body holds, in their order and each whole (a body misread, transposed or as one row would
        answer other predictions, or fewer); channels-last inputs are sent in their logical order."""
        xs = torch.randn(5, 3, 8, 8, generator=torch.Generator().manual_seed(0))
        for indices in ([3], [1, 4, 0]):
            want = _predictions(tiny_server, BODIES["json"](xs), indices)
            got = _predictions(tiny_server, BODIES["parquet"](xs), indices)
            nhwc = BODIES["parquet"](xs.contiguous(memory_format=torch.channels_last))
            assert len(got) == len(indices)
            torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
            torch.testing.assert_close(
                torch.tensor(_predictions(tiny_server, nhwc, indices)), torch.tensor(want)
            )
        over_http(tiny_server.url, xs, tiny_server.log, "parquet")([2, 0])  # a 200, or it raises
        assert set(BODIES) == set(HTTP_BODIES)


def test_a_port_in_use_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(UsageError, match=rf"port {port} on 127.0.0.1 is in use"):
            scoring.free_port(port)


def test_a_model_uri_that_does_not_serve_says_the_servers_own_error(tmp_path: Path) -> None:
    """A folder that holds no MLmodel: the scoring server exits, and its own last line is the message."""
    with pytest.raises(UsageError) as err:
        scoring.start(str(tmp_path), 0, f"sqlite:///{tmp_path}/mlflow.db")
    text = str(err.value)
    assert f"the model at {tmp_path} does not serve (exited): " in text and "\n" not in text
    assert err.value.param == "model_uri"
    assert "MLmodel" in text or "No such file" in text or "Could not find" in text, text


def test_a_server_gone_mid_test_says_its_last_lines(tmp_path: Path) -> None:
    """Nothing answers at the URL any more: one line naming it, with the server log's last lines."""
    log = tmp_path / "scoring_server.log"
    frames = '  File "x.py", line 1, in <module>\n    main()\n'
    log.write_text(
        f"INFO: started\nERROR: worker killed\nTraceback (most recent call last):\n{frames}OSError: gone\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    predict = over_http(f"http://127.0.0.1:{port}", torch.zeros(2, 3, 8, 8), log)
    with pytest.raises(
        RuntimeError, match=r"stopped answering .*INFO: started \| ERROR: worker killed \| OSError: gone$"
    ):
        predict([0, 1])


def _serving_processes(uri: str) -> dict[int, tuple[int, str]]:
    """pid -> (process group, command line) of every process of the scoring server for `uri`: its
    leader names the URI, uvicorn (and any worker) shares the leader's group."""
    found: dict[int, tuple[int, str]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            group = int((proc / "stat").read_text().rpartition(")")[2].split()[2])
        except (OSError, ValueError, IndexError):
            continue
        found[int(proc.name)] = (group, cmd)
    leaders = {pid for pid, (_, cmd) in found.items() if "models serve" in cmd and uri in cmd}
    return {pid: v for pid, v in found.items() if pid in leaders or v[0] in leaders}


def _kill_uvicorn_once_loaded(uri: str, forked: Any, wait_s: float = 120) -> bool:
    """SIGKILL the scoring server's uvicorn once its log holds 15 answers to /invocations (past the
    10 untimed calls that set LoadGen's expectations: LoadGen's test is sending)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and forked.poll() is None:
        time.sleep(0.2)
        server = _serving_processes(uri)
        uvicorn = [pid for pid, (_, cmd) in server.items() if "uvicorn" in cmd]
        leader = [pid for pid, (_, cmd) in server.items() if "models serve" in cmd]
        if not uvicorn or not leader:
            continue
        with contextlib.suppress(OSError):
            if (
                Path(os.readlink(f"/proc/{leader[0]}/fd/1"))
                .read_text(errors="replace")
                .count('"POST /invocations')
                >= 15
            ):
                os.kill(uvicorn[0], signal.SIGKILL)
                return True
    return False


@pytest.mark.e2e
def test_a_server_that_dies_mid_test_fails_the_run_with_its_last_lines_and_leaves_nothing(
    mlflow_server, tiny_uri: str, experiment_name: str, tmp_path: Path
) -> None:
    """The real scoring server's uvicorn is killed (SIGKILL, as the OOM killer would) once LoadGen's
    server test is sending: the run ends FAILED, its one-line error holds the server's last log lines
    (its access lines, and MLflow's exception for its dead uvicorn) and no process of the server is
    left. Fails before: the message held the middle of MLflow's traceback, read while it was still
    being written, and none of the lines before it."""
    from mlflow.tracking import MlflowClient

    from zygote import shared

    uri = tiny_uri
    env = devicebench_env(mlflow_server.url, DEVICEBENCH_EXPERIMENT=experiment_name)
    args = ["infer", "--model_uri", uri, "--input", "3x8x8", "--scenarios", "server", "--via", "http",
            "--p99_ms", "2000", "--min_duration_s", "1", "--min_queries", "100", "--serve_budget_s", "120",
            "--cpu_threads", "1", "--clients", "2"]  # fmt: skip
    forked = shared().start(args, env, tmp_path)
    try:
        killed = _kill_uvicorn_once_loaded(uri, forked)
        stdout, stderr = forked.communicate(60)
    finally:
        if forked.poll() is None:  # the test failed before the command ended: it goes, with its server
            forked.kill()
            for pid in _serving_processes(uri):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert killed, "the scoring server never answered 15 queries"
    assert forked.returncode not in (0, None), stdout[-2000:]
    client = MlflowClient(mlflow_server.url)
    (run,) = client.search_runs(
        [client.get_experiment_by_name(experiment_name).experiment_id],
        "tags.`devicebench.workload` = 'infer'",
    )
    error = run.data.tags.get("devicebench.error", "")
    assert run.info.status == "FAILED" and "\n" not in error, (run.info.status, error)
    assert "stopped answering" in error and '"POST /invocations HTTP/1.1" 200' in error, error
    assert error in stderr.strip().splitlines()[-1] or "stopped answering" in stderr, stderr[-2000:]
    assert not _serving_processes(uri), "a process of the scoring server was left running"
