"""Secrets in the environment never reach the tracking store.

Benchmark hosts carry credentials: the tracking server's password, cloud keys, hub tokens. A run records
its host and configuration in detail (tags, params, host.json), which is exactly where an environment dump
would leak them. Each workload runs here against a real server with unique random values in those
variables, and every param, tag, metric key, run name and artifact byte (models included) is searched.

Basic auth end to end (401 without or with wrong credentials, success with the right ones) is tested in
test_server_script.py; that compose publishes on 127.0.0.1 only and containers run as non-root, in
test_docker_files.py; that `.env` is ignored by git, below.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from servers import QUICK_MATMUL, VENV_BIN, MlflowServer, devicebench_env, runs_of
from zygote import shared

ROOT = Path(__file__).resolve().parents[1]
FRESH = "cifar"  # the workload run as a fresh interpreter; the others are forks of the warm zygote
COMMANDS = {
    "matmul": ["matmul", "--sizes", "32,64", "--repeats", "1", *QUICK_MATMUL],
    "cifar": [
        "cifar",
        "--data",
        "synthetic",
        "--epochs",
        "1",
        "--batch_size",
        "16",
        "--train_limit",
        "64",
        "--test_limit",
        "32",
        "--num_workers",
        "0",
        "--log_every",
        "2",
    ],
    "unet": [
        "unet",
        "--data",
        "synthetic",
        "--epochs",
        "1",
        "--batch_size",
        "4",
        "--image_size",
        "32",
        "--base_channels",
        "4",
        "--train_limit",
        "8",
        "--val_limit",
        "4",
        "--num_workers",
        "0",
        "--log_every",
        "1",
    ],
}
SECRET_VARS = (
    "MLFLOW_TRACKING_PASSWORD",
    "HF_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "MY_API_KEY",
    "DATABASE_PASSWORD",
    "OCI_CLI_KEY_CONTENT",
)


@pytest.fixture(scope="module")
def secret_runs(
    mlflow_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], str, dict[str, subprocess.CompletedProcess]]]:
    """Every present workload run at once, with fresh random secrets in its environment."""
    tmp = tmp_path_factory.mktemp("secrets")
    values = {name: f"s3cr3t-{name.lower()}-{secrets.token_hex(12)}" for name in SECRET_VARS}
    experiment = f"secrets-{secrets.token_hex(4)}"
    env = devicebench_env(
        mlflow_server.url,
        DEVICEBENCH_EXPERIMENT=experiment,
        DEVICEBENCH_SPOOL_DIR=str(tmp / "spool"),
        DEVICEBENCH_OCI_METADATA_URL="http://127.0.0.1:9/",
        DEVICEBENCH_OCI_TIMEOUT_S="0.2",
        OMP_NUM_THREADS="1",
        MLFLOW_TRACKING_USERNAME="bench-user",  # the server has no auth app: the header is ignored
        **values,
    )
    # cifar as the console script, a fresh interpreter: whatever reads the environment while modules
    # import reads the secrets too; the others as forks of the warm zygote (their own processes, the
    # secrets their whole environment), which spares two interpreters' imports (~4 CPU-s each)
    fresh = subprocess.Popen(
        [str(VENV_BIN / "devicebench"), *COMMANDS[FRESH]],
        env=env,
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    forked = {name: shared().start(args, env, tmp) for name, args in COMMANDS.items() if name != FRESH}
    done = {}
    for name, proc in [(FRESH, fresh), *forked.items()]:
        out, err = proc.communicate(timeout=150)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    yield values, experiment, done


def needles(values: dict[str, str]) -> dict[str, bytes]:
    """Each secret, plus the basic-auth header made from the password (a leaked header is a leak too)."""
    out = {k: v.encode() for k, v in values.items()}
    header = base64.b64encode(f"bench-user:{values['MLFLOW_TRACKING_PASSWORD']}".encode())
    out["basic-auth header"] = header
    return out


@pytest.mark.e2e
@pytest.mark.timeout(200)
@pytest.mark.parametrize("workload", list(COMMANDS))
def test_no_secret_reaches_params_tags_metrics_or_artifacts(
    workload: str,
    secret_runs: tuple[dict[str, str], str, dict[str, subprocess.CompletedProcess]],
    mlflow_server: MlflowServer,
    tmp_path: Path,
) -> None:
    values, experiment, done = secret_runs
    proc = done[workload]
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = [
        r for r in runs_of(mlflow_server.url, experiment) if r.data.tags["devicebench.workload"] == workload
    ]
    assert run.info.status == "FINISHED"
    client = MlflowClient(mlflow_server.url)

    texts: dict[str, bytes] = {
        "params": repr(sorted(run.data.params.items())).encode(),
        "tags": repr(sorted(run.data.tags.items())).encode(),
        "metric keys": repr(sorted(run.data.metrics)).encode(),
        "run name": (run.info.run_name or "").encode(),
        "command output": (proc.stdout + proc.stderr).encode(),
    }
    local = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / "artifacts")))
    files = [p for p in local.rglob("*") if p.is_file()]
    assert any(p.name == "host.json" for p in files), [p.name for p in files]
    if workload != "matmul":  # models are not in the run's artifact list in MLflow 3: fetch them too
        import mlflow

        mlflow.set_tracking_uri(mlflow_server.url)
        models = client.search_logged_models([run.info.experiment_id], f"source_run_id = '{run.info.run_id}'")
        assert models, "a training run logs its model"
        for model in models:  # named for its architecture (cifar-tutorial, unet), so found, not guessed
            model_dir = Path(
                mlflow.artifacts.download_artifacts(
                    f"runs:/{run.info.run_id}/{model.name}", dst_path=str(tmp_path / "m" / model.name)
                )
            )
            files += [p for p in model_dir.rglob("*") if p.is_file()]
    texts.update({f"artifact {p.relative_to(tmp_path)}": p.read_bytes() for p in files})

    leaks = [
        f"{var} in {where}"
        for where, blob in texts.items()
        for var, needle in needles(values).items()
        if needle in blob
    ]
    assert not leaks, leaks
    print(
        f"\n{workload}: {len(texts)} texts ({len(files)} files) searched for {len(values)} secrets: none found"
    )


def test_dotenv_is_ignored_by_git() -> None:
    """`.env` holds the real credentials; git must never offer to commit it."""
    proc = subprocess.run(
        ["git", "check-ignore", "-q", ".env"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, "`.env` is not ignored by git"
    proc = subprocess.run(["git", "ls-files", ".env"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.stdout.strip() == "", "`.env` is tracked"


def test_the_kubernetes_secret_is_ignored_by_git() -> None:
    """`secret.yaml` is the Kubernetes secret the README has users create at the repository root."""
    proc = subprocess.run(
        ["git", "check-ignore", "-q", "secret.yaml"], cwd=ROOT, capture_output=True, timeout=30
    )
    assert proc.returncode == 0, "`secret.yaml` is not ignored by git"


def test_the_spool_root_is_private(tmp_path: Path) -> None:
    """Journals carry the tracking URI (with any credentials) and every metric: the root is 0700 too."""
    from devicebench.config.settings import load_settings
    from devicebench.tracking.journal import spool_root

    root = spool_root(load_settings({"XDG_STATE_HOME": str(tmp_path / "state")}))
    assert root == tmp_path / "state" / "devicebench" / "spool"
    assert root.stat().st_mode & 0o777 == 0o700
