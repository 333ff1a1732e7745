"""The compare report's logic on plain data: pairing, medians, verdict rules, regressions, parsing, files.

No store here (test_report_store.py has the real server): these pin down what each rule decides.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devicebench.errors import UsageError
from devicebench.report.cli import parse_baseline, parse_threshold, parse_workloads
from devicebench.report.judge import best_rules, cpu_rules, gpu_rules, reliability
from devicebench.report.judge import pair_rules as verdicts
from devicebench.report.judge.judgement import judge
from devicebench.report.judge.pair_rules import explain
from devicebench.report.model.comparison import compare
from devicebench.report.model.pairs import make_pair
from devicebench.report.model.regressions import find_regressions, is_regression
from devicebench.report.model.sides import summarise
from devicebench.report.read.options import Query, parse_since, split_list
from devicebench.report.read.points import flat_points
from devicebench.report.read.query import build_filter, partitions, slice_clauses
from devicebench.report.read.records import RunRecord
from devicebench.report.render.files import write_report
from devicebench.report.render.headline import regression_line
from devicebench.report.render.tables import PRICE_COLUMNS, cells, pair_cells, price_items
from devicebench.report.render.terminal import terminal_table
from devicebench.schema import MAX_TAG_VALUE as MAX_TAG
from devicebench.schema import matmul_point_key
from devicebench.util.fmt import fmt_percent
from devicebench.util.stats import Stat

_ids = itertools.count()
HOST = {
    "devicebench.host.hostname": "box",
    "devicebench.host.cpu_model": "EPYC",
    "devicebench.host.gpu_name": "A10",
}


def rec(
    device: str = "cpu",
    key: str = "k1",
    workload: str = "cifar",
    metrics: dict[str, float] | None = None,
    params: dict[str, str] | None = None,
    start: int = 0,
    status: str = "FINISHED",
    tags: dict[str, str] | None = None,
    history: dict[str, dict[int, float]] | None = None,
) -> RunRecord:
    name = "EPYC" if device == "cpu" else "A10"
    all_tags = {
        "devicebench.workload": workload,
        "devicebench.device": device.split(":")[0],
        "devicebench.device.resolved": device,
        "devicebench.device.name": name,
        "devicebench.config_key": key,
        "devicebench.data": "cifar10",
        **HOST,
        **(tags or {}),
    }
    return RunRecord(
        run_id=f"r{next(_ids)}",
        status=status,
        start_time=start or next(_ids),
        tags=all_tags,
        params={"batch_size": "128", "width": "1", "loader": "dataloader", **(params or {})},
        metrics=metrics or {},
        history=history or {},
    )


def train(t: float, wait: float = 0.0, acc: float | None = None, **more: float) -> dict[str, float]:
    m = {"time/train_s": t, "time/total_s": t + 1, "time/data_wait_s": wait, **more}
    if acc is not None:
        m["eval/accuracy"] = acc
    return m


def side(runs: list[RunRecord]):
    r = runs[0]
    return summarise(r.workload, r.config_key, r.device, r.device_name, runs)


def pair(cpu_runs: list[RunRecord], gpu_runs: list[RunRecord]):
    p = make_pair(side(cpu_runs), side(gpu_runs))
    return p


# --------------------------------------------------------------------------------------------- stats & pairs


def test_stat_uses_min_max_below_five_and_p10_p90_from_five() -> None:
    s = Stat.of([3.0, 1.0, 2.0])
    assert (s.median, s.lo, s.hi, s.n, s.spread_kind) == (2.0, 1.0, 3.0, 3, "min–max")
    s = Stat.of([float(x) for x in range(1, 12)])  # 1..11
    assert s.median == 6.0 and s.lo == pytest.approx(2.0) and s.hi == pytest.approx(10.0)
    assert s.spread_kind == "p10–p90"
    assert Stat.of([]) is None


def test_pairs_by_config_key_with_medians_and_speedup() -> None:
    runs = [rec("cpu", metrics=train(t)) for t in (10.0, 12.0, 11.0)]
    runs += [rec("cuda:0", metrics=train(t)) for t in (1.0, 1.2, 1.1)]
    runs += [rec("cpu", key="other", metrics=train(5.0))]
    comp = compare(runs)
    assert len(comp.pairs) == 1
    p = comp.pairs[0]
    assert p.base.device == "cpu" and p.other.device == "cuda:0"
    assert p.base.metrics["time/train_s"].median == 11.0
    assert p.speedups["train"] == pytest.approx(10.0)
    assert p.speedup_range == pytest.approx((10.0 / 1.2, 12.0 / 1.0))
    assert [s.config_key for s in comp.unpaired] == ["other"]  # listed, not dropped


def test_only_finished_runs_count_and_the_rest_are_listed() -> None:
    ok = [rec("cpu", metrics=train(10.0)), rec("cuda:0", metrics=train(1.0))]
    failed = rec("cuda:0", metrics=train(100.0), status="FAILED", tags={"devicebench.error": "boom"})
    killed = rec("cpu", status="KILLED")
    comp = compare([*ok, failed, killed])
    assert comp.pairs[0].speedups["train"] == pytest.approx(10.0)
    assert {r.run_id for r in comp.unfinished} == {failed.run_id, killed.run_id}
    assert "1 pairs" in terminal_table(judge(comp)) or "1 pair" in terminal_table(judge(comp))


def test_peak_memory_says_which_kind_each_side_measured() -> None:
    """On CUDA `memory/peak_bytes` is the allocator's peak, on the CPU the process RSS: not one measure."""
    gib = 2.0**30
    cpu = rec("cpu", metrics=train(10.0, **{"memory/peak_bytes": 3 * gib, "memory/peak_rss_bytes": 3 * gib}))
    gpu = rec("cuda:0", metrics=train(1.0, **{"memory/peak_bytes": gib, "memory/peak_rss_bytes": 4 * gib}))
    (p,) = compare([cpu, gpu]).pairs
    memory = pair_cells(p)["memory"]
    assert memory == "RSS 3.0 GiB / GPU alloc 1.0 GiB, RSS 4.0 GiB"


def test_every_pair_of_devices_is_compared_and_models_are_sides() -> None:
    runs = [
        rec("cpu", metrics=train(10.0)),
        rec("cuda:0", metrics=train(2.0)),
        rec("cuda:0", metrics=train(1.0), tags={"devicebench.device.name": "H100"}),
    ]
    comp = compare(runs)
    assert len(comp.pairs) == 3
    gpu_gpu = [p for p in comp.pairs if not p.is_cpu_gpu]
    assert len(gpu_gpu) == 1 and gpu_gpu[0].headline == pytest.approx(2.0)


def test_two_gpus_of_one_model_are_one_side_and_a_mig_slice_is_another() -> None:
    runs = [
        rec("cpu", metrics=train(10.0)),
        rec("cuda:0", metrics=train(1.0)),
        rec("cuda:1", metrics=train(1.1)),
        rec("cuda:0", metrics=train(4.0), tags={"devicebench.host.gpu_mig_profile": "1g.5gb"}),
    ]
    comp = compare(runs)
    labels = sorted(s.label for s in comp.sides["k1"])
    assert labels == ["cpu (EPYC)", "cuda:0 (A10 MIG 1g.5gb)", "cuda:0, cuda:1 (A10)"]
    whole = next(s for s in comp.sides["k1"] if s.label == "cuda:0, cuda:1 (A10)")
    assert len(whole.runs) == 2
    assert len(comp.pairs) == 3  # cpu-A10, cpu-MIG, A10-MIG; never cuda:0 against cuda:1


def test_matmul_pairs_use_history_per_size_and_dtype() -> None:
    hist_cpu = {
        "matmul/torch/float32/time_s": {1024: 0.02, 2048: 0.16},
        "matmul/numpy/float32/time_s": {2048: 0.2},
    }
    hist_gpu = {
        "matmul/torch/float32/time_s": {1024: 0.001, 2048: 0.002},
        "matmul/torch/float32/unsynced_time_s": {1024: 1e-5, 2048: 1e-5},
    }
    a = rec("cpu", workload="matmul", history=hist_cpu, params={"sizes": "1024,2048"})
    b = rec("cuda:0", workload="matmul", history=hist_gpu, params={"sizes": "1024,2048"})
    p = compare([a, b]).pairs[0]
    assert p.product_speedups[("torch", "float32", 2048)] == pytest.approx(80.0)
    assert p.product_speedups[("numpy", "float32", 2048)] == pytest.approx(100.0)
    assert p.headline == pytest.approx(80.0)
    assert any("unsynchronised timing under-reports" in v for v in explain(p))


def test_flat_matmul_points_make_a_run_whole() -> None:
    """A matmul run's points come from its flat per-size keys, the times alone (GFLOP/s is derived);
    any other workload's run has none."""
    metrics = {
        "matmul/torch/float32/time_s": 8.0,
        matmul_point_key("torch", "float32", 64, "time_s"): 1.0,
        matmul_point_key("torch", "float32", 128, "time_s"): 8.0,
        matmul_point_key("torch", "float32", 64, "unsynced_time_s"): 0.2,
        matmul_point_key("torch", "float32", 128, "unsynced_time_s"): 0.1,
        matmul_point_key("torch", "float32", 128, "gflops"): 0.0005,  # derived from time: not read
    }
    r = rec("cuda:0", workload="matmul", params={"sizes": "64,128"}, metrics=metrics)
    assert flat_points(r) == {
        "matmul/torch/float32/time_s": {64: 1.0, 128: 8.0},
        "matmul/torch/float32/unsynced_time_s": {64: 0.2, 128: 0.1},
    }
    assert flat_points(rec("cuda:0", workload="cifar", metrics=metrics)) == {}


# --------------------------------------------------------------------------------------------- verdicts


def test_loader_bound_rule() -> None:
    p = pair([rec("cpu", metrics=train(10.0, 0.1))], [rec("cuda:0", metrics=train(2.0, 1.56))])
    assert (
        gpu_rules.loader_bound(p)
        == "cuda:0 run waited for data 78% of the time: loader-bound; try loader=tensor"
    )
    p = pair([rec("cpu", metrics=train(10.0))], [rec("cuda:0", metrics=train(2.0, 0.4))])
    assert gpu_rules.loader_bound(p) is None
    tensor = {"loader": "tensor"}
    p = pair([rec("cpu", metrics=train(10.0))], [rec("cuda:0", metrics=train(2.0, 1.8), params=tensor)])
    assert gpu_rules.loader_bound(p).endswith("loader-bound")


def unet_run(device: str, wait: float, cores: str | None = None, **params: str):
    """A unet run as the workload logs it: `num_workers` and `image_size`, and no `loader` parameter."""
    tags = {"devicebench.cpu.usable_cores": cores} if cores else {}
    r = rec(device, workload="unet", metrics=train(2.0, wait), params=params, tags=tags)
    for name in ("loader", "width"):  # cifar's parameters, which rec plants by default
        del r.params[name]
    return r


def test_loader_bound_advice_names_only_what_unet_takes() -> None:
    """unet has no `loader`: its hint is num_workers where it ran with fewer workers than its cores could
    feed, else a smaller image_size, else the tuning; never loader=tensor."""
    cpu = [unet_run("cpu", 0.1, cores="16", num_workers="2", image_size="256")]
    few = pair(cpu, [unet_run("cuda:0", 1.6, cores="16", num_workers="2", image_size="256")])
    assert gpu_rules.loader_bound(few) == (
        "cuda:0 run waited for data 80% of the time: loader-bound; try num_workers=15 (ran with 2 on 16 cores)"
    )
    busy = pair(cpu, [unet_run("cuda:0", 1.6, cores="2", num_workers="2", image_size="256")])
    assert gpu_rules.loader_bound(busy).endswith(
        "loader-bound; try a smaller image_size (ran at 256: every image is resized on the CPU)"
    )
    unknown = pair(cpu, [unet_run("cuda:0", 1.6, num_workers="2", image_size="512")])  # no core count
    assert "try a smaller image_size (ran at 512" in gpu_rules.loader_bound(unknown)
    small = pair(cpu, [unet_run("cuda:0", 1.6, cores="2", num_workers="4", image_size="64")])
    assert gpu_rules.loader_bound(small).endswith(
        "loader-bound; run devicebench tune unet to measure the num_workers this host runs fastest"
    )
    host = {"devicebench.host.cpu_count": "8"}  # no cpu.* tags: the fingerprint's count
    fingerprint = unet_run("cuda:0", 1.6, num_workers="0", image_size="256")
    fingerprint.tags.update(host)
    assert "try num_workers=7 (ran with 0 on 8 cores)" in gpu_rules.loader_bound(pair(cpu, [fingerprint]))
    for p in (few, busy, unknown, small):
        assert "loader=" not in " ".join(explain(p))
    cifar = pair([rec("cpu", metrics=train(10.0))], [rec("cuda:0", metrics=train(2.0, 1.6))])
    assert gpu_rules.loader_bound(cifar).endswith("try loader=tensor")  # cifar takes it


def test_launch_bound_rule() -> None:
    small = {"batch_size": "4"}
    p = pair(
        [rec("cpu", metrics=train(10.0), params=small)], [rec("cuda:0", metrics=train(8.0), params=small)]
    )
    assert (
        gpu_rules.launch_bound(p)
        == "batch 4: GPU launch-bound; speedup grows with batch size (try a larger batch_size)"
    )
    p = dataclasses.replace(p, in_crossover=True)  # as build_pairs makes a pair that stands in a grid
    assert gpu_rules.launch_bound(p).endswith("(see crossover)")
    big = {"batch_size": "512"}
    p = pair([rec("cpu", metrics=train(10.0), params=big)], [rec("cuda:0", metrics=train(8.0), params=big)])
    assert gpu_rules.launch_bound(p) is None
    p = pair(
        [rec("cpu", metrics=train(10.0), params=small)], [rec("cuda:0", metrics=train(1.0), params=small)]
    )
    assert gpu_rules.launch_bound(p) is None  # 10x at batch 4 is not launch-bound


def test_gpu_slower_rule_defers_to_the_specific_reasons() -> None:
    big = {"batch_size": "512"}
    p = pair([rec("cpu", metrics=train(1.0), params=big)], [rec("cuda:0", metrics=train(2.0), params=big)])
    assert gpu_rules.gpu_slower(p).startswith("cuda:0 slower than CPU (0.50×)")
    small = {"batch_size": "4"}
    p = pair(
        [rec("cpu", metrics=train(1.0), params=small)], [rec("cuda:0", metrics=train(2.0), params=small)]
    )
    assert gpu_rules.gpu_slower(p) is None and gpu_rules.launch_bound(p) is not None


def test_quality_mismatch_rule_needs_a_clear_gap_beyond_spread() -> None:
    p = pair([rec("cpu", metrics=train(10.0, acc=0.55))], [rec("cuda:0", metrics=train(1.0, acc=0.31))])
    assert verdicts.quality_mismatch(p) == (
        "quality differs: eval/accuracy 0.550 on cpu vs 0.310 on cuda:0 for the same config"
    )
    p = pair([rec("cpu", metrics=train(10.0, acc=0.55))], [rec("cuda:0", metrics=train(1.0, acc=0.53))])
    assert verdicts.quality_mismatch(p) is None
    noisy = [rec("cpu", metrics=train(10.0, acc=a)) for a in (0.40, 0.55, 0.62)]
    p = pair(noisy, [rec("cuda:0", metrics=train(1.0, acc=a)) for a in (0.45, 0.48)])
    assert verdicts.quality_mismatch(p) is None  # ranges overlap
    miou = pair([rec("cpu", metrics={"eval/miou": 0.4})], [rec("cuda:0", metrics={"eval/miou": 0.2})])
    assert "eval/miou" in verdicts.quality_mismatch(miou)


def test_oversubscribed_cpu_baseline_is_named_as_the_cause() -> None:
    """2 torch threads + 2 loader workers on 2 cores: the CPU baseline measured contention."""
    over = {
        "devicebench.host.torch_threads": "2",
        "devicebench.cpu.busy_threads": "4",
        "devicebench.cpu.usable_cores": "2",
        "devicebench.cpu.oversubscribed": "true",
    }
    p = pair([rec("cpu", metrics=train(10.0), tags=over)], [rec("cuda:0", metrics=train(1.0))])
    assert cpu_rules.oversubscribed(p) == (
        "cpu baseline oversubscribed: 2 torch threads + 2 loader workers on 2 cores (1/1 runs); it "
        "measures contention, so the speedup is overstated: rerun with num_workers=0 or fewer threads"
    )
    assert verdicts.explain(p)[0] == cpu_rules.oversubscribed(p), "it is the headline verdict"
    fits = {**over, "devicebench.cpu.oversubscribed": "false"}
    p = pair([rec("cpu", metrics=train(10.0), tags=fits)], [rec("cuda:0", metrics=train(1.0), tags=over)])
    assert cpu_rules.oversubscribed(p) is None, "only a CPU side's contention skews the baseline"


def test_thread_count_mismatch_is_said_for_cpu_timings_only() -> None:
    def threads(torch_n: str, blas_n: str) -> dict[str, str]:
        return {"devicebench.host.torch_threads": torch_n, "devicebench.host.blas_threads": blas_n}

    cpu = [
        rec("cpu", metrics=train(10.0), tags=threads("2", "2")),
        rec("cpu", metrics=train(5.0), tags=threads("8", "8")),
    ]
    p = pair(cpu, [rec("cuda:0", metrics=train(1.0), tags=threads("16", "16"))])
    assert cpu_rules.thread_mismatch(p) == (
        "thread counts differ (cpu: 2 torch / 2 BLAS threads, 8 torch / 8 BLAS threads): "
        "the CPU figures are not like for like"
    )
    same = [rec("cpu", metrics=train(10.0), tags=threads("2", "2"))]
    p = pair(same, [rec("cuda:0", metrics=train(1.0), tags=threads("16", "16"))])
    assert cpu_rules.thread_mismatch(p) is None, "a GPU host's threads do not time a training step"
    mm = [rec("cpu", workload="matmul", tags=threads("2", "2"))]
    p = pair(mm, [rec("cuda:0", workload="matmul", tags=threads("16", "16"))])
    assert "cuda:0: 16 torch / 16 BLAS threads" in cpu_rules.thread_mismatch(p), "NumPy ran on its CPU"


def test_strict_fp32_on_a_gpu_with_tf32_says_what_default_would_change() -> None:
    """precision=fp32 on an H100 is IEEE everywhere; PyTorch's default (what users run) is TF32 convs."""
    ieee = {"devicebench.fp32_math": "ieee", "devicebench.host.gpu_capability": "9.0"}
    fp32 = {"precision": "fp32"}
    p = pair(
        [rec("cpu", metrics=train(10.0), params=fp32, tags=ieee)],
        [rec("cuda:0", metrics=train(1.0), params=fp32, tags=ieee)],
    )
    assert gpu_rules.strict_fp32_on_tf32_gpu(p) == (
        "cuda:0 ran strict IEEE fp32 on a GPU with TF32: precision=default (PyTorch's own math, TF32 "
        "convolutions) is what users' code runs and is typically faster, so this understates their speedup"
    )
    assert gpu_rules.strict_fp32_on_tf32_gpu(p) in verdicts.explain(p)
    v100 = {**ieee, "devicebench.host.gpu_capability": "7.0"}
    p = pair([rec("cpu", params=fp32, tags=ieee)], [rec("cuda:0", params=fp32, tags=v100)])
    assert gpu_rules.strict_fp32_on_tf32_gpu(p) is None, "a V100 has no TF32: IEEE is all it runs"
    tf32_conv = {"devicebench.fp32_math": "tf32-conv", "devicebench.host.gpu_capability": "9.0"}
    p = pair([rec("cpu", tags=ieee)], [rec("cuda:0", params={"precision": "default"}, tags=tf32_conv)])
    assert gpu_rules.strict_fp32_on_tf32_gpu(p) is None
    # a GPU name alone is not read for TF32: every run logs its capability (older runs are left out)
    named = {"devicebench.fp32_math": "ieee", "devicebench.host.gpu_name": "NVIDIA H100 80GB HBM3"}
    p = pair([rec("cpu", params=fp32)], [rec("cuda:0", params=fp32, tags=named)])
    assert gpu_rules.strict_fp32_on_tf32_gpu(p) is None


def test_synthetic_data_rule() -> None:
    syn = {"devicebench.data": "synthetic"}
    p = pair([rec("cpu", metrics=train(10.0), tags=syn)], [rec("cuda:0", metrics=train(1.0), tags=syn)])
    assert verdicts.synthetic_data(p).startswith("synthetic data")
    p = pair([rec("cpu", metrics=train(10.0))], [rec("cuda:0", metrics=train(1.0))])
    assert verdicts.synthetic_data(p) is None


def test_unsynced_underreport_rule() -> None:
    gpu_hist = {
        "matmul/torch/float32/time_s": {8000: 0.05},
        "matmul/torch/float32/unsynced_time_s": {8000: 0.0001},
    }
    cpu = [rec("cpu", workload="matmul", history={"matmul/torch/float32/time_s": {8000: 5.0}})]
    p = pair(cpu, [rec("cuda:0", workload="matmul", history=gpu_hist)])
    assert gpu_rules.unsynced_underreport(p) == (
        "unsynchronised timing under-reports cuda:0 matmul 500× at n=8000 (float32): "
        "it measures the kernel launch, not the product"
    )
    honest = {
        "matmul/torch/float32/time_s": {8000: 0.05},
        "matmul/torch/float32/unsynced_time_s": {8000: 0.04},
    }
    p = pair(cpu, [rec("cuda:0", workload="matmul", history=honest)])
    assert gpu_rules.unsynced_underreport(p) is None


def test_compute_bound_noisy_and_single_repeat_rules() -> None:
    p = pair([rec("cpu", metrics=train(100.0))], [rec("cuda:0", metrics=train(5.0))])
    assert gpu_rules.compute_bound(p) == "compute-bound: cuda:0 20.0× faster"
    assert reliability.single_repeat(p) is not None
    cpu = [rec("cpu", metrics=train(t)) for t in (10.0, 20.0, 11.0)]
    gpu = [rec("cuda:0", metrics=train(t)) for t in (1.0, 1.01)]
    p = pair(cpu, gpu)
    assert reliability.noisy(p) == "noisy: cpu repeats spread 91% of their median; add repeats"
    assert reliability.single_repeat(p) is None


def test_explain_lists_rules_in_order() -> None:
    small = {"batch_size": "4"}
    p = pair(
        [rec("cpu", metrics=train(10.0), params=small)],
        [rec("cuda:0", metrics=train(8.0, 7.0), params=small)],
    )
    lines = verdicts.explain(p)
    assert lines[0].startswith("cuda:0 run waited for data 88%")
    assert lines[1].startswith("batch 4: GPU launch-bound")


# --------------------------------------------------------------------------------------------- regressions


def _nightly(device: str, times: list[float], key: str = "k1") -> list[RunRecord]:
    return [rec(device, key=key, metrics=train(t), start=1000 + i) for i, t in enumerate(times)]


def test_planted_30_percent_regression_is_caught() -> None:
    runs = _nightly("cuda:0", [10.0, 10.2, 9.9, 10.1, 13.0])
    found, checked = find_regressions(runs, 0.10)
    assert checked == 1 and len(found) == 1
    g = found[0]
    assert g.measure == "time/train_s" and g.change == pytest.approx(0.3, abs=0.01)
    assert regression_line(g).startswith(
        "regression: cifar k1 on cuda:0 @ A10 / EPYC: time/train_s 13 s vs baseline median 10.05 s"
    )


def test_nights_in_fresh_containers_share_a_baseline_by_hardware_or_devicebench_host() -> None:
    """Under `compose run` or a CronJob every night has a new hostname: grouping by it found no baseline."""
    runs = [
        rec("cuda:0", metrics=train(t), start=1000 + i, tags={"devicebench.host.hostname": f"pod-{i}"})
        for i, t in enumerate([10.0, 10.2, 9.9, 13.0])
    ]
    found, checked = find_regressions(runs, 0.10)
    assert checked == 1 and len(found) == 1 and found[0].host == "A10 / EPYC"
    shaped = {"devicebench.host.oci.shape": "VM.GPU.A10.1", "devicebench.host.gpu_count": "2"}
    assert rec("cuda:0", tags=shaped).host == "VM.GPU.A10.1 / 2× A10 / EPYC"
    # DEVICEBENCH_HOST names the machine: two identical machines stay apart, one machine stays together.
    labelled = [
        rec("cuda:0", metrics=train(t), start=2000 + i, tags={"devicebench.host.label": name})
        for i, (t, name) in enumerate([(10.0, "rack1"), (10.1, "rack2"), (13.0, "rack2"), (13.2, "rack1")])
    ]
    found, checked = find_regressions(labelled, 0.10)
    assert checked == 2 and sorted(g.host for g in found) == ["rack1", "rack2"]


def test_three_percent_change_within_spread_is_not_a_regression() -> None:
    runs = _nightly("cuda:0", [10.0, 10.4, 9.8, 10.3, 10.35])
    assert find_regressions(runs, 0.10)[0] == []
    # ...even with a threshold below the change, because it stays inside the baseline's range
    assert find_regressions(runs, 0.01)[0] == []


def test_regression_must_clear_the_baseline_spread_too() -> None:
    base = Stat.of([8.0, 10.0, 12.5])
    assert not is_regression(11.5, base, 0.10)  # +15 % but inside a noisy baseline
    assert is_regression(13.0, base, 0.10)
    assert not is_regression(10.5, Stat.of([10.0]), 0.10)


def test_regressions_are_per_device_and_use_suite_siblings() -> None:
    suite = {"devicebench.suite": "nightly run-2"}
    runs = _nightly("cpu", [10.0, 10.1, 9.9])
    runs += [
        rec("cpu", metrics=train(t), start=2000 + i, tags=suite) for i, t in enumerate([13.0, 9.0, 13.2])
    ]
    runs += _nightly("cuda:0", [1.0, 1.0, 1.0])
    found, checked = find_regressions(runs, 0.10)
    assert checked == 2
    assert (
        len(found) == 1
        and found[0].device == "cpu"
        and found[0].newest == 13.0
        and len(found[0].run_ids) == 3
    )


def test_a_narrowed_selection_is_judged_against_earlier_runs_outside_it() -> None:
    earlier = _nightly("cuda:0", [10.0, 10.1, 9.9])
    suite = {"devicebench.suite": "nightly run-9"}
    launch = [
        rec("cuda:0", metrics=train(t), start=5000 + i, tags=suite) for i, t in enumerate([13.0, 13.1, 12.9])
    ]
    assert find_regressions(launch, 0.10) == ([], 0)  # alone, the launch has no baseline
    found, checked = find_regressions(launch, 0.10, earlier + launch)
    assert checked == 1 and len(found) == 1 and found[0].baseline.n == 3 and len(found[0].run_ids) == 3
    later = [rec("cuda:0", metrics=train(20.0), start=9000)]  # runs after the launch are not its baseline
    assert find_regressions(launch, 0.10, later) == ([], 0)


def test_matmul_regressions_are_per_point() -> None:
    def mm(t: float, start: int) -> RunRecord:
        hist = {"matmul/torch/float32/time_s": {1024: 0.01, 2048: t}}
        return rec("cpu", workload="matmul", history=hist, start=start)

    found, _ = find_regressions([mm(0.1, 1), mm(0.1, 2), mm(0.15, 3)], 0.1)
    assert [g.measure for g in found] == ["matmul/torch/float32/time_s@2048"]


# --------------------------------------------------------------------------------------------- parsing


def test_since_parsing() -> None:
    now = 1_700_000_000.0
    assert parse_since("7d", now) == int((now - 7 * 86400) * 1000)
    assert parse_since("12h", now) == int((now - 12 * 3600) * 1000)
    assert parse_since("30m", now) == int((now - 1800) * 1000)
    assert parse_since("2024-05-01", now) == 1714521600000
    assert parse_since("2024-05-01T12:00:00+02:00", now) == 1714557600000
    for bad in ("yesterday", "7x", "", "-3d"):
        with pytest.raises(UsageError, match=r"--since: .*7d, 12h, 30m"):
            parse_since(bad, now)


def test_option_parsing_errors_name_the_option() -> None:
    assert parse_threshold("0.1") == 0.1 and parse_threshold("10%") == pytest.approx(0.1)
    assert parse_threshold("") == 0.1
    for bad in ("0", "-0.1", "abc", "150%", "nan"):
        with pytest.raises(UsageError, match=r"--threshold: .*fraction"):
            parse_threshold(bad)
    assert parse_baseline("") == "none" and parse_baseline("Previous") == "previous"
    with pytest.raises(UsageError, match="--baseline: unknown value 'last'; allowed: none, previous"):
        parse_baseline("last")
    assert parse_workloads("cifar,matmul") == ("cifar", "matmul")
    with pytest.raises(UsageError, match="--workload: unknown workload 'resnet'"):
        parse_workloads("resnet")
    assert split_list(["a,b", "c", "a"]) == ("a", "b", "c")


def test_filter_is_built_from_the_options() -> None:
    q = Query(experiments=("e",), workloads=("cifar",), filter="params.batch_size = '4'")
    assert build_filter(q) == "tags.`devicebench.workload` = 'cifar' and params.batch_size = '4'"
    assert build_filter(Query(experiments=("e",), workloads=("cifar", "unet"))) == ""  # several: client side


def test_search_is_partitioned_by_workload_without_losing_any() -> None:
    assert partitions(Query(experiments=("e",), workloads=("cifar",))) == [None]
    assert partitions(Query(experiments=("e",), workloads=("cifar", "unet"))) == [
        "tags.`devicebench.workload` = 'cifar'",
        "tags.`devicebench.workload` = 'unet'",
    ]
    clauses = partitions(Query(experiments=("e",)))
    assert len(clauses) == 6  # matmul, cifar, unet, model, infer, then everything else
    assert clauses[-1] == (
        "tags.`devicebench.workload` != 'matmul' and tags.`devicebench.workload` != 'cifar' and "
        "tags.`devicebench.workload` != 'unet' and tags.`devicebench.workload` != 'model' and "
        "tags.`devicebench.workload` != 'infer' and tags.`devicebench.workload` != 'report' and "
        "tags.`devicebench.workload` != 'suite'"
    )


def _holds(clause: str | None, t: int) -> bool:
    """What MLflow does with a slice clause: `attributes.start_time >= a and attributes.start_time < b`."""
    for part in clause.split(" and ") if clause else []:
        name, op, value = part.split()
        assert name == "attributes.start_time" and op in (">=", "<"), part
        if not (t >= int(value) if op == ">=" else t < int(value)):
            return False
    return True


@pytest.mark.parametrize(
    ("oldest", "newest", "k", "n"), [(1000, 9000, 8, 8), (5, 8, 8, 3), (7, 7, 8, 1), (0, 10**12, 3, 3)]
)
def test_time_slices_hold_every_start_time_exactly_once(oldest: int, newest: int, k: int, n: int) -> None:
    """Each run, inside the span, on a cut, or outside it (logged while the report reads, or by a
    clock ahead or behind), is in exactly one slice; a span shorter than `k` ms gives fewer slices."""
    clauses = slice_clauses(oldest, newest, k)
    assert len(clauses) == n
    cuts = [int(c.split()[-1]) for c in clauses[:-1] if c]
    probes = {oldest - 1, oldest, newest, newest + 1, *cuts, *(c - 1 for c in cuts), (oldest + newest) // 2}
    for t in probes:
        assert sum(_holds(c, t) for c in clauses) == 1, t
    if newest - oldest >= k:  # equal parts: no slice is more than one ms off a k-th of the span
        widths = [b - a for a, b in zip([oldest, *cuts], [*cuts, newest], strict=True)]
        assert len(widths) == k and max(widths) - min(widths) <= 1


# --------------------------------------------------------------------------------------------- the UI


def test_pair_metric_names_are_legal_unique_and_capped() -> None:
    from mlflow.utils.validation import _validate_metric_name

    from devicebench.report.render.headline import metric_part, unique_names

    assert metric_part("cifar batch_size=4  cpu vs cuda:0/x") == "cifar batch_size_4 cpu vs cuda_0_x"
    names = unique_names(["a b", "a b", "a b", "x" * 150, "x" * 120], cap=100)
    assert names[:3] == ["a b", "a b 2", "a b 3"]
    assert names[3] == "x" * 100 and names[4] == "x" * 98 + " 2"
    for name in names:
        _validate_metric_name(f"speedup/{name}")  # raises on a name MLflow refuses


def test_headline_metrics_count_cpu_gpu_pairs_only() -> None:
    from devicebench.report.render.headline import headline_metrics

    cpu, a10 = rec("cpu", metrics=train(10.0)), rec("cuda:0", metrics=train(2.0))
    h100 = rec("cuda:0", metrics=train(1.0), tags={"devicebench.device.name": "H100"})
    m = headline_metrics(compare([cpu, a10, h100]))
    speedups = {k: v for k, v in m.items() if k.startswith("speedup/")}
    # A10 vs H100 is a pair, not a GPU-over-CPU answer; how many pairs is the description's to say
    assert "pairs" not in m and "regressions" not in m
    assert sorted(speedups.values()) == pytest.approx([5.0, 5.0, 10.0, 10.0])  # two pairs, best, worst
    assert (m["speedup/best"], m["speedup/worst"]) == pytest.approx((10.0, 5.0))
    assert m["speedup/cifar cpu vs cuda_0 2"] == pytest.approx(10.0)  # same devices: a second name
    only_cpu = headline_metrics(compare([cpu], baseline="previous"))
    assert only_cpu == {"regressions": 0.0}


def test_summary_note_fits_the_tag_limit_at_whole_rows() -> None:
    from devicebench.report.render.headline import summary_note

    runs = []
    for batch in range(1, 301):
        p = {"batch_size": str(batch)}
        runs += [rec("cpu", key=f"k{batch}", metrics=train(10.0), params=p)]
        runs += [rec("cuda:0", key=f"k{batch}", metrics=train(10.0 / batch), params=p)]
    note = summary_note(judge(compare(runs)), "read 600 runs from 1 experiment: devicebench (600)")
    assert len(note) <= MAX_TAG and note.startswith("**GPU over CPU: best 300×**")
    rows = [ln for ln in note.splitlines() if ln.startswith("| cifar · ")]
    assert 10 < len(rows) < 300 and all(ln.endswith("|") for ln in rows)
    assert f"_{300 - len(rows)} more pairs in report.html_" in note
    assert note.endswith("Full report: report.html in this run's artifacts.")
    small = summary_note(judge(compare(runs[:4])), "read 4 runs")
    assert "more pairs" not in small and small.count("| cifar · ") == 2


# --------------------------------------------------------------------------------------------- files


def test_report_files_from_plain_data(tmp_path: Path) -> None:
    runs = []
    for width, batch in itertools.product((1, 2), (4, 128)):
        p = {"width": str(width), "batch_size": str(batch)}
        key = f"w{width}b{batch}"
        runs += [rec("cpu", key=key, params=p, metrics=train(10.0 * width, acc=0.5)) for _ in range(2)]
        runs += [rec("cuda:0", key=key, params=p, metrics=train(8.0 / batch, acc=0.5)) for _ in range(2)]
    runs.append(rec("cpu", key="lonely", metrics=train(3.0)))
    runs.append(rec("cuda:0", status="FAILED", tags={"devicebench.error": "CUDA out of memory"}))
    comp = compare(runs, baseline="previous")
    assert (
        len(comp.grids) == 1
        and comp.grids[0].widths == [1.0, 2.0]
        and comp.grids[0].batch_sizes == [4.0, 128.0]
    )
    files = write_report(judge(comp), tmp_path, {"experiments": "e"})
    names = {f.name for f in files}
    assert {
        "report.md",
        "report.html",
        "runs.csv",
        "speedup_by_workload.png",
        "crossover_1_cifar.png",
    } <= names
    md = (tmp_path / "report.md").read_text()
    assert "Runs without a partner device" in md and "lonely" in md
    assert "CUDA out of memory" in md
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "<img" in html and "src='crossover" not in html
    assert (tmp_path / "runs.csv").read_text().count("\n") == len(runs) + 1


def _tp(t: float, samples: float = 10_000.0, **more: float) -> dict[str, float]:
    return {**train(t), "throughput/train_samples_per_s": samples / t, **more}


def test_two_speedups_per_pair_against_the_cpu_as_configured_and_at_its_best(tmp_path: Path) -> None:
    """H100 host, 2026-11-24: the tutorial's CPU side trained at ~250 img/s, a tuned CPU side of the same
    work at ~2,000, the GPU at ~2,300. The pair keeps its speedup over the configured CPU and gains one
    over the best CPU, with a verdict naming what the CPU needed; the cost is taken against the best CPU."""
    work = {"devicebench.work_key": "w1"}
    cpu = rec(
        "cpu", key="k1", params={"loader": "dataloader", "num_workers": "2"}, metrics=_tp(40.0), tags=work
    )
    tuned_tags = {
        **work,
        "devicebench.tuned": "true",
        "devicebench.tuned.setting": "4 threads, data in memory",
    }
    tuned = rec(
        "cpu", key="k2", params={"loader": "tensor", "num_workers": "0"}, metrics=_tp(5.0), tags=tuned_tags
    )
    gpu = rec(
        "cuda:0", key="k1", params={"loader": "dataloader", "num_workers": "2"}, metrics=_tp(4.35), tags=work
    )
    other = rec(
        "cpu", key="k3", params={"batch_size": "8"}, metrics=_tp(1.0), tags={"devicebench.work_key": "w2"}
    )
    comp = compare([cpu, tuned, gpu, other])
    (p,) = [p for p in comp.pairs if p.is_cpu_gpu]
    assert p.headline == pytest.approx(40.0 / 4.35)  # as configured
    assert p.best_cpu is not None and p.best_cpu.runs == [tuned], "other work (w2) is never the best CPU"
    assert p.best_cpu_speedup == pytest.approx(5.0 / 4.35)
    line = "against this CPU at its best (4 threads, data in memory) cuda:0 (A10) is 1.15× faster: barely a gain for this model"
    assert explain(p)[0] == line
    from devicebench.report.render.headline import headline_metrics

    metrics = headline_metrics(comp)
    (name,) = [k.split("/", 1)[1] for k in metrics if k.startswith("speedup_best_cpu/") and k[-5:] != "/best"]
    assert metrics[f"speedup_best_cpu/{name}"] == pytest.approx(5.0 / 4.35)
    assert metrics["speedup_best_cpu/best"] == pytest.approx(5.0 / 4.35)
    from devicebench.report.render.headline import report_name

    assert (
        report_name(comp, "t") == "report · t · 1 CPU/GPU pair · best 9.20× · best over the fastest CPU 1.15×"
    )
    from devicebench.report.render.headline import verdict_lines

    assert any(
        line.startswith("**GPU over this CPU at its best: best 1.15×** (cifar")
        for line in verdict_lines(judge(comp))
    )
    header, _, row = terminal_table(judge(comp)).splitlines()[1:4]
    assert row[header.index("best CPU") :].startswith("1.15×"), "the terminal shows the second speedup too"
    assert metrics[f"speedup/{name}"] == pytest.approx(40.0 / 4.35)
    write_report(judge(comp), tmp_path, {"experiments": "e"})
    for page in ("report.md", "report.html"):
        text = (tmp_path / page).read_text()
        assert "speedup over the best CPU" in text and "1.15× (4 threads, data in memory)" in text, page
        assert "against this CPU at its best (4 threads, data in memory)" in text, page
    # Priced: the verdict is the price's, taken against the best CPU (equal prices, GPU 1.15x faster).
    for r in (cpu, tuned, gpu):
        r.tags["devicebench.price.usd_per_hour"] = "1.0"
        r.metrics["cost/usd_per_epoch"] = r.metrics["time/train_s"] / 3600
    priced = compare([cpu, tuned, gpu])
    (p,) = [p for p in priced.pairs if p.is_cpu_gpu]
    assert explain(p)[0].endswith("is 1.15× faster: worth its price for this model")
    # The work-per-money table ranks the tuned CPU beside the GPU: one group for the work, not per config.
    rows = cells(PRICE_COLUMNS, price_items(priced.all_sides, lambda s: s.config_key))
    assert [(r[0], r[1].split()[0]) for r in rows] == [("k1", "cuda:0"), ("k2", "cpu"), ("k1", "cpu")]
    assert [r[-1] for r in rows] == ["1.00×", "0.87×", "0.11×"]
    # The tuned side is the pair's own CPU side: one speedup, no second verdict.
    alone = rec(
        "cuda:0", key="k2", params={"loader": "tensor", "num_workers": "0"}, metrics=_tp(4.35), tags=work
    )
    own = compare([tuned, alone])
    (p,) = [p for p in own.pairs if p.is_cpu_gpu]
    assert p.best_cpu is p.base and best_rules.against_best_cpu(p) is None
    assert report_name(own, "t") == "report · t · 1 CPU/GPU pair · best 1.15×", "one answer, said once"
    # Runs logged before work keys: only their own config's CPU is a candidate.
    old = [rec("cpu", key="k9", metrics=_tp(40.0)), rec("cuda:0", key="k9", metrics=_tp(4.0))]
    (p,) = [p for p in compare([*old, tuned]).pairs if p.is_cpu_gpu]
    assert p.best_cpu is p.base


def test_a_tuned_cpu_run_that_shares_the_configured_key_is_its_own_side(tmp_path: Path) -> None:
    """A tuning that chose the DataLoader's own 2 workers (4 threads) logs the configured CPU's config
    key: it was averaged into that side (4 runs, "noisy", no second speedup). It is its own side now:
    not paired itself, the pair's best CPU, and judged against tuned nights only."""
    work, feed = {"devicebench.work_key": "w1"}, {"loader": "dataloader", "num_workers": "2"}
    cpus = [rec("cpu", params=feed, metrics=_tp(40.0), tags=work, start=i) for i in (1, 2, 3)]
    tuned_tags = {
        **work,
        "devicebench.tuned": "true",
        "devicebench.tuned.setting": "4 threads, DataLoader, 2 workers",
    }
    tuned = rec("cpu", params={**feed, "cpu_threads": "4"}, metrics=_tp(8.0), tags=tuned_tags, start=4)
    gpus = [rec("cuda:0", params=feed, metrics=_tp(4.0), tags=work, start=i) for i in (1, 2, 3)]
    comp = compare([*cpus, tuned, *gpus])
    assert [(s.device, len(s.runs), s.tuned) for s in comp.all_sides] == [
        ("cpu", 3, False),
        ("cpu", 1, True),
        ("cuda:0", 3, False),
    ]
    (p,) = comp.pairs
    assert p.base.runs == cpus and p.headline == pytest.approx(10.0)
    assert p.best_cpu is not None and p.best_cpu.runs == [tuned] and p.best_cpu_speedup == 2.0
    assert explain(p)[0].startswith("against this CPU at its best (4 threads, DataLoader, 2 workers)")
    assert not [v for v in explain(p) if v.startswith("noisy")], explain(p)
    assert comp.unpaired == [] and comp.all_sides[1].label == "cpu (EPYC, tuned)"
    # a tuning slower than the CPU as configured is no pair's best CPU: it is listed, not dropped
    slower = rec("cpu", params={**feed, "cpu_threads": "4"}, metrics=_tp(50.0), tags=tuned_tags, start=4)
    comp = compare([*cpus, slower, *gpus])
    assert comp.pairs[0].best_cpu is comp.pairs[0].base and [s.runs for s in comp.unpaired] == [[slower]]
    # so is one beside a CPU/CPU pair of two CPU models, where no best CPU is sought
    xeon = rec("cpu", params=feed, metrics=_tp(30.0), tags={**work, "devicebench.device.name": "Xeon"})
    comp = compare([*cpus, tuned, xeon])
    assert len(comp.pairs) == 1 and [s.runs for s in comp.unpaired] == [[tuned]]
    # alone in its key (no CPU as configured beside it) a tuned side pairs as the CPU side
    (own,) = compare([tuned, *gpus]).pairs
    assert own.base.runs == [tuned] and own.best_cpu is own.base
    # a tuned night is judged against tuned nights, not against the CPU as configured
    slow = rec("cpu", params={**feed, "cpu_threads": "4"}, metrics=_tp(12.0), tags=tuned_tags, start=9)
    found, groups = find_regressions([*cpus, tuned, slow], 0.1)
    assert groups == 2 and [(r.device, round(r.change, 2)) for r in found] == [("cpu tuned", 0.5)]


def test_the_cost_against_the_best_cpu_goes_with_the_speedup_over_it(tmp_path: Path) -> None:
    """The cost is taken against this CPU at its best; the price line used the speedup over the CPU as
    configured beside it: "10.0× faster at 3.00× the price costs 2.40× more", which cannot be. The line,
    the pairs table's cost cells and the heatmap's money panel now all name the best CPU."""
    from devicebench.report.render.charts import crossover_caption

    runs = []
    for batch in (4, 64):
        p, work = {"batch_size": str(batch)}, {"devicebench.work_key": f"w{batch}"}
        tuned_tags = {
            **work,
            "devicebench.tuned": "true",
            "devicebench.tuned.setting": "4 threads, data in memory",
        }
        runs += [
            rec("cpu", key=f"k{batch}", params={**p, "loader": "dataloader"}, metrics=_tp(40.0), tags=work),
            rec("cpu", key=f"t{batch}", params={**p, "loader": "tensor"}, metrics=_tp(5.0), tags=tuned_tags),
            rec("cuda:0", key=f"k{batch}", params={**p, "loader": "dataloader"}, metrics=_tp(4.0), tags=work),
        ]
    for r in runs:
        price = 3.0 if r.device.startswith("cuda") else 1.0
        r.tags["devicebench.price.usd_per_hour"] = str(price)
        r.metrics["cost/usd_per_epoch"] = r.metrics["time/train_s"] / 3600 * price
    comp = compare(runs)
    p = next(p for p in comp.pairs if p.is_cpu_gpu)
    assert p.headline == 10.0 and p.cost_speedup == pytest.approx(1.25) and p.cost_ratio == pytest.approx(2.4)
    assert (
        "A10 ($3.00/h set by hand) trains this 1.25× faster than this CPU at its best ($1.00/h set by hand) "
        "and costs 2.40× more per epoch: worth it only when time matters more than money (break-even "
        "at 3.00× faster)"
    ) in explain(p)
    row = pair_cells(p)
    assert row["cost_ratio"] == "2.40× per epoch (against the best CPU)"
    assert row["cost"] == "best CPU $0.00139 / $0.00333 per epoch", (
        "the tuned CPU's 5 s at $1/h, not the 40 s side's"
    )
    (grid,) = comp.grids
    assert grid.cost_base == "the fastest CPU measured"
    assert crossover_caption(grid) == "; against this CPU at its best, where it pays in money"
    # with no tuned side the cost is the pair's own, and so is the speedup beside it
    (own,) = compare([r for r in runs if r.tag("tuned") != "true" and r.params["batch_size"] == "4"]).pairs
    assert own.cost_base is own.base and own.cost_speedup == 10.0
    assert (
        "A10 ($3.00/h set by hand) trains this 10.0× faster than this CPU ($1.00/h set by hand) and "
        "costs 3.33× less per epoch: worth its price (break-even at 3.00× faster)"
    ) in explain(own)


def test_a_gpu_side_that_waited_on_its_host_or_its_own_limits_is_said_so() -> None:
    """What NVML saw over the epochs (`gpu/*`, issue 39): a GPU busy 41 % of the time is host-bound, and
    clocks held down by power or heat are the GPU's limits; neither is said where the figures are fine or
    absent, nor host-bound where the loader already explains the wait."""
    cpu = [rec("cpu", metrics=train(20.0))]
    bound = rec("cuda:0", metrics={**train(4.0), "gpu/busy_share": 0.41, "gpu/sm_clock_share": 0.98})
    assert gpu_rules.host_bound_gpu(pair(cpu, [bound])) == (
        "cuda:0 host-bound: GPU busy 41% of its epochs: the step waits on this host's CPU (Python, kernel "
        "launches, copies), so the figure moves with that CPU; a larger batch, CUDA graphs or compile gains"
    )
    assert gpu_rules.gpu_held_down(pair(cpu, [bound])) is None
    hot = {**train(4.0), "gpu/busy_share": 0.97, "gpu/power_capped_s": 1.2, "gpu/sm_clock_share": 0.72}
    held = pair(cpu, [rec("cuda:0", metrics=hot), rec("cuda:0", metrics=hot)])
    assert gpu_rules.host_bound_gpu(held) is None
    assert gpu_rules.gpu_held_down(held) == (
        "cuda:0 slowed by its own limits (power-capped 30% of training, SM clock at 72% of max): below what "
        "this GPU does; check its power limit and cooling before comparing"
    )
    fine = rec("cuda:0", metrics={**train(4.0), "gpu/busy_share": 0.97, "gpu/sm_clock_share": 0.99})
    for quiet in (fine, rec("cuda:0", metrics=train(4.0))):
        assert (
            gpu_rules.host_bound_gpu(pair(cpu, [quiet]))
            is gpu_rules.gpu_held_down(pair(cpu, [quiet]))
            is None
        )
    starved = rec("cuda:0", metrics={**train(4.0, wait=3.0), "gpu/busy_share": 0.2})
    assert (
        gpu_rules.loader_bound(pair(cpu, [starved]))
        and gpu_rules.host_bound_gpu(pair(cpu, [starved])) is None
    )
    assert any("host-bound" in line for line in explain(pair(cpu, [bound])))


def test_a_regression_on_a_host_bound_or_capped_gpu_says_what_else_may_explain_it() -> None:
    """The nightly check's line and the report's list name NVML's reason beside the slowdown."""
    runs = _nightly("cuda:0", [10.0, 10.2, 9.9, 10.1])
    runs.append(rec("cuda:0", metrics={**train(13.0), "gpu/thermal_capped_s": 6.5}, start=2000))
    (g,) = find_regressions(runs, 0.10)[0]
    assert g.why == "thermal-capped 50% of training"
    assert regression_line(g).endswith(
        "; NVML on the newest run(s): thermal-capped 50% of training, so the host or the GPU's limits may "
        "explain it rather than the code"
    )
    (plain,) = find_regressions(_nightly("cuda:0", [10.0, 10.2, 9.9, 10.1, 13.0]), 0.10)[0]
    assert plain.why == "" and "NVML" not in regression_line(plain)
    from devicebench.report.render.content import build_doc
    from devicebench.report.render.document import to_markdown

    report = to_markdown(build_doc(judge(compare(runs, baseline="previous")), {}, {}))
    regressions = report[report.index("## Regressions") :]
    assert "- cifar · bs 128 on cuda:0\n  - NVML on the newest run(s): thermal-capped 50%" in regressions


def test_a_gpu_side_far_below_its_peak_is_called_launch_bound_by_its_share() -> None:
    """The tutorial Net on an H100: ~7 GFLOP/s of 494 TFLOP/s TF32, far under 5 % of the peak."""
    gpu_tags = {"devicebench.util.dtype": "tf32"}
    low = rec("cuda:0", metrics={**train(1.0), "util/peak_fraction": 0.003}, tags=gpu_tags)
    p = pair([rec("cpu", metrics=train(1.2))], [low])
    assert gpu_rules.peak_share(p) == (
        "0.30% of A10's tf32 peak: launch-bound; a larger batch or model will gain, a larger GPU will not"
    )
    busy = rec("cuda:0", metrics={**train(1.0), "util/peak_fraction": 0.4}, tags=gpu_tags)
    assert gpu_rules.peak_share(pair([rec("cpu", metrics=train(9.0))], [busy])) is None
    assert (
        gpu_rules.peak_share(pair([rec("cpu", metrics=train(9.0))], [rec("cuda:0", metrics=train(1.0))]))
        is None
    )


def test_report_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "import devicebench.report.cli, devicebench.report.command, devicebench.report.render.files\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_no_module_of_the_report_package_imports_torch() -> None:
    """Every module under devicebench.report, found by walking the package (a new writer or table module
    is covered without being named here): the report must build on a host without a torch install."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import devicebench.report as pkg\n"
        "names = [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "assert len(names) >= 30, names\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _h100_pair(gpu_metrics: dict[str, float], tuned_s: float = 5.0, cpu_s: float = 45.3) -> Any:
    """A pair as on the H100 of 2026-11-24 (tutorial Net, 10,000 CIFAR-format images): the CPU as
    configured (16 threads + 2 workers), a tuned CPU side of the same work, the GPU through the DataLoader."""
    work = {"devicebench.work_key": "w1"}
    tuned_tags = {**work, "devicebench.tuned.setting": "2 threads, data in memory"}
    feed = {"loader": "dataloader", "num_workers": "2"}
    cpu = rec("cpu", key="k1", params=feed, metrics=_tp(cpu_s), tags=work)
    tuned = rec("cpu", key="k2", params={"loader": "tensor"}, metrics=_tp(tuned_s), tags=tuned_tags)
    gpu = rec("cuda:0", key="k1", params=feed, metrics=gpu_metrics, tags=work)
    (p,) = [p for p in compare([cpu, tuned, gpu]).pairs if p.is_cpu_gpu]
    return p


def test_a_gpu_slower_than_the_tuned_cpu_is_said_so() -> None:
    """Batch 4: the tuned CPU trained in 5.0 s, the GPU in 8.5 s. Not "barely a gain"; near 1x, no gain."""
    p = _h100_pair(_tp(8.5))
    assert explain(p)[0] == (
        "against this CPU at its best (2 threads, data in memory) cuda:0 (A10) is 0.59× as fast: "
        "the CPU wins for this model"
    )
    assert explain(_h100_pair(_tp(5.15)))[0].endswith("is 0.97× as fast: no gain for this model")
    assert explain(_h100_pair(_tp(2.0)))[0].endswith("is 2.50× faster: a clear gain for this model")


def test_a_gpu_side_that_waited_for_data_is_not_at_its_best_in_the_pair() -> None:
    """Batch 64 waited 48 % (said in the headline line); batch 256 waited 83 % (loader_bound says it,
    once: the headline line does not repeat it)."""
    p = _h100_pair({**_tp(1.06), "time/data_wait_s": 0.51}, tuned_s=0.69, cpu_s=3.13)
    assert explain(p)[0].endswith(
        "is 0.65× as fast: the CPU wins for this model, but the GPU side waited for data 48% of its "
        "training time: it is not at its best in this pair; try loader=tensor"
    )
    p = _h100_pair({**_tp(1.31), "time/data_wait_s": 1.09}, tuned_s=0.30, cpu_s=2.53)
    assert explain(p)[0].endswith("is 0.23× as fast: the CPU wins for this model")
    assert sum("try loader=tensor" in v for v in explain(p)) == 1


def test_compute_bound_is_not_said_beside_a_sliver_of_peak_or_a_tuned_cpu_that_closes_the_gap() -> None:
    """5.3x over a contended CPU is not "compute-bound" when the GPU used 0.00076 % of its peak, nor when
    the CPU at its best is within 5x; each guard on its own."""
    sliver = _h100_pair({**_tp(8.5), "util/peak_fraction": 7.6e-6}, tuned_s=46.0)  # no faster CPU
    assert sliver.best_cpu is sliver.base and gpu_rules.compute_bound(sliver) is None
    assert "0.00076% of A10's" in (gpu_rules.peak_share(sliver) or "")
    closed = _h100_pair(_tp(8.5))  # no peak figure; the tuned CPU at 0.59x
    assert gpu_rules.peak_share(closed) is None and gpu_rules.compute_bound(closed) is None
    busy = _h100_pair({**_tp(8.5), "util/peak_fraction": 0.4}, tuned_s=46.0)
    assert gpu_rules.compute_bound(busy) == "compute-bound: cuda:0 5.33× faster"


def test_a_share_of_peak_never_prints_as_zero() -> None:
    shares = (0.4, 0.003, 0.001, 4.3e-5, 9e-6, 7.6e-6, 1e-7, 0.0, math.nan)
    assert [fmt_percent(x) for x in shares] == [
        "40.00%",
        "0.30%",
        "0.10%",
        "0.0043%",
        "0.00090%",
        "0.00076%",
        "0.000010%",
        "0.00%",
        "–",
    ]


def test_the_crossover_gets_a_panel_against_the_cpu_at_its_best(tmp_path: Path) -> None:
    """The H100's tutorial grid read 5.31×/2.96×/1.93× as configured and 0.59×/0.65×/0.23× against the
    tuned CPU: the heatmap shows the second answer beside the first where tuned sides were measured."""
    from devicebench.report.render.charts import crossover_chart

    runs = []
    for batch, (cpu_t, tuned_t, gpu_t) in {4: (45.3, 5.0, 8.5), 64: (3.1, 0.69, 1.06)}.items():
        p, work = {"batch_size": str(batch)}, {"devicebench.work_key": f"w{batch}"}
        tuned_tags = {**work, "devicebench.tuned.setting": "2 threads, data in memory"}
        runs += [
            rec("cpu", key=f"k{batch}", params={**p, "loader": "dataloader"}, metrics=_tp(cpu_t), tags=work),
            rec(
                "cpu",
                key=f"t{batch}",
                params={**p, "loader": "tensor"},
                metrics=_tp(tuned_t),
                tags=tuned_tags,
            ),
            rec(
                "cuda:0", key=f"k{batch}", params={**p, "loader": "dataloader"}, metrics=_tp(gpu_t), tags=work
            ),
        ]
    (grid,) = compare(runs).grids
    assert grid.best_cpu_cells == pytest.approx({(1.0, 4.0): 5.0 / 8.5, (1.0, 64.0): 0.69 / 1.06})
    assert crossover_chart(grid, tmp_path / "x.png") == 2


def test_the_gpu_at_its_best_against_the_cpu_at_its_best_reaches_the_headline() -> None:
    """cpu_vs_gpu.yaml runs the GPU with its data in memory too: that pair's own CPU side is the tuned
    one, and its speedup (1.67x on the H100 at batch 64 would read so) is the best-against-best answer,
    so the report's name and `speedup_best_cpu/best` carry it, not only the DataLoader pair's 0.59x."""
    from devicebench.report.render.headline import headline_metrics, report_name

    work = {"devicebench.work_key": "w1"}
    tuned_tags = {**work, "devicebench.tuned.setting": "2 threads, data in memory"}
    feed, memory = {"loader": "dataloader", "num_workers": "2"}, {"loader": "tensor", "num_workers": "0"}
    comp = compare(
        [
            rec("cpu", key="k1", params=feed, metrics=_tp(45.3), tags=work),
            rec("cuda:0", key="k1", params=feed, metrics=_tp(8.5), tags=work),
            rec("cpu", key="k2", params=memory, metrics=_tp(5.0), tags=tuned_tags),
            rec("cuda:0", key="k2", params=memory, metrics=_tp(3.0), tags=work),
        ]
    )
    assert headline_metrics(comp)["speedup_best_cpu/best"] == pytest.approx(5.0 / 3.0)
    assert report_name(comp, "t").endswith("best 5.33× · best over the fastest CPU 1.67×")
