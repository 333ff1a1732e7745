"""Plans and the suite runner: validation before anything runs, parent/child runs, failures, resume."""

from __future__ import annotations

import shutil
import textwrap
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from own_tags import facts_of

from devicebench.config.settings import load_settings
from devicebench.errors import UsageError
from devicebench.plan.spec import load_plan
from devicebench.plan.suite import _run_items, check_resumable, unavailable_reason
from devicebench.tracking.locks import release, try_lock
from servers import ABSENT_GPU, MlflowServer, devicebench_env, migrated_sqlite, run_cli, runs_of

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_matrix_and_repeats_expand_in_order(tmp_path: Path) -> None:
    plan = load_plan(
        write(
            tmp_path,
            """
            name: t
            repeats: 2
            runs:
              - entry: matmul
                params: {sizes: [64, 128]}
                matrix: {device: [cpu, cuda], dtypes: [float32, float64]}
              - entry: matmul
                repeats: 1
            """,
        )
    )
    assert len(plan.runs) == 2 * 2 * 2 + 1
    first = plan.runs[0]
    assert first.params == {"sizes": "64,128", "device": "cpu", "dtypes": "float32"}
    assert (first.repeat, first.repeats) == (1, 2)
    assert plan.runs[1].item_id != first.item_id, "repeats are distinct items"
    assert [r.index for r in plan.runs] == list(range(1, 10))


def test_log_models_first_logs_each_configs_model_with_its_first_repeat_only(tmp_path: Path) -> None:
    text = "name: t\nrepeats: 3\n{}runs: [{{entry: cifar, matrix: {{width: [1, 2]}}}}]\n"
    first = load_plan(write(tmp_path, text.format("log_models: first\n")))
    assert [(r.params["width"], r.repeat, r.log_model) for r in first.runs] == [
        ("1", 1, True),
        ("1", 2, False),
        ("1", 3, False),
        ("2", 1, True),
        ("2", 2, False),
        ("2", 3, False),
    ]
    assert all(r.log_model for r in load_plan(write(tmp_path, text.format(""))).runs)


def test_tune_adds_one_tuned_run_beside_each_item_it_can_tune_on_either_device(tmp_path: Path) -> None:
    """Each side as configured stays (the pair's first speedup); the tuned runs are each device at its
    best, on the GPU as on the CPU; tune_precision reaches the tuned items' command lines."""
    plan = load_plan(
        write(
            tmp_path,
            """
            name: t
            repeats: 2
            tune: true
            tune_precision: true
            runs:
              - entry: cifar
                params: {data: synthetic}
                matrix: {device: [cpu, cuda]}
              - entry: matmul
                params: {device: cpu}
              - entry: unet
                params: {data: synthetic, device: cpu, nproc: 2}
            """,
        )
    )
    labels = [(r.entry, r.params.get("device"), r.repeat, r.tune) for r in plan.runs]
    assert labels == [
        ("cifar", "cpu", 1, False),
        ("cifar", "cpu", 2, False),
        ("cifar", "cpu", 1, True),
        ("cifar", "cuda", 1, False),
        ("cifar", "cuda", 2, False),
        ("cifar", "cuda", 1, True),
        ("matmul", "cpu", 1, False),
        ("matmul", "cpu", 2, False),
        ("unet", "cpu", 1, False),  # a CPU job of 2 processes: tuning measures one, so no tuned item
        ("unet", "cpu", 2, False),
    ]
    tuned = plan.runs[2]
    assert tuned.argv()[1:5] == ["-P", "-m", "devicebench", "tune"] and tuned.argv()[5] == "cifar"
    assert tuned.argv()[6] == "--tune_precision" and "--tune_precision" not in plan.runs[0].argv()
    from devicebench.plan.suite import tuning_summary

    stderr = (
        "tune cifar: [1/7] 2 threads, data in memory: 3,143 samples/s (0.3 s)  <- best so far\n"
        "tune cifar: [again 1/2] 2 threads, data in memory: 3,090 samples/s (0.7 s)\n"
        "tune cifar: 2 of 9 trials skipped, as they did not fit in tune_budget_s=60 (61 s spent); raise it\n"
        "tune cifar: fastest 2 threads, data in memory; measuring the CPU side that way\n"
        "devicebench: cifar run abc finished on cpu -> sqlite:///mlflow.db\n"
    )
    assert tuning_summary(tuned, stderr) == stderr.splitlines()[2:4], (
        "the outcome under the item, not each trial"
    )
    assert tuned.item_id != plan.runs[0].item_id and tuned.label.startswith("tune cifar")
    with pytest.raises(UsageError, match="tune: must be true or false"):
        load_plan(write(tmp_path, "name: t\ntune: yes please\nruns: [{entry: matmul}]\n"))


# A billion laughs, small enough to be harmless where it is not caught: 10**6 leaves of 12 characters.
LAUGHS = (
    "[&l0 lololololol, "
    + ", ".join(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 7))
    + "]"
)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "name: t\nruns: [{entry: matmul, params: {sises: 64}}]\n",
            "runs[0].params.sises: unknown parameter of matmul",
        ),
        (
            "name: t\nruns: [{entry: matmul, matrix: {colour: [red]}}]\n",
            "runs[0].matrix.colour: unknown parameter",
        ),
        (
            "name: t\nruns: [{entry: resnet}]\n",
            "runs[0].entry: unknown entry point 'resnet'; allowed: matmul, cifar, unet",
        ),
        ("name: t\nrunz: []\n", "runz: unknown key; allowed:"),
        ("name: t\nruns: [{entry: matmul, when: nightly}]\n", "runs[0].when: unknown key"),
        ("name: t\nruns: []\n", "runs: required"),
        ("runs: [{entry: matmul}]\n", "name: required"),
        ("name: t\nrepeats: 0\nruns: [{entry: matmul}]\n", "repeats: must be a whole number >= 1"),
        ("name: t\nruns: [{entry: matmul, params: {sizes: -5}}]\n", "runs[0]: --sizes: '-5' is out of range"),
        (
            "name: t\nruns: [{entry: matmul, matrix: {device: [cpu, gpu]}}]\n",
            "--device: unknown device 'gpu'",
        ),
        (
            "name: t\nruns: [{entry: matmul, matrix: {device: cpu}}]\n",
            "runs[0].matrix.device: must be a non-empty list",
        ),
        (
            "name: t\nskip_unavailable: maybe\nruns: [{entry: matmul}]\n",
            "skip_unavailable: must be true or false",
        ),
        (
            "name: t\nruns: [{entry: matmul}]\nreport: {baseline: last}\n",
            "report.baseline: must be none or previous",
        ),
        ("name: t\nruns: [{entry: matmul}\n", "not valid YAML"),
        ("- just\n- a list\n", "top level: must be a mapping"),
        # bombs: each is refused in milliseconds, before anything walks the structure
        (f"name: t\ndescription: {LAUGHS}\nruns: [{{entry: matmul}}]\n", "aliases expand to more than"),
        (
            "name: t\nruns: [{entry: matmul, params: {sizes: &s [1, *s]}}]\n",
            "line 2: an anchor refers to itself",
        ),
        ("name: t\nrepeats: 20000\nruns: [{entry: matmul}]\n", "runs[0]: the plan expands to more than"),
        (
            "name: t\nruns: [{entry: matmul, repeats: 100, matrix: {sizes: ["
            + ",".join(["8"] * 101)
            + "]}}]\n",
            "runs[0]: the plan expands to more than 10,000 runs",
        ),
        (
            "name: t\ndescription: " + "[" * 5000 + "]" * 5000 + "\nruns: [{entry: matmul}]\n",
            "nested too deeply",
        ),
        (
            "name: t\nruns: [{entry: matmul}]\n" + "#" * 80 + "\n" + ("# padding\n" * 120_000),
            "a plan is at most",
        ),
        # checked before any run, not after all of them
        ("name: t\nruns: [{entry: matmul}]\nreport: {threshold: 5}\n", "report.threshold: 5 is not allowed"),
        ("name: t\nruns: [{entry: matmul}]\nreport: {threshold: [1]}\n", "report.threshold: [1] is not"),
        ('name: "it\'s"\nruns: [{entry: matmul}]\n', 'name: "it\'s" is not a plan name'),
        ("name: ../../../../elsewhere/x\nruns: [{entry: matmul}]\n", "is not a plan name"),
        ("name: t\nexperiment: [1, 2]\nruns: [{entry: matmul}]\n", "experiment: must be an experiment name"),
        (f"name: t\nexperiment: {'e' * 10_000}\nruns: [{{entry: matmul}}]\n", "experiment: must be"),
        ("name: t\ndescription: [a, b]\nruns: [{entry: matmul}]\n", "description: must be a string"),
        ("name: t\nlog_models: some\nruns: [{entry: matmul}]\n", "log_models: 'some' is not allowed"),
    ],
)
def test_bad_plans_are_refused_with_one_line_naming_file_and_key(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as err:
        load_plan(path)
    msg = str(err.value)
    assert msg.startswith(f"plan {path}: ")
    assert needle in msg
    assert "\n" not in msg


@pytest.mark.parametrize("name", ["demo", "cpu_vs_gpu", "crossover", "nightly", "scaling"])
def test_shipped_plans_are_valid(name: str) -> None:
    plan = load_plan(ROOT / "experiments" / f"{name}.yaml")
    assert plan.runs


@pytest.mark.parametrize("plan_file", ["cpu_vs_gpu.yaml", "nightly.yaml", "best_vs_best.yaml"])
def test_the_study_plans_tune_each_device_so_the_report_has_each_at_its_best(plan_file: str) -> None:
    """Every cifar and unet item runs once more tuned on its own device, the GPU as well as the CPU:
    the report then gives each device at its best against the other, not only as configured."""
    plan = load_plan(ROOT / "experiments" / plan_file)
    items = {(r.entry, r.params.get("device"), r.params.get("batch_size")) for r in plan.runs}
    tuned = {(r.entry, r.params.get("device"), r.params.get("batch_size")) for r in plan.runs if r.tune}
    assert tuned == {i for i in items if i[0] in ("cifar", "unet")}
    assert {device for _, device, _ in tuned} == {"cpu", "cuda"}


def test_scaling_plan_is_one_series_of_four_world_sizes_on_cuda() -> None:
    """experiments/scaling.yaml: 1, 2, 4 and 8 processes of one config (one config key, so the report
    pairs them as a series), on CUDA, skipping what the host lacks, through the DataLoader (a
    DistributedSampler shards it; loader=tensor has no sampler)."""
    from devicebench.config.fields import build_config, config_key
    from devicebench.config.workloads import CifarConfig

    plan = load_plan(ROOT / "experiments" / "scaling.yaml")
    assert plan.skip_unavailable and plan.report
    assert [r.params["nproc"] for r in plan.runs] == ["1", "2", "4", "8"]
    assert {r.entry for r in plan.runs} == {"cifar"}
    assert {r.params["device"] for r in plan.runs} == {"cuda"}
    assert {r.params["loader"] for r in plan.runs} == {"dataloader"}
    keys = {config_key("cifar", build_config(CifarConfig, r.params)) for r in plan.runs}
    assert len(keys) == 1, "the four world sizes must share one config key"


def _refuse_to_run(item: object) -> dict[str, str]:
    # _run_items asks for a child's environment right before it starts the child: no process here
    raise _WouldRun(item)


class _WouldRun(Exception):
    pass


def test_skip_unavailable_names_an_nproc_beyond_this_hosts_cores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """More processes than this process may use cores: skipped, in one line that says why. In process,
    with no child started: an item that is not skipped fails the test instead of training."""
    from devicebench.host.cpu import usable_cores

    cores = usable_cores()
    path = write(
        tmp_path,
        f"""
        name: too_many
        skip_unavailable: true
        runs:
          - entry: cifar
            params: {{device: cpu, data: synthetic}}
            matrix: {{nproc: [{cores + 1}, {cores + 5}]}}
        report: false
        """,
    )
    outcome = _run_items(load_plan(path), set(), _refuse_to_run)
    assert [i.params["nproc"] for i in outcome.skipped] == [str(cores + 1), str(cores + 5)]
    assert outcome.finished == 0 and not outcome.failed
    noun = "core" if cores == 1 else "cores"
    out = capsys.readouterr().out
    assert f"[1/2] cifar device=cpu data=synthetic nproc={cores + 1} ... skipped: " in out
    assert f"skipped: nproc={cores + 1} but {cores} usable cpu {noun} on this host" in out
    assert f"skipped: nproc={cores + 5} but {cores} usable cpu {noun} on this host" in out


def test_without_skip_unavailable_too_many_processes_still_run(tmp_path: Path) -> None:
    """No skip_unavailable: the item is started (and the CLI refuses it, exit 2, as a listed failure)."""
    from devicebench.host.cpu import usable_cores

    path = write(
        tmp_path,
        f"name: t\nruns: [{{entry: cifar, params: {{device: cpu, nproc: {usable_cores() + 1}}}}}]\n",
    )
    with pytest.raises(_WouldRun):
        _run_items(load_plan(path), set(), _refuse_to_run)


def test_an_nproc_the_host_has_is_not_skipped(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "name: t\nskip_unavailable: true\nruns: [{entry: cifar, params: {device: cpu, nproc: 1}}]\n",
    )
    with pytest.raises(_WouldRun):
        _run_items(load_plan(path), set(), _refuse_to_run)


@pytest.mark.parametrize(
    ("device", "nproc", "capacity", "reason"),
    [
        ("cuda", 8, ("cuda", 1), "nproc=8 but 1 cuda device on this host"),
        ("cuda", 8, ("cuda", 4), "nproc=8 but 4 cuda devices on this host"),
        ("auto", 2, ("cpu", 1), "nproc=2 but 1 usable cpu core on this host"),
        ("mps", 2, ("mps", 1), "nproc=2 but 1 mps device on this host"),
        ("cuda", 4, None, "no cuda device on this host"),
        ("cuda", 4, ("cuda", 4), None),
        ("cpu", 1, ("cpu", 1), None),
    ],
)
def test_unavailable_reason_words(
    device: str, nproc: int, capacity: tuple[str, int] | None, reason: str | None
) -> None:
    assert unavailable_reason(device, nproc, capacity) == reason


def test_crossover_dry_run_prints_the_grid(tmp_path: Path) -> None:
    proc = run_cli(
        ["suite", str(ROOT / "experiments" / "crossover.yaml"), "--dry-run"],
        devicebench_env("sqlite:///x.db"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "crossover" in proc.stdout and "32 runs" in proc.stdout
    assert "width=8 batch_size=256" in proc.stdout
    assert not (tmp_path / "x.db").exists(), "a dry run touches no store"


def test_a_typo_exits_2_before_any_run_starts(
    tmp_path: Path, mlflow_server: MlflowServer, experiment_name: str
) -> None:
    path = write(
        tmp_path,
        f"name: t\nexperiment: {experiment_name}\nruns:\n  - entry: matmul\n  - entry: matmul\n    params: {{repeat: 3}}\n",
    )
    proc = run_cli(["suite", str(path)], devicebench_env(mlflow_server.url), cwd=tmp_path)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "runs[1].params.repeat: unknown parameter of matmul" in lines[0]
    assert runs_of(mlflow_server.url, experiment_name) == []


@pytest.mark.e2e
def test_a_real_suite_runs_children_carries_on_after_a_failure_and_resumes(
    tmp_path: Path, mlflow_server: MlflowServer, experiment_name: str
) -> None:
    """Two matmul runs and one that fails at run time (a GPU no host has): exit 1, the others FINISHED,
    the failure listed; --resume then re-runs only the failed item."""
    path = write(
        tmp_path,
        f"""
        name: tiny
        experiment: {experiment_name}
        runs:
          - entry: matmul
            params: {{sizes: 64, repeats: 1, warmup: 0, dtypes: float32, min_time_s: 0, isolation: none}}
            matrix: {{device: [cpu, {ABSENT_GPU}]}}
          - entry: matmul
            params: {{sizes: 32, repeats: 1, warmup: 0, backends: numpy, min_time_s: 0, isolation: none}}
        report: false
        """,
    )
    env = devicebench_env(mlflow_server.url, DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"))
    proc = run_cli(["suite", str(path)], env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[2/3] matmul" in proc.stdout and "FAILED" in proc.stdout
    assert f"device '{ABSENT_GPU}' requested" in proc.stdout
    assert "2 finished, 1 failed, 0 skipped" in proc.stdout

    runs = runs_of(mlflow_server.url, experiment_name)
    parents = [r for r in runs if r.data.tags.get("devicebench.workload") == "suite"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 1 and len(children) == 3
    parent = parents[0]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
    assert sorted(r.info.status for r in children) == ["FAILED", "FINISHED", "FINISHED"]
    assert all(facts_of(r)["devicebench.suite"] == f"tiny:{parent.info.run_id}" for r in children)
    assert parent.data.metrics["suite/failed"] == 1.0
    assert parent.info.status == "FAILED", "a plan with a failed item is not FINISHED as if whole"
    assert parent.data.tags["devicebench.error"] == "1 of 3 plan runs failed (suite.json)"
    assert parent.data.tags["mlflow.note.content"] == "plan tiny: 2 finished, 1 failed, 0 skipped"
    assert float(parent.data.tags["devicebench.suite.alive"]) > 0, "the suite said it was alive while it ran"

    resumed = run_cli(["suite", str(path), "--resume", parent.info.run_id], env, cwd=tmp_path)
    assert resumed.returncode == 1
    assert resumed.stdout.count("already finished, kept") == 2
    children = [
        r for r in runs_of(mlflow_server.url, experiment_name) if r.data.tags.get("mlflow.parentRunId")
    ]
    assert len(children) == 4, "only the unfinished item ran again"


def test_skip_unavailable_lists_gpu_runs_as_skipped(
    tmp_path: Path, mlflow_server: MlflowServer, experiment_name: str
) -> None:
    path = write(
        tmp_path,
        f"""
        name: skip
        experiment: {experiment_name}
        skip_unavailable: true
        runs:
          - entry: matmul
            params: {{sizes: 32, repeats: 1, backends: numpy, min_time_s: 0, isolation: none}}
            matrix: {{device: [cpu, {ABSENT_GPU}]}}
        report: false
        """,
    )
    proc = run_cli(["suite", str(path)], devicebench_env(mlflow_server.url), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"skipped: no {ABSENT_GPU} device on this host" in proc.stdout
    assert "1 finished, 0 failed, 1 skipped" in proc.stdout
    client = MlflowClient(mlflow_server.url)
    exp = client.get_experiment_by_name(experiment_name)
    assert len(client.search_runs([exp.experiment_id], "tags.mlflow.parentRunId != ''")) == 1


def test_four_suites_starting_at_once_on_a_fresh_store_all_get_its_experiment(tmp_path: Path) -> None:
    """Issue 40, item 2: four suites at once on a fresh SQLite store all died in MLflow's schema
    migration (`duplicate column name: step`) when the plan's experiment was created before the store's
    locked creation. Four processes run a suite's start (prepare_store) at once, as four suites do:
    forks of the warm zygote, so the four reach the store within milliseconds of each other (cold
    interpreters arrived seconds apart, after ~3 CPU-s of imports each)."""
    from zygote import shared

    script = tmp_path / "start.py"
    script.write_text(
        "import dataclasses\nfrom devicebench.config.settings import load_settings\n"
        "from devicebench.plan.suite import prepare_store\n"
        "print(prepare_store(dataclasses.replace(load_settings(), experiment='four')))\n"
    )
    env = devicebench_env(f"sqlite:///{tmp_path / 'mlflow.db'}")
    procs = [shared().start([], env, tmp_path, script=str(script)) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err.strip().splitlines()[-1:] for _, err in outs]
    assert len({out.strip() for out, _ in outs}) == 1, "one experiment, the same id for all four"


def test_resume_of_a_suite_still_running_is_refused_on_this_host_and_from_another(tmp_path: Path) -> None:
    """Issue 40, item 3: `suite --resume` of a suite still running re-ran, from another spool (a second
    host sharing the store), the items the live suite had not finished: twice side by side. From the
    same spool it died with a raw `OSError: [Errno 39] Directory not empty`."""
    path = write(
        tmp_path,
        """
        name: live
        runs:
          - entry: matmul
            params: {sizes: 32, backends: numpy}
        report: false
        """,
    )
    env = devicebench_env(
        migrated_sqlite(tmp_path / "mlflow.db"), DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool")
    )
    settings = load_settings(env)
    client = MlflowClient(settings.tracking_uri)
    run_id = client.create_run(
        client.create_experiment("x"), tags={"devicebench.workload": "suite"}
    ).info.run_id
    client.log_param(run_id, "name", "live")
    plan = load_plan(path)
    client.set_tag(run_id, "devicebench.suite.alive", str(int(time.time())))  # another host, just now
    with pytest.raises(UsageError, match=r"is a suite still running: its suite was alive \d+ s ago") as err:
        check_resumable(settings, plan, run_id)
    assert err.value.param == "resume"
    client.set_tag(run_id, "devicebench.suite.alive", str(int(time.time()) - 3600))  # that suite died
    check_resumable(settings, plan, run_id)
    lock = tmp_path / "spool" / run_id / "lock"
    lock.parent.mkdir(parents=True)
    fd = try_lock(lock)  # this host's live suite holds its journal
    try:
        with pytest.raises(UsageError, match=r"still running on this host \(process \d+\)"):
            check_resumable(settings, plan, run_id)
    finally:
        release(fd)
    with pytest.raises(
        UsageError, match=r"died on this host with its journal unsent; run `devicebench sync` first"
    ):
        check_resumable(settings, plan, run_id)  # resuming onto that journal was the raw Errno 39
    shutil.rmtree(lock.parent)  # what sync does once it has sent it
    check_resumable(settings, plan, run_id)


def test_a_dry_run_says_what_this_host_lacks_and_how_long_the_plan_may_take(tmp_path: Path) -> None:
    """`suite --dry-run` of cpu_vs_gpu.yaml listed cuda and real-data items without saying that this
    host had no CUDA and no CIFAR-10, or how long the plan would take."""
    from devicebench.plan.cli import dry_run, has_cuda

    plan_file = tmp_path / "p.yaml"
    plan_file.write_text(
        textwrap.dedent(
            f"""\
            name: lacks
            skip_unavailable: true
            time_limit_s: 600
            runs:
              - entry: cifar
                params: {{data: cifar10, data_dir: "{tmp_path}", epochs: 1}}
                matrix: {{device: [cpu, cuda]}}
            """
        )
    )
    lines = dry_run(load_plan(plan_file))
    assert lines[0] == f"plan lacks ({plan_file}): 2 runs; their time limits add up to 20.0 min"
    missing = f"no cifar10 files in {tmp_path / 'cifar-10-batches-py'}"
    assert lines[1].endswith(f"device=cpu  [{missing}: skipped here]"), lines
    cuda = "" if has_cuda() else "no CUDA on this host; "
    assert lines[2].endswith(f"device=cuda  [{cuda}{missing}: skipped here]"), lines
    (tmp_path / "cifar-10-batches-py").mkdir()
    lines = dry_run(load_plan(plan_file))
    assert lines[1].endswith("device=cpu") and ("no CUDA" in lines[2]) == bool(cuda), lines
