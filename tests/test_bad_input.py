"""Bad input across every entry point, as one table: each case is a real `devicebench` process in its own
directory with its own embedded SQLite store, judged on what the user sees and what the store holds.

Every case must give the documented exit code (2: bad input, device, data or store), exactly one line on
stderr starting `devicebench: error:` that names the problem, no traceback, and either no run or a FAILED
run carrying `devicebench.error` -- never a FINISHED run, because a result that is not one must not reach
a report.

A fresh process costs 3-6 s of CPU here (torch, torchvision and MLflow imports), so each case is a fork
of one interpreter that imported the CLI once (tests/cli_zygote.py, the test run's shared zygote): its own
process, environment, directory, stdout, stderr and exit code, through the same `devicebench.run.cli.main`
the console script calls. Cases start together on a small pool when the module begins and each test
waits for its own. Wrong credentials for a basic-auth server are refused in test_server_script.py, which
has such a server already (one started here for that one row cost ~9 CPU-s).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from servers import VENV_BIN, devicebench_env, free_port, migrated_sqlite
from zygote import Zygote, shared

HERE = Path(__file__).resolve().parent
WORKERS = 2  # the CI machine has two cores


# --------------------------------------------------------------------------------------------- fixtures


def plan(text: str) -> Callable[[Path], dict[str, str]]:
    """A setup that writes `plan.yaml` into the case directory."""

    def setup(tmp: Path) -> dict[str, str]:
        (tmp / "plan.yaml").write_text(text)
        return {}

    return setup


def cifar_files(kind: str) -> Callable[[Path], dict[str, str]]:
    """CIFAR-10's python layout with files that are missing, garbage (fails md5) or a truncated pickle."""

    def setup(tmp: Path) -> dict[str, str]:
        folder = tmp / "cifar" / "cifar-10-batches-py"
        folder.mkdir(parents=True)
        if kind == "missing":
            return {}
        names = [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"]
        whole = pickle.dumps({"data": bytes(3072 * 4), "labels": [0, 1, 2, 3]})
        if kind.startswith("label="):  # a well-formed batch whose second label is not a class 0-9
            import numpy as np

            label = json.loads(kind.removeprefix("label="))
            whole = pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, label]})
        for name in names:
            (folder / name).write_bytes(b"not a pickle at all" if kind == "garbage" else whole)
        if kind == "truncated":
            (folder / "data_batch_1").write_bytes(whole[: len(whole) // 2])
        return {}

    return setup


def voc_files(kind: str) -> Callable[[Path], dict[str, str]]:
    """A one-image Pascal VOC 2012 layout whose mask is an RGB PNG, or whose list file is missing."""

    def setup(tmp: Path) -> dict[str, str]:
        from PIL import Image

        root = tmp / "voc" / "VOCdevkit" / "VOC2012"
        for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
            (root / sub).mkdir(parents=True)
        Image.new("RGB", (32, 32), (10, 20, 30)).save(root / "JPEGImages" / "a.jpg")
        mask = Image.new("P", (32, 32), 0)
        if kind == "rgb-mask":
            mask = Image.new("RGB", (32, 32), (128, 0, 0))  # a colour mask, not class indices
        mask.save(root / "SegmentationClass" / "a.png")
        if kind == "bomb":  # an "image" declaring 10**10 pixels in a few dozen bytes
            from test_unet_data import png_header

            (root / "JPEGImages" / "a.jpg").write_bytes(png_header(100_000, 100_000))
        for split in ("train", "val"):
            (root / "ImageSets" / "Segmentation" / f"{split}.txt").write_text("a\n")
        return {}

    return setup


def env_file(name: str, content: bytes, setting: str) -> Callable[[Path], dict[str, str]]:
    """A setup that writes `name` into the case directory and points `setting` at it."""

    def setup(tmp: Path) -> dict[str, str]:
        (tmp / name).write_bytes(content)
        return {setting: str(tmp / name)}

    return setup


def source_file(name: str, text: str) -> Callable[[Path], dict[str, str]]:
    """A setup that writes a Python file (a user's model factory) into the case directory."""

    def setup(tmp: Path) -> dict[str, str]:
        (tmp / name).write_text(text)
        return {}

    return setup


def deleted_experiment(tmp: Path) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp / 'm.db'}")
    client.delete_experiment(client.create_experiment("gone"))
    return {"DEVICEBENCH_EXPERIMENT": "gone"}


@dataclass(frozen=True)
class Case:
    """One row: the command, the words its error line must contain, and what the store may hold.

    `run` is "none" (the store holds no run), "failed" (exactly one FAILED run with `devicebench.error`)
    or "any" (no run or a FAILED one). `{tmp}` in an argument is the case's own directory.
    """

    id: str
    args: tuple[str, ...]
    says: str
    run: str = "none"
    setup: Callable[[Path], dict[str, str]] | None = None
    env: dict[str, str] = field(default_factory=dict)
    code: int = 2


M = ("matmul", "--sizes", "32", "--repeats", "1")
CIFAR = ("cifar", "--data", "synthetic", "--epochs", "1", "--batch_size", "8", "--num_workers", "0")
CIFAR_REAL = ("cifar", "--data", "cifar10", "--data_dir", "{tmp}/cifar", "--num_workers", "0")
UNET = ("unet", "--data", "synthetic", "--num_workers", "0", "--image_size", "32", "--base_channels", "4")
UNET_REAL = ("unet", "--data", "voc2012", "--data_dir", "{tmp}/voc", "--num_workers", "0")
UNET_REAL += ("--image_size", "32", "--base_channels", "4", "--train_limit", "1", "--val_limit", "1")
GOOD_RUN = "runs:\n  - entry: matmul\n    params: {sizes: 32}\n"
LAUGHS = (
    "[&l0 lol, " + ", ".join(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 10)) + "]"
)

CASES = [
    # matmul: parameters (refused before any store is touched)
    Case("matmul-unknown-device", (*M, "--device", "gpu"), "--device: unknown device 'gpu'"),
    Case("matmul-zero-size", ("matmul", "--sizes", "0"), "--sizes: '0' is out of range"),
    # a made-up price flag with no price: never attached to a real one (issue 28)
    Case("illustrative-without-price", ("matmul", "--illustrative_price"), "--illustrative_price: "),
    Case("matmul-negative-size", ("matmul", "--sizes=-64"), "--sizes: '-64' is out of range"),
    Case("matmul-size-not-a-number", ("matmul", "--sizes", "8k"), "--sizes: '8k' is not"),
    Case("matmul-empty-sizes", ("matmul", "--sizes", ","), "--sizes: needs at least one value"),
    Case("matmul-huge-size", ("matmul", "--sizes", "100000"), "--sizes: '100000' is out of range"),
    Case("matmul-unknown-dtype", (*M, "--dtypes", "float8"), "--dtypes: unknown value 'float8'"),
    Case("matmul-unknown-backend", (*M, "--backends", "cupy"), "--backends: unknown value 'cupy'"),
    Case("matmul-no-backend-for-dtype", (*M, "--dtypes", "bfloat16", "--backends", "numpy"), "--dtypes"),
    Case("matmul-zero-repeats", (*M[:3], "--repeats", "0"), "--repeats: '0' is out of range"),
    Case("matmul-fraction-repeats", (*M[:3], "--repeats", "1.5"), "--repeats: '1.5' is not an integer"),
    Case("matmul-negative-warmup", (*M, "--warmup=-1"), "--warmup: '-1' is out of range"),
    Case("matmul-unknown-flag", (*M, "--colour", "red"), "unrecognized arguments: --colour"),
    # matmul: the device does not exist here (the run exists and must end FAILED)
    Case("matmul-cuda-7", (*M, "--device", "cuda:7"), "'cuda:7' requested", run="failed"),
    # model and infer (issue 38): refused before any run exists
    Case(
        "model-unknown-name",
        ("model", "--model", "resnt18"),
        "--model: unknown torchvision model 'resnt18'; closest: resnet18",
    ),
    Case(
        "model-factory-without-colon",
        ("model", "--model", "mine.py"),
        "--model: 'mine.py' names a file or module but no factory",
    ),
    Case(
        "model-module-raises",
        ("model", "--model", "{tmp}/boom.py:build"),
        "--model: importing",
        setup=source_file("boom.py", "raise RuntimeError('boom')\n"),
    ),
    Case(
        "model-factory-returns-int",
        ("model", "--model", "{tmp}/int.py:build"),
        "returned int, not a torch.nn.Module",
        setup=source_file("int.py", "def build():\n    return 42\n"),
    ),
    Case("model-malformed-input", ("model", "--input", "3x224"), "--input: '3x224' is not a shape"),
    Case(
        "model-input-the-model-rejects",
        ("model", "--model", "vit_b_16", "--input", "3x64x64"),
        "--input: vit_b_16 does not take 3x64x64 inputs",
    ),
    Case("infer-batch-size-zero", ("infer", "--batch_sizes", "1,0"), "--batch_sizes: '0' is out of range"),
    Case(
        "infer-missing-model-uri",
        ("infer", "--model_uri", "models:/m-0123456789abcdef"),
        "--model_uri: no loadable model at models:/m-0123456789abcdef",
    ),
    Case(
        "infer-not-a-model-uri",
        ("infer", "--model_uri", "s3://bucket/model"),
        "--model_uri: 's3://bucket/model' is not a model URI",
    ),
    # cifar
    Case(
        "cifar-zero-epochs",
        (*CIFAR[:3], "--epochs", "0"),
        "--epochs: '0' is out of range",
    ),
    Case("cifar-negative-batch", (*CIFAR[:3], "--batch_size=-4"), "--batch_size: '-4'"),
    Case(
        "cifar-unknown-model",
        (*CIFAR, "--model", "vgg99"),
        "--model: unknown value 'vgg99'",
    ),
    Case(
        "cifar-unknown-precision",
        (*CIFAR, "--precision", "fp8"),
        "--precision: unknown value",
    ),
    Case(
        "cifar-lr-not-a-number",
        (*CIFAR, "--lr", "fast"),
        "--lr: 'fast' is not a number",
    ),
    Case("cifar-zero-lr", (*CIFAR, "--lr", "0"), "--lr"),
    Case("cifar-lr-inf", (*CIFAR, "--lr", "inf"), "--lr: 'inf' is not a finite number"),
    Case("cifar-lr-overflows", (*CIFAR, "--lr", "1e309"), "--lr: '1e309' is not a finite number"),
    Case("cifar-seed-beyond-64-bits", (*CIFAR, "--seed", "99999999999999999999"), "--seed: '9999"),
    Case(
        "cifar-loss-diverges",  # a FAILED run the report leaves out, not a FINISHED one with a NaN loss
        (*CIFAR, "--train_limit", "32", "--test_limit", "8", "--log_every", "2", "--lr", "1e30"),
        "diverged at step 2",
        run="failed",
        code=1,
    ),
    Case(
        "cifar-bool-not-bool",
        (*CIFAR, "--compile", "maybe"),
        "--compile: 'maybe' is not true or false",
    ),
    Case(
        "cifar-fp16-on-cpu",
        (*CIFAR, "--train_limit", "16", "--test_limit", "8", "--precision", "fp16"),
        "fp16 autocast needs a CUDA device",
        run="failed",
    ),
    Case(
        "cifar-files-missing",
        CIFAR_REAL,
        "is missing",
        run="failed",
        setup=cifar_files("missing"),
    ),
    Case(
        "cifar-files-corrupt",
        CIFAR_REAL,
        "failed its checksum",
        run="failed",
        setup=cifar_files("garbage"),
    ),
    Case(
        "cifar-pickle-truncated",
        (*CIFAR_REAL, "--verify", "false"),
        "is corrupt or truncated",
        run="failed",
        setup=cifar_files("truncated"),
    ),
    *(
        Case(
            f"cifar-label-{label}",
            (*CIFAR_REAL, "--verify", "false"),
            f"label 1 is {label!r}, not a class 0-9",
            run="failed",
            setup=cifar_files(f"label={json.dumps(label)}"),
        )
        for label in (50, -3, "x")
    ),
    # unet
    Case(
        "unet-zero-image-size",
        (*UNET[:3], "--image_size", "0"),
        "--image_size: '0' is out of range",
    ),
    Case(
        "unet-zero-channels",
        (*UNET[:5], "--base_channels", "0"),
        "--base_channels: '0'",
    ),
    Case(
        "unet-cuda-7",
        (*UNET, "--device", "cuda:7"),
        "'cuda:7' requested",
        run="failed",
    ),
    Case(
        "unet-mask-not-palette",
        UNET_REAL,
        "not a palette",
        run="failed",
        setup=voc_files("rgb-mask"),
    ),
    Case(
        "unet-list-file-missing",
        (*UNET_REAL, "--train_list", "{tmp}/no-such-list.txt"),
        "--train_list: list file",
        setup=voc_files("ok"),
    ),
    Case(
        "unet-dataset-missing",
        ("unet", "--data", "voc2012", "--data_dir", "{tmp}/nothing", "--num_workers", "0"),
        "Pascal VOC 2012 not found",
        run="failed",
    ),
    Case(
        "unet-image-decompression-bomb",
        UNET_REAL,
        "could be decompression bomb",
        run="failed",
        setup=voc_files("bomb"),
    ),
    # suite plans (validated whole before anything runs)
    Case("plan-missing", ("suite", "{tmp}/nope.yaml"), "no such file"),
    Case(
        "plan-malformed-yaml",
        ("suite", "{tmp}/plan.yaml"),
        "not valid YAML",
        setup=plan("name: x\nruns: [\n"),
    ),
    Case("plan-not-a-mapping", ("suite", "{tmp}/plan.yaml"), "must be a mapping", setup=plan("- a\n- b\n")),
    Case(
        "plan-unknown-key",
        ("suite", "{tmp}/plan.yaml"),
        "colour: unknown key",
        setup=plan(f"name: x\ncolour: red\n{GOOD_RUN}"),
    ),
    Case(
        "plan-unknown-entry",
        ("suite", "{tmp}/plan.yaml"),
        "unknown entry point 'resnet'",
        setup=plan("name: x\nruns:\n  - entry: resnet\n"),
    ),
    Case(
        "plan-parameter-typo",
        ("suite", "{tmp}/plan.yaml"),
        "params.sizez: unknown parameter of matmul",
        setup=plan("name: x\nruns:\n  - entry: matmul\n    params: {sizez: 32}\n"),
    ),
    Case(
        "plan-bad-value",
        ("suite", "{tmp}/plan.yaml"),
        "--sizes: '-1' is out of range",
        setup=plan("name: x\nruns:\n  - entry: matmul\n    params: {sizes: -1}\n"),
    ),
    Case(
        "plan-zero-repeats",
        ("suite", "{tmp}/plan.yaml"),
        "repeats: must be a whole number >= 1",
        setup=plan(f"name: x\nrepeats: 0\n{GOOD_RUN}"),
    ),
    Case(
        "plan-billion-laughs",  # 10**9 leaves through nine levels of aliases under `description:`
        ("suite", "{tmp}/plan.yaml", "--dry-run"),
        "aliases expand to more than",
        setup=plan(f"name: x\ndescription: {LAUGHS}\n{GOOD_RUN}"),
    ),
    Case(
        "plan-billion-repeats",
        ("suite", "{tmp}/plan.yaml", "--dry-run"),
        "the plan expands to more than",
        setup=plan(f"name: x\nrepeats: 1000000000\n{GOOD_RUN}"),
    ),
    Case(
        "plan-name-is-a-path",
        ("suite", "{tmp}/plan.yaml"),
        "is not a plan name",
        setup=plan(f"name: ../../../../elsewhere/x\n{GOOD_RUN}"),
    ),
    # compare
    Case("compare-unknown-baseline", ("compare", "--baseline", "sometimes"), "--baseline"),
    Case(
        "compare-threshold-not-a-number",
        ("compare", "--threshold", "lots"),
        "--threshold",
    ),
    Case(
        "compare-since-before-1970", ("compare", "--since", "999999999999999d"), "--since: '999999999999999d'"
    ),
    Case("compare-out-not-a-folder", ("compare", "--out", "/dev/null"), "--out: '/dev/null' is not a folder"),
    Case("compare-unknown-workload", ("compare", "--workload", "resnet"), "resnet"),
    # the store and settings
    Case("store-unreachable", M, "is not reachable", env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:{port}"}),
    # wrong credentials for a basic-auth server: test_server_script.py, beside its own such server
    Case("experiment-deleted", M, "experiment 'gone' is deleted", setup=deleted_experiment),
    Case(
        "store-database-refused",  # no MLflow retry lines: one line, at once
        M,
        "is not reachable at 127.0.0.1",
        env={"MLFLOW_TRACKING_URI": "postgresql://u:pw@127.0.0.1:{port}/x"},
    ),
    Case(
        "store-sqlite-unwritable",  # /proc refuses new directories even to root
        M,
        "cannot be written",
        env={"MLFLOW_TRACKING_URI": "sqlite:////proc/devicebench-no-such-dir/m.db"},
    ),
    # issue 27: reproductions that exited 1 with a raw exception, or 0 with wrong data
    Case(
        "plan-impossible-date",
        ("suite", "{tmp}/plan.yaml", "--dry-run"),
        "plan.yaml: YAML: a value that is not valid (month must be in 1..12)",
        setup=plan(f"name: x\ndescription: 2026-13-45\n{GOOD_RUN}"),
    ),
    Case(
        "prices-impossible-date",
        M,
        "prices.yaml (DEVICEBENCH_PRICES): YAML: a value that is not valid (month must be in 1..12)",
        setup=env_file("prices.yaml", b"version: 1\ndate: 2026-13-45\nshapes: {}\n", "DEVICEBENCH_PRICES"),
    ),
    Case(
        "resume-unknown-run",
        ("suite", "{tmp}/plan.yaml", "--resume", "0123456789abcdef0123456789abcdef"),
        "--resume: no run '0123456789abcdef0123456789abcdef'",
        setup=plan(f"name: x\n{GOOD_RUN}"),
    ),
    Case(
        "tracking-uri-not-a-uri",
        M,
        "MLFLOW_TRACKING_URI='http://[::1' is not a valid URI",
        env={"MLFLOW_TRACKING_URI": "http://[::1"},
    ),
    Case(
        "tracking-uri-in-memory",
        M,
        "is an in-memory SQLite store",
        env={"MLFLOW_TRACKING_URI": "sqlite:///:memory:"},
    ),
    Case(
        "dotenv-binary",
        M,
        "dot.env: cannot be read (not UTF-8 text)",
        setup=env_file("dot.env", bytes(range(128, 256)) * 3, "DEVICEBENCH_DOTENV"),
    ),
    Case(
        "store-database-missing",
        M,
        "the database 'devicebench_no_such_db' does not exist",
        env={"MLFLOW_TRACKING_URI": "postgresql://postgres:pw@127.0.0.1:5432/devicebench_no_such_db"},
    ),
    Case(
        "cifar-workers-beyond-host",
        (*CIFAR, "--num_workers", "10000"),
        "--num_workers: 10000 is out of range",
    ),
    Case(
        "cifar-billion-epochs",
        (*CIFAR[:3], "--epochs", "1000000000"),
        "--epochs: '1000000000' is out of range",
    ),
    Case("cifar-negative-lr", (*CIFAR, "--lr=-1"), "--lr: '-1' is out of range; expected a number > 0"),
    Case(
        "sync-spool-is-a-file",
        ("sync",),
        "DEVICEBENCH_SPOOL_DIR=",
        setup=env_file("spool-file", b"not a folder", "DEVICEBENCH_SPOOL_DIR"),
    ),
    Case(
        "experiment-name-too-long",
        M,
        "DEVICEBENCH_EXPERIMENT is 10,000 characters",
        env={"DEVICEBENCH_EXPERIMENT": "e" * 10_000},
    ),
    Case(
        "setting-nan",
        M,
        "DEVICEBENCH_STORE_TIMEOUT_S='nan' must be a number of seconds",
        env={"DEVICEBENCH_STORE_TIMEOUT_S": "nan"},
    ),
    Case(
        "setting-infinite-interval",
        M,
        "DEVICEBENCH_FLUSH_INTERVAL_S='1e309' must be a number of seconds",
        env={"DEVICEBENCH_FLUSH_INTERVAL_S": "1e309"},
    ),
    Case(
        "setting-not-a-number",
        M,
        "DEVICEBENCH_STORE_TIMEOUT_S='soon' is not a number",
        env={"DEVICEBENCH_STORE_TIMEOUT_S": "soon"},
    ),
]


@dataclass
class Outcome:
    proc: subprocess.CompletedProcess
    uri: str
    tmp: Path
    runs: list = field(default_factory=list)


# Nothing may create a logger in a pool thread while pytest runs a test's phases: pytest's log capture
# iterates `logging`'s logger dict as each phase starts, and two CI runs failed with "dictionary changed
# size during iteration" there while a pool thread imported torch and PIL (~150 new loggers) for a case's
# data. So every case's files are written, and a store opened, in the main thread before the pool starts
# (tests/ had no pool-thread logger left after that); the store reads stay one at a time.
STORE_LOCK = threading.Lock()


def run_case(case: Case, tmp: Path, extra: dict[str, str], zygote: Zygote) -> Outcome:
    uri = f"sqlite:///{tmp / 'm.db'}"
    env = devicebench_env(
        uri,
        DEVICEBENCH_SPOOL_DIR=str(tmp / "spool"),
        DEVICEBENCH_EXPERIMENT="bad-input",
        DEVICEBENCH_DATA_DIR=str(tmp / "data"),
        DEVICEBENCH_OCI_METADATA_URL="http://127.0.0.1:9/",
        DEVICEBENCH_STORE_TIMEOUT_S="5",
        DEVICEBENCH_FINAL_FLUSH_S="10",
        OMP_NUM_THREADS="1",
    )
    env.update(extra)
    for k, v in case.env.items():
        env[k] = v.format(port=free_port())
    args = [a.format(tmp=tmp) for a in case.args]
    proc = zygote.run(args, env, cwd=tmp, timeout_s=55)
    out = Outcome(proc, uri, tmp)
    with STORE_LOCK:
        out.runs = stored_runs(uri, tmp)
    return out


def stored_runs(uri: str, tmp: Path) -> list:
    """Every run in the case's store, in any experiment and lifecycle stage."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    if not (tmp / "m.db").exists():
        return []
    client = MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    return list(client.search_runs(ids, run_view_type=ViewType.ALL, max_results=100)) if ids else []


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future]]:
    """Start every selected case on a small pool; each test waits for its own."""
    module = sys.modules[__name__]
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if item.module is module and hasattr(item, "callspec") and "case" in item.callspec.params
    ]
    root = tmp_path_factory.mktemp("bad-input")
    from mlflow.tracking import MlflowClient

    warm = root / "_warm"  # every logger a store read makes, made here (see STORE_LOCK)
    warm.mkdir()
    MlflowClient(f"sqlite:///{warm / 'm.db'}").search_experiments()
    stored_runs(f"sqlite:///{warm / 'm.db'}", warm)
    extras = {}
    for c in selected:  # in this thread: a case's data imports torch and PIL, which make loggers
        (root / c.id).mkdir(parents=True, exist_ok=True)
        migrated_sqlite(root / c.id / "m.db")  # what is checked is the refusal, not the store's creation
        extras[c.id] = c.setup(root / c.id) if c.setup else {}
    zygote = shared()
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    futures = {c.id: pool.submit(run_case, c, root / c.id, extras[c.id], zygote) for c in selected}
    try:
        yield futures
    finally:
        for f in futures.values():
            f.cancel()
        pool.shutdown(wait=True)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_with_one_line_and_no_finished_run(
    case: Case, outcomes: dict[str, Future]
) -> None:
    out: Outcome = outcomes[case.id].result(timeout=115)
    proc = out.proc
    stderr = proc.stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    assert lines[0].startswith("devicebench: error: "), lines[0]
    assert case.says in lines[0], lines[0]
    assert proc.returncode == case.code, (proc.returncode, lines[0])
    statuses = [r.info.status for r in out.runs]
    assert "FINISHED" not in statuses, f"a bad input produced a FINISHED run: {statuses}"
    if case.run == "none":
        assert statuses == [], f"expected no run, the store holds {statuses}"
    if case.run == "failed":
        assert statuses == ["FAILED"], statuses
    for run in out.runs:
        error = run.data.tags.get("devicebench.error", "")
        assert error and "\n" not in error, f"a FAILED run without a one-line devicebench.error: {error!r}"
        assert error in lines[0], (error, lines[0])


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux setpriv")
def test_an_unreadable_data_dir_is_one_line(tmp_path: Path) -> None:
    """A data dir this user may not read. Root reads anything, so root runs this without the
    capabilities that let it (setpriv drops CAP_DAC_OVERRIDE/READ_SEARCH); anyone else, as they are."""
    cifar_files("ok")(tmp_path)
    data = tmp_path / "cifar"
    data.chmod(0o000)
    env = devicebench_env(
        migrated_sqlite(tmp_path / "m.db"),  # the store's migration is not what this tests
        DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"),
        DEVICEBENCH_OCI_METADATA_URL="http://127.0.0.1:9/",
        OMP_NUM_THREADS="1",
    )
    argv = [str(VENV_BIN / "devicebench"), *(a.format(tmp=tmp_path) for a in CIFAR_REAL), "--verify", "false"]
    if os.geteuid() == 0:
        argv = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *argv]
    try:
        proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=110)
    finally:
        data.chmod(0o755)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("devicebench: error: permission denied: "), proc.stderr
    assert str(data) in lines[0] and proc.returncode == 2


def test_the_table_is_wide_enough() -> None:
    """The issue asks for at least 30 cases across every entry point."""
    assert len(CASES) >= 30
    entries = {c.args[0] for c in CASES}
    assert {"matmul", "cifar", "unet", "suite", "compare"} <= entries
    assert len({c.id for c in CASES}) == len(CASES)
