"""Data-parallel jobs for real: `devicebench cifar --nproc 2` on this CPU is torchrun, two gloo processes
and one MLflow run on a real `mlflow server`; a rank that dies fails that run, naming the rank."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
import torch
from own_tags import facts_of

from devicebench.host.cpu import usable_cores
from devicebench.run.launch import Failure, blame, torchrun_args
from servers import MlflowServer, devicebench_env, one_error_line, run_cli, runs_of

# Two processes need two cores to run side by side (each takes one thread: OMP_NUM_THREADS = cores / 2).
needs_two_cores = pytest.mark.skipif(usable_cores() < 2, reason="a 2-process job needs 2 usable cores")
# 64 synthetic images, 8 a global batch: 8 steps, each logged, so the loss curves compare step by step.
SMALL = ["--data", "synthetic", "--train_limit", "64", "--test_limit", "32", "--num_workers", "0"]
SMALL += ["--epochs", "1", "--log_every", "1"]
# Planted in rank 1 only (a test file on PYTHONPATH, never in the product): its third optimizer step raises.
CRASH = """
import os, time
if os.environ.get("RANK") == "1" and os.environ.get("DEVICEBENCH_JOB_DIR"):
    import torch.optim
    real_step, calls = torch.optim.SGD.step, [0]
    def step(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:
            open(os.environ["PLANTED_AT"], "w").write(str(time.time()))
            raise RuntimeError("planted fault in rank 1")
        return real_step(self, *args, **kwargs)
    torch.optim.SGD.step = step
"""
# Planted in every rank: the first import of MLflow leaves a file naming the rank that made it.
WATCH_MLFLOW = """
import os, sys
if os.environ.get("DEVICEBENCH_JOB_DIR") and "RANK" in os.environ:
    class _Watch:
        def find_spec(self, name, path=None, target=None):
            if name == "mlflow":
                open(os.path.join(os.environ["MLFLOW_SEEN_IN"], os.environ["RANK"]), "w").close()
            return None
    sys.meta_path.insert(0, _Watch())
"""


def _env(server: MlflowServer, experiment: str, **extra: str) -> dict[str, str]:
    return devicebench_env(server.url, DEVICEBENCH_EXPERIMENT=experiment, **extra)


def _leftovers(mark: str) -> list[int]:
    """Processes still alive whose environment carries `mark`: the job's ranks and their children."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _losses(uri: str, run_id: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, "train/loss")]


@pytest.mark.e2e
@needs_two_cores
def test_two_processes_make_one_run_with_the_losses_of_one_process_over_the_global_batch(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    """Rank 0's run carries the world size, every rank's figures and the mean loss over ranks; with DDP
    averaging the gradients, every step's loss equals one process's over the same global batch of 8.
    Rank 1 never imports MLflow (a second of CPU a rank): rank 0, which owns the run, does."""
    mark, seen = uuid.uuid4().hex, tmp_path / "mlflow_seen_in"
    seen.mkdir()
    (tmp_path / "sitecustomize.py").write_text(WATCH_MLFLOW)
    path = f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(
        mlflow_server,
        experiment_name,
        DEVICEBENCH_TEST_MARK=mark,
        PYTHONPATH=path,
        MLFLOW_SEEN_IN=str(seen),
        TMPDIR=str(tmp),
    )
    job = run_cli(["cifar", "--nproc", "2", "--batch_size", "4", *SMALL], env, timeout_s=240)
    assert job.returncode == 0, job.stderr
    assert "finished on cpu ×2 (gloo)" in job.stderr and "Traceback" not in job.stderr
    assert job.stdout.count("Accuracy of the network") == 1  # rank 1 prints nothing
    assert not _leftovers(mark)
    # the job folder goes, and torchrun's logs with it (they were a torchelastic_* folder per job)
    left = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_"))
    assert left == [], left
    assert sorted(p.name for p in seen.iterdir()) == ["0"]
    one = run_cli(["cifar", "--batch_size", "8", *SMALL], env, timeout_s=240)
    assert one.returncode == 0, one.stderr

    runs = {r.data.params["nproc"]: r for r in runs_of(mlflow_server.url, experiment_name)}
    assert sorted(runs) == ["1", "2"]  # one run for the 2-process job
    ddp, single = runs["2"], runs["1"]
    assert ddp.info.status == "FINISHED"
    facts = facts_of(ddp)
    assert facts["devicebench.world_size"] == "2" and facts["devicebench.dist.backend"] == "gloo"
    assert ddp.data.params["global_batch_size"] == "8" == single.data.params["global_batch_size"]
    m = ddp.data.metrics
    assert m["dist/world_size"] == 2 and m["dist/slowest_rank"] in (0, 1)
    per_rank = [m[f"dist/rank/{r}/train_samples_per_s"] for r in (0, 1)]
    assert all(v > 0 for v in per_rank)
    slowest = max(m["dist/rank/0/train_s"], m["dist/rank/1/train_s"])
    assert m["time/train_s"] == pytest.approx(slowest)
    assert m["throughput/train_samples_per_s"] == pytest.approx(
        64 / slowest
    )  # the job's, both ranks' samples
    assert m["dist/allreduce_s"] > 0 and 0 < m["dist/comm_share"] <= 1
    assert "dist/world_size" not in single.data.metrics
    # the job's two processes share one CPU: its share of peak is against that CPU once, measured on
    # every core by rank 0 alone (two ranks measuring at once read it at 0.13-0.41 of 0.43 TFLOP/s here)
    assert m["util/peak_fraction"] == pytest.approx(m["throughput/train_tflops"] / m["util/peak_tflops"])
    cores = f"on this CPU's {len(os.sched_getaffinity(0))} cores"
    assert cores in facts["devicebench.util.peak_source"]

    ddp_losses, single_losses = (
        _losses(mlflow_server.url, ddp.info.run_id),
        _losses(mlflow_server.url, single.info.run_id),
    )
    assert [s for s, _ in ddp_losses] == list(range(1, 9)) == [s for s, _ in single_losses]
    for (_, a), (_, b) in zip(ddp_losses, single_losses, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)  # step 1: same weights; steps 2-8: averaged grads


@pytest.mark.e2e
@needs_two_cores
def test_a_crash_in_rank_1_fails_the_one_run_naming_rank_1_within_seconds(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(CRASH)
    mark, planted = uuid.uuid4().hex, tmp_path / "planted_at"
    path = f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    env = _env(mlflow_server, experiment_name, PYTHONPATH=path, PLANTED_AT=str(planted))
    env["DEVICEBENCH_TEST_MARK"] = mark
    job = run_cli(["cifar", "--nproc", "2", "--batch_size", "4", *SMALL], env, timeout_s=240)
    ended = time.time()

    assert job.returncode == 1, job.stderr
    line = one_error_line(job.stderr)
    assert "rank 1 of 2 failed: RuntimeError: planted fault in rank 1" in line, line
    assert ended - float(planted.read_text()) < 15  # torchrun's monitor stops the job, no timeout waited out
    assert not _leftovers(mark)
    [run] = runs_of(mlflow_server.url, experiment_name)
    assert run.info.status == "FAILED"
    assert facts_of(run)["devicebench.failed_rank"] == "1"
    assert run.data.tags["devicebench.error"] == "rank 1 of 2: RuntimeError: planted fault in rank 1"
    assert f"run {run.info.run_id} ended FAILED" in line


@pytest.mark.e2e
@needs_two_cores
def test_two_nodes_meet_at_node_0_and_make_one_run(mlflow_server: MlflowServer, experiment_name: str) -> None:
    """Two launchers on this host as nodes 0 and 1 of one job (the PyTorchJob's command, one process
    each): they meet at node 0's host:port, node 0 holds rank 0 and the run, node 1 touches no store."""
    from concurrent.futures import ThreadPoolExecutor

    from servers import free_port

    job = ["cifar", "--nproc", "1", "--nnodes", "2", "--rdzv_endpoint", f"127.0.0.1:{free_port()}", *SMALL]
    env = _env(mlflow_server, experiment_name)
    with ThreadPoolExecutor(2) as pool:
        nodes = list(pool.map(lambda r: run_cli([*job, "--node_rank", str(r)], env, timeout_s=240), (1, 0)))
    assert [n.returncode for n in nodes] == [0, 0], [n.stderr for n in nodes]
    assert "finished on cpu ×2 (gloo)" in nodes[1].stderr and not nodes[0].stderr.strip()
    [run] = runs_of(mlflow_server.url, experiment_name)
    assert run.info.status == "FINISHED" and run.data.metrics["dist/world_size"] == 2
    assert run.info.run_name.startswith("cifar · cpu ×2 (2 nodes)")


def test_more_processes_than_cores_is_one_line_exit_2_and_a_failed_run(
    mlflow_server: MlflowServer, experiment_name: str
) -> None:
    """No silent fewer processes: the job is refused before any starts, and its run says why."""
    too_many = usable_cores() + 1
    proc = run_cli(["cifar", "--nproc", str(too_many), *SMALL], _env(mlflow_server, experiment_name))
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert (
        f"--nproc: nproc={too_many} on cpu: this host gives this process {usable_cores()} usable core" in line
    )
    [run] = runs_of(mlflow_server.url, experiment_name)
    assert run.info.status == "FAILED" and "nproc" in run.data.tags["devicebench.error"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--loader", "tensor"], "--loader: loader=tensor holds the whole split on every device"),
        (["--nnodes", "2"], "--rdzv_endpoint: nnodes=2 needs node 0's address as host:port"),
        (["--nnodes", "2", "--node_rank", "2", "--rdzv_endpoint", "h:1"], "--node_rank: 2 is out of range"),
        (["--nnodes", "2", "--rdzv_endpoint", "node0"], "--rdzv_endpoint: 'node0' is not host:port"),
    ],
)
def test_a_job_that_cannot_be_set_up_is_refused_before_any_run(args: list[str], says: str) -> None:
    proc = run_cli(["cifar", "--nproc", "2", *args], devicebench_env("sqlite:////nonexistent/never.db"))
    assert proc.returncode == 2
    assert says in one_error_line(proc.stderr)


def test_world_size_is_not_the_work_one_config_at_every_size_is_one_series() -> None:
    from devicebench.config.fields import config_key
    from devicebench.config.workloads import CifarConfig

    base = config_key("cifar", CifarConfig())
    assert config_key("cifar", CifarConfig(nproc=8, nnodes=2, rdzv_endpoint="h:1")) == base
    assert config_key("cifar", CifarConfig(batch_size=8)) != base


def test_blame_names_the_rank_that_failed_on_its_own() -> None:
    """A peer's broken connection is a consequence; a signal with no report is a rank killed outright."""
    own = {"rank": 1, "code": 1, "message": "RuntimeError: x", "time": 2.0, "peer": False}
    peer = {"rank": 0, "code": 1, "message": "Connection closed by peer", "time": 1.0, "peer": True}
    assert blame({0: peer, 1: own}, {0: (1, ""), 1: (1, "")}) == Failure(1, "RuntimeError: x", 1)
    assert blame({0: peer}, {0: (1, ""), 1: (-9, "SIGKILL")}) == Failure(1, "killed by SIGKILL", 1)
    early = {**own, "rank": 0, "time": 1.0, "code": 2, "message": "--device: no"}
    assert blame({0: early, 1: own}, {}) == Failure(0, "--device: no", 2)
    alike = {**early, "rank": 1, "time": 0.5}  # every rank found the same data missing: name rank 0
    assert blame({0: early, 1: alike}, {}) == Failure(0, "--device: no", 2)
    assert blame({}, {3: (1, "")}) == Failure(3, "exited with code 1 without a report", 1)


def test_torchrun_flags_one_node_meets_itself_several_meet_at_node_0() -> None:
    assert torchrun_args(2, 1, 0, "")[0] == "--standalone"
    many = torchrun_args(8, 2, 1, "10.0.0.5:29500")
    assert {"--rdzv-backend=static", "--node-rank=1", "--master-addr=10.0.0.5", "--master-port=29500"} <= set(
        many
    )
    assert "--max-restarts=0" in many and "--rdzv-id=devicebench" in many  # the same id on every node
    node0 = torchrun_args(8, 2, 0, "10.0.0.5:29500")
    assert [a for a in many if "node-rank" not in a] == [a for a in node0 if "node-rank" not in a]


@pytest.mark.gpu
def test_nccl_job_on_every_visible_gpu(mlflow_server: MlflowServer, experiment_name: str) -> None:
    """One process per visible GPU, NCCL between them, the run on rank 0's; the ranks' GPUs differ."""
    gpus = torch.cuda.device_count()
    if gpus < 2:
        pytest.skip("an NCCL job needs 2 or more visible GPUs")
    args = ["cifar", "--device", "cuda", "--nproc", str(gpus), "--batch_size", "64", *SMALL]
    proc = run_cli(args, _env(mlflow_server, experiment_name), timeout_s=300, real=True)
    assert proc.returncode == 0, proc.stderr
    [run] = runs_of(mlflow_server.url, experiment_name)
    facts = facts_of(run)
    assert facts["devicebench.dist.backend"] == "nccl"
    assert run.data.metrics["dist/world_size"] == gpus
    assert facts["devicebench.device.resolved"] == "cuda:0"  # rank 0's GPU; rank r takes cuda:r
