"""Issue 55, finding 4: a run notices how busy its host was while it ran (host/busy.py), says so in its
one line and the report says it beside the figures and in the verdicts, with what to do; a config's
repeats that spread wide say so too, paired or not. The measurement against real competing processes:
busy-loop children on every core (a host kept busy) read far above the threshold."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient
from test_report_logic import pair, rec, side, train

from devicebench.host.busy import CpuSample, busy_figures, cores_busy_s, others_share, sample
from devicebench.report.judge.judgement import judge
from devicebench.report.judge.reliability import busy_host, busy_side, left_out_lines, noisy_side
from devicebench.report.model.comparison import compare
from devicebench.report.model.cost import side_cost
from devicebench.report.read.options import Query
from devicebench.report.read.query import read_runs
from devicebench.report.render.content import build_doc
from devicebench.report.render.document import to_markdown
from devicebench.report.render.terminal import terminal_table
from devicebench.run.run_line import summary_line
from devicebench.schema import HOST_LOAD_1M, HOST_OTHERS_SHARE, TRAIN_S
from devicebench.util.busy_host import BUSY_SHARE, busy_caveat, is_busy
from devicebench.util.fmt import fmt_s, fmt_share, fmt_x
from servers import QUICK_MATMUL, MlflowServer, devicebench_env, run_cli, runs_of

HOG = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass"


@contextmanager
def hogs(seconds: float, orphaned: bool = False, per_core: int = 2) -> Iterator[None]:
    """`per_core` busy loops per usable core, each ending by itself after `seconds`. `orphaned`: started
    through a shell that exits at once, so that they are no descendants of this process (whose own
    tree a sample counts as the run's)."""
    n = per_core * len(os.sched_getaffinity(0))
    code = HOG.format(s=seconds)
    if orphaned:
        loops = " ".join(f"{sys.executable} -c '{code}' >/dev/null 2>&1 & echo $!;" for _ in range(n))
        out = subprocess.run(["sh", "-c", loops], capture_output=True, text=True, check=True, timeout=30)
        pids = [int(x) for x in out.stdout.split()]
    else:
        procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
        pids = [p.pid for p in procs]
    try:
        time.sleep(0.3)  # every loop has started spinning
        yield
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, 15)
        if not orphaned:
            for p in procs:
                p.wait(timeout=30)


# ------------------------------------------------------------------------------------- the measurement


def test_the_busy_time_of_the_usable_cores_is_read_per_core_with_steal_and_without_idle() -> None:
    """psutil's per-core times: user, nice, system, irq, softirq and steal are busy; idle and iowait not."""
    core = type(psutil.cpu_times(percpu=True)[0])  # the record psutil returns for one core
    cpu0 = core(1.0, 0.0, 0.5, 20.0, 0.07, 0.01, 0.02, 0.03, 0.0, 0.0)
    cpu1 = core(2.0, 0.1, 0.2, 20.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    cpu2 = core(99.99, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert cores_busy_s([cpu0, cpu1, cpu2], [0, 1]) == pytest.approx(1.56 + 2.3)
    assert cores_busy_s([cpu0, cpu1, cpu2], [2]) == 99.99
    real = psutil.cpu_times(percpu=True)
    assert cores_busy_s(real, [0]) == pytest.approx(
        real[0].user + real[0].nice + real[0].system + real[0].irq + real[0].softirq + real[0].steal
    )


def test_others_share_is_the_cores_time_beyond_the_run_s_own_tree() -> None:
    start = CpuSample(wall_s=0.0, busy_s=10.0, own_s=1.0, cores=2)
    # 4 s of wall on 2 cores: 8 core-seconds; the cores were busy 7 s of it, the run's tree 3 s
    assert others_share(start, CpuSample(4.0, 17.0, 4.0, 2)) == 0.5
    assert others_share(start, CpuSample(4.0, 13.0, 4.0, 2)) == 0.0, "all of it the run's own"
    assert others_share(start, CpuSample(4.0, 12.9, 4.0, 2)) == 0.0, "never below zero (tick rounding)"
    assert others_share(start, start) is None, "no time, no share"
    assert busy_figures(None, start) == {}


def test_a_sample_against_real_busy_loops_reads_far_above_the_threshold() -> None:
    """The real /proc: busy loops on every core that are not the run's read as others' time, far above
    BUSY_SHARE (a host this busy from other engineers' work reads the same: it is busy)."""
    with hogs(3.0, orphaned=True):
        before = sample()
        time.sleep(1.5)
        after = sample()
    assert before is not None and after is not None
    share = others_share(before, after)
    assert share is not None and share >= 2 * BUSY_SHARE, share


SPIN_THEN_SLEEP = (
    "import time\nwhile time.process_time() < 0.6: pass\nprint('spun', flush=True)\ntime.sleep(30)"
)


def test_the_run_s_own_children_count_as_its_own_alive_and_reaped() -> None:
    """A child that spun 0.6 CPU-seconds is the run's own time while it lives (/proc/<pid>/stat) and
    once reaped (os.times' children): a DataLoader worker or matmul's NumPy child is never 'others'."""
    before = sample()
    child = subprocess.Popen([sys.executable, "-c", SPIN_THEN_SLEEP], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "spun"
        alive = sample()
    finally:
        child.kill()
        child.wait(timeout=30)
    reaped = sample()
    assert before is not None and alive is not None and reaped is not None
    assert alive.own_s - before.own_s >= 0.55  # 0.6 s less the clock ticks it was rounded to
    assert reaped.own_s >= alive.own_s - 0.02, "no CPU time lost when the child is reaped"


# ------------------------------------------------------------------------------------- the run's line


def test_a_run_s_line_says_a_busy_host_and_what_to_do_and_a_quiet_one_nothing() -> None:
    glance = {"at_a_glance/train_s": 1.91, "at_a_glance/train_samples_per_s": 368.0}
    busy = {HOST_OTHERS_SHARE: 0.63, HOST_LOAD_1M: 4.12}
    line = summary_line("cifar", "cpu", glance, "no price", host=busy)
    assert line == (
        "train 1.91 s · 368 img/s · cpu · busy host: other processes took 63% of its CPU (load 4.1): "
        "rerun when the host is idle · no price: no price"
    )
    quiet = summary_line(
        "cifar", "cpu", glance, "no price", host={HOST_OTHERS_SHARE: 0.04, HOST_LOAD_1M: 0.2}
    )
    assert "busy" not in quiet and quiet == summary_line("cifar", "cpu", glance, "no price")
    assert busy_caveat({HOST_OTHERS_SHARE: BUSY_SHARE}) and not busy_caveat({HOST_OTHERS_SHARE: 0.2})


# ------------------------------------------------------------------------------------- the report


def test_a_busy_run_beside_a_quiet_one_is_left_out_of_every_figure_and_listed_with_its_slowdown() -> None:
    """A config's run on a busy host (30 s) beside its quiet run (10.2 s): the median, the speedup and
    the verdicts come from the quiet run alone; the busy one is listed as left out, with its slowdown."""
    busy = {HOST_OTHERS_SHARE: 0.7, HOST_LOAD_1M: 3.9}
    cpus = [
        rec("cpu", metrics=train(30.0, **busy)),
        rec("cpu", metrics=train(10.2, **{HOST_OTHERS_SHARE: 0.01})),
    ]
    gpus = [rec("cuda:0", metrics=train(1.0)), rec("cuda:0", metrics=train(1.02))]
    judged = judge(compare([*cpus, *gpus]))
    (p,) = judged.comp.pairs
    assert p.base.metrics["time/train_s"].median == 10.2 and p.base.metrics["time/train_s"].n == 1
    assert p.base.runs == [cpus[1]] and p.base.left_out == [cpus[0]]
    assert p.headline == 10.2 / 1.01 and busy_host(p) is None
    assert not any("busy" in v for v in judged.of(p)), judged.of(p)
    said = (
        f"left out: {cpus[0].run_id} on cpu measured on a busy host (other processes took 70% of its CPU "
        "(load 3.9)): 30.00 s, 2.94× the 10.20 s of the quiet runs"
    )
    assert left_out_lines(p.base) == [said]
    md = to_markdown(build_doc(judged, {}, {}))
    assert "Left out: measured on a busy host" in md and said in md, md
    assert "| training, all epochs | 10.20 s | 1.01 s" in md, "the base time is the quiet run's"
    assert said in terminal_table(judged).splitlines(), "compare's terminal lists it too"
    assert "⚠ busy host" not in md, md


def test_a_side_measured_only_on_a_busy_host_gives_no_answer_but_rerun() -> None:
    """Only busy runs of a side: the answer says its figure is unusable and to rerun on an idle host,
    with the measured figure below, and no other verdict or price read from it."""
    busy = {HOST_OTHERS_SHARE: 0.7, HOST_LOAD_1M: 3.9}
    cpus = [rec("cpu", key="kb", metrics=train(t, **busy)) for t in (10.0, 10.2)]
    gpus = [rec("cuda:0", key="kb", metrics=train(1.0)), rec("cuda:0", key="kb", metrics=train(1.01))]
    said = (
        "cpu figure unusable: measured only on a busy host (other processes took 70% of its CPU (load 3.9) "
        "in 2/2 runs); rerun when the host is idle"
    )
    assert busy_host(pair(cpus, gpus)) == said
    judged = judge(compare([*cpus, *gpus]))
    (cmp_pair,) = judged.comp.pairs
    assert judged.of(cmp_pair) == [said], "nothing else is read from a spoiled figure"
    md = to_markdown(build_doc(judged, {}, {}))
    assert f"no answer: {said}" in md and "10.10 s (10.00 s–10.20 s, n=2) ⚠ busy host" in md, md
    quiet = [rec("cpu", metrics=train(10.0, **{HOST_OTHERS_SHARE: 0.02})) for _ in range(2)]
    assert busy_host(pair(quiet, gpus)) is None and busy_side(side(quiet)) is None


def test_a_lone_side_whose_repeats_spread_wide_or_ran_on_a_busy_host_says_so() -> None:
    """One config's three runs read 1.44 s, 9.86 s and 1.91 s and the report said `1.91 s (1.44–9.86 s,
    n=3)` with no word: a side without a partner has the pair's reliability verdicts too."""
    runs = [rec("cpu", key="k7", metrics=train(t)) for t in (1.44, 9.86, 1.91)]
    assert noisy_side(side(runs)) == "noisy: cpu repeats spread 441% of their median; add repeats"
    judged = judge(compare(runs))
    (alone,) = judged.comp.unpaired
    assert judged.alone(alone) == ["noisy: cpu repeats spread 441% of their median; add repeats"]
    md = to_markdown(build_doc(judged, {}, {}))
    assert "1.91 s (1.44 s–9.86 s, n=3) ⚠ noisy" in md and "add repeats" in md, md
    busy = [rec("cpu", key="k8", metrics=train(2.0, **{HOST_OTHERS_SHARE: 0.9}))]
    judged = judge(compare(busy))
    (alone,) = judged.comp.unpaired
    assert judged.alone(alone)[0].startswith(
        "cpu figure unusable: measured only on a busy host (other processes"
    )
    assert alone not in judged.break_even, "no price's break-even from a spoiled figure"
    md = to_markdown(build_doc(judged, {}, {}))
    assert "no answer: cpu figure unusable" in md and "as measured: 2.00 s per epoch" in md, md


# ------------------------------------------------------------------------------------- end to end

RUN = ("matmul", "--sizes", "32", "--dtypes", "float32", "--repeats", "1", *QUICK_MATMUL)


def _run(server: MlflowServer, experiment: str, tmp_path: Path) -> tuple[str, dict[str, float]]:
    """A real matmul run into `experiment`: its printed line and its metrics."""
    env = devicebench_env(server.url, DEVICEBENCH_EXPERIMENT=experiment, OMP_NUM_THREADS="1")
    proc = run_cli(list(RUN), env, cwd=tmp_path, timeout_s=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = runs_of(server.url, experiment)
    return proc.stdout.strip().splitlines()[-1], run.data.metrics


def test_a_run_beside_busy_loops_on_every_core_says_so_in_its_line_and_the_report(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    """A busy loop on every core, started by this test (no descendants of the run, a fork of the warm
    zygote) and ending by itself: the run's line and report.md say `busy host` with what to do. Beside
    the run's own thread, the loops take two thirds of the cores on a host that was idle."""
    with hogs(60.0, per_core=1):
        line, metrics = _run(mlflow_server, experiment_name, tmp_path)
    assert metrics[HOST_OTHERS_SHARE] >= 2 * BUSY_SHARE, metrics
    assert "busy host: other processes took" in line and "rerun when the host is idle" in line, line
    # the report as compare reads it back from the server (in this process: compare's own CLI is tested
    # elsewhere, and a second process under load cost as much again)
    selection = read_runs(MlflowClient(mlflow_server.url), Query(experiments=(experiment_name,)))
    md = to_markdown(build_doc(judge(compare(selection.runs)), {}, {}))
    assert "no answer: cpu figure unusable: measured only on a busy host (other processes took" in md, md
    assert "in 1/1 runs); rerun when the host is idle" in md, md


def test_the_same_run_on_an_idle_host_is_not_flagged(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    """The same run with nothing else spinning. The machine the suite runs on may be shared, and a host
    that others keep busy *is* busy (the run says so, rightly): the check needs an idle host, so it is
    made only when a second's look before the run finds one, and its figure is held to the threshold
    that the busy loops above cross by far."""
    before = sample()
    time.sleep(1.0)
    quiet = others_share(before, sample()) if before is not None else None
    if quiet is None or quiet >= BUSY_SHARE / 2:
        pytest.skip(
            f"the host is not idle now (others took {fmt_share(quiet)} of its cores): no idle run to check"
        )
    line, metrics = _run(mlflow_server, experiment_name, tmp_path)
    assert metrics[HOST_OTHERS_SHARE] < BUSY_SHARE and "busy host" not in line, (metrics, line)


def test_a_regression_measured_on_a_busy_host_says_so_beside_the_slowdown() -> None:
    """Did last night's run regress, or did it share its cores? The nightly line says which it measured."""
    from devicebench.report.model.regressions import find_regressions
    from devicebench.report.render.headline import regression_line

    nights = [rec("cpu", metrics=train(t), start=1000 + i) for i, t in enumerate((10.0, 10.2, 9.9, 10.1))]
    slow = rec("cpu", metrics=train(13.0, **{HOST_OTHERS_SHARE: 0.6, HOST_LOAD_1M: 3.0}), start=2000)
    (g,) = find_regressions([*nights, slow], 0.10)[0]
    assert regression_line(g).endswith(
        "; the newest run(s) measured on a busy host: other processes took 60% of its CPU (load 3.0), so the "
        "host or the GPU's limits may explain it rather than the code"
    )
    quiet = rec("cpu", metrics=train(13.0, **{HOST_OTHERS_SHARE: 0.01}), start=2000)
    (g,) = find_regressions([*nights, quiet], 0.10)[0]
    assert not g.explained and "busy" not in regression_line(g)


DEMO_CIFAR = (
    "cifar",
    *("--device", "cpu", "--data", "synthetic", "--epochs", "1", "--batch_size", "32", "--lr", "0.02"),
    *("--train_limit", "640", "--test_limit", "64", "--num_workers", "0", "--log_every", "20"),
    *("--price_shape", "VM.GPU.A10.1", "--illustrative_price", "true"),
)


@pytest.mark.e2e
def test_a_demo_cifar_run_beside_four_busy_loops_is_left_out_for_the_same_run_quiet(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    """The demo's cifar config (fewer samples) beside four busy loops, then the same run quiet, in one
    store: the report's median, cost and break-even are those of the quiet run alone, and the busy run
    is listed as left out with its slowdown."""
    env = devicebench_env(mlflow_server.url, DEVICEBENCH_EXPERIMENT=experiment_name)
    with hogs(180.0, per_core=2):
        busy = run_cli(list(DEMO_CIFAR), env, cwd=tmp_path, timeout_s=180)
    assert busy.returncode == 0, busy.stderr[-2000:]
    quiet = run_cli(list(DEMO_CIFAR), env, cwd=tmp_path, timeout_s=180)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    quiet_run, busy_run = runs_of(mlflow_server.url, experiment_name)  # newest first
    assert is_busy(busy_run.data.metrics), busy_run.data.metrics
    selection = read_runs(MlflowClient(mlflow_server.url), Query(experiments=(experiment_name,)))
    judged = judge(compare(selection.runs))
    (both,) = judged.comp.unpaired
    if is_busy(quiet_run.data.metrics):  # others kept the host busy: both runs are, and no figure answers
        assert both.unusable and both not in judged.break_even and len(both.runs) == 2
        assert judged.alone(both)[0].startswith("cpu figure unusable: measured only on a busy host")
        pytest.skip(f"the host was busy for the quiet run too: {busy_caveat(quiet_run.data.metrics)}")
    alone = judge(compare([r for r in selection.runs if r.run_id == quiet_run.info.run_id]))
    (only,) = alone.comp.unpaired
    assert [r.run_id for r in both.left_out] == [busy_run.info.run_id]
    assert both.metrics[TRAIN_S].median == quiet_run.data.metrics[TRAIN_S] == only.metrics[TRAIN_S].median
    assert side_cost(both) == side_cost(only) and side_cost(both).per_unit
    assert judged.break_even[both] == alone.break_even[only], "the break-even is the quiet run's"
    slower = busy_run.data.metrics[TRAIN_S] / quiet_run.data.metrics[TRAIN_S]
    md = to_markdown(build_doc(judged, {}, {}))
    said = f"left out: {busy_run.info.run_name} on cpu measured on a busy host (other processes took"
    assert (
        said in md and f"{fmt_x(slower)} the {fmt_s(quiet_run.data.metrics[TRAIN_S])} of the quiet" in md
    ), md


def test_a_busy_run_s_mark_says_its_cost_against_the_last_quiet_run_of_its_config(
    mlflow_server: MlflowServer, experiment_name: str
) -> None:
    """`other processes took 56% of its CPU` read as about 2x; the run took 11x. A busy run's line says
    its time against the newest quiet run of its config on the same kind of device, found in any
    experiment; a busy run between them is passed over."""
    from benchmarks.bench_compare import log_runs, specs_for
    from devicebench.run.run_line import quiet_cost
    from devicebench.schema import HOST_SLOWDOWN

    client = MlflowClient(mlflow_server.url)
    exp = client.create_experiment(experiment_name)
    quiet, busy, gpu = specs_for("cifar", ["cpu", "cpu", "cuda:0"], batch=13, width=3)
    quiet.metrics.update(
        {TRAIN_S: 1.09, HOST_OTHERS_SHARE: 0.02},
    )
    busy.metrics.update({TRAIN_S: 30.0, HOST_OTHERS_SHARE: 0.6})
    gpu.metrics.update({TRAIN_S: 0.2})
    now = int(time.time() * 1000)
    quiet.start_time, busy.start_time, gpu.start_time = now - 3000, now - 2000, now - 1000
    key = quiet.config_key()
    assert quiet_cost(mlflow_server.url, "this", key, "cpu", 12.23) == {}, "no run of this config yet"
    log_runs(client, exp, [quiet, busy, gpu])
    cost = quiet_cost(mlflow_server.url, "this", key, "cpu", 12.23)
    assert cost == {HOST_SLOWDOWN: pytest.approx(12.23 / 1.09)}
    line = busy_caveat({HOST_OTHERS_SHARE: 0.56, HOST_LOAD_1M: 7.5, **cost})
    assert line == (
        "busy host: other processes took 56% of its CPU (load 7.5), 11.2× the time of the last quiet run of "
        "its config"
    )
