"""Regressions: the newest run(s) of a config on a device and host, judged against the earlier ones."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from devicebench.report.model.sides import GPU_METRICS
from devicebench.report.read.records import RunRecord
from devicebench.schema import HOST_OTHERS_SHARE, PRODUCT, TOTAL_S, TRAIN_S
from devicebench.util.busy_host import busy_caveat, is_busy
from devicebench.util.gpu_caveat import gpu_caveat
from devicebench.util.stats import Stat


@dataclass(frozen=True)
class Regression:
    """The newest run(s) of a config on a device and host, slower than the earlier ones beyond noise."""

    workload: str
    config_key: str
    device: str
    host: str
    measure: str
    newest: float
    baseline: Stat
    run_ids: tuple[str, ...]
    why: str = ""  # what NVML saw on the newest GPU runs besides the code: `host-bound: GPU busy 41%`
    busy: str = ""  # the newest runs shared their host: `busy host: other processes took 63% of its CPU`

    @property
    def explained(self) -> bool:
        """Whether something other than the code was measured on the newest runs (NVML, a busy host)."""
        return bool(self.why or self.busy)

    @property
    def change(self) -> float:
        return self.newest / self.baseline.median - 1.0


def measures(run: RunRecord) -> dict[str, float]:
    """The lower-is-better times a regression is judged on: training time, or each matmul point."""
    out = {}
    for key in (TRAIN_S, TOTAL_S):
        if key in run.metrics and run.kind is not PRODUCT:
            out[key] = run.metrics[key]
            break
    for key, hist in run.history.items():
        if key.endswith("/time_s"):
            for size, value in hist.items():
                out[f"{key}@{size}"] = value
    return out


def newest_group(runs: Sequence[RunRecord]) -> tuple[list[RunRecord], list[RunRecord]]:
    """(newest, earlier): the newest run, with its suite siblings when a plan ran repeats together."""
    ordered = sorted(runs, key=lambda r: r.start_time)
    last = ordered[-1]
    suite = last.tag("suite")
    if suite:
        newest = [r for r in ordered if r.tag("suite") == suite]
        earlier = [r for r in ordered if r.tag("suite") != suite and r.start_time < newest[0].start_time]
    else:
        newest, earlier = [last], ordered[:-1]
    return newest, earlier


def _group(run: RunRecord) -> tuple[str, str, str, str]:
    """(workload, config key, device, host), the device saying the job's processes when more than one
    (a night at 1 process judged against nights at 8 would be a "regression" of the world size) and a
    tuned CPU (judged against tuned nights: against the CPU as configured it would hide a slowdown)."""
    device = run.device if run.world_size == 1 else f"{run.device} ({run.world_size} processes)"
    return run.workload, run.config_key, f"{device} tuned" if run.tuned else device, run.host


def find_regressions(
    runs: Sequence[RunRecord], threshold: float, earlier_runs: Sequence[RunRecord] = ()
) -> tuple[list[Regression], int]:
    """Regressions per (config key, device, host); returns them and how many groups had a baseline.

    Without `earlier_runs` the newest run(s) of each group in `runs` are judged against the rest of
    `runs`. With them (a selection narrowed by --filter, e.g. one suite launch), every run in `runs` is
    "newest" and the baseline is the runs of `earlier_runs` that started before them.
    """
    groups: dict[tuple[str, str, str, str], list[RunRecord]] = defaultdict(list)
    for r in runs:
        groups[_group(r)].append(r)
    history: dict[tuple[str, str, str, str], list[RunRecord]] = defaultdict(list)
    chosen = {r.run_id for r in runs}
    for r in earlier_runs:
        if r.run_id not in chosen:
            history[_group(r)].append(r)
    found: list[Regression] = []
    checked = 0
    for group, rs in sorted(groups.items()):
        workload, key, device, host = group
        if earlier_runs:
            newest = rs
            first = min(r.start_time for r in rs)
            earlier = [r for r in history[group] if r.start_time < first]
        else:
            newest, earlier = newest_group(rs)
        if not earlier:
            continue
        checked += 1
        new_m = [measures(r) for r in newest]
        old_m = [measures(r) for r in earlier]
        for name in sorted(set().union(*new_m)):
            new = Stat.of(m[name] for m in new_m if name in m)
            base = Stat.of(m[name] for m in old_m if name in m)
            if new is None or base is None:
                continue
            if is_regression(new.median, base, threshold):
                ids = tuple(r.run_id for r in newest)
                found.append(
                    Regression(
                        workload,
                        key,
                        device,
                        host,
                        name,
                        new.median,
                        base,
                        ids,
                        gpu_why(newest),
                        busy_why(newest),
                    )
                )
    return found, checked


def gpu_why(runs: Sequence[RunRecord]) -> str:
    """Why the newest GPU runs may be slower for a reason other than the work, from their `gpu/*`
    figures (util/gpu_caveat.py): a host-bound step follows the host CPU, and capped clocks are the
    GPU's power or cooling; "" where neither applies or nothing was measured (a CPU run, a MIG slice)."""
    figures = {k: s.median for k in GPU_METRICS if (s := Stat.of(r.metrics.get(k) for r in runs)) is not None}
    train = Stat.of(r.metrics.get(TRAIN_S) for r in runs)
    return gpu_caveat(figures, train.median if train is not None else math.nan)


def busy_why(runs: Sequence[RunRecord]) -> str:
    """`busy host: other processes took 63% of its CPU (load 4.1)` for the busiest of the newest runs
    where it was busy (util/busy_host.py): a night that shared its cores is slower for that; else ""."""
    busy = [r for r in runs if is_busy(r.metrics)]
    return busy_caveat(max(busy, key=lambda r: r.metrics[HOST_OTHERS_SHARE]).metrics) if busy else ""


def is_regression(newest: float, baseline: Stat, threshold: float) -> bool:
    """Slower than the baseline median by more than `threshold` AND above the baseline's own range.

    The second condition is what keeps noise from paging anyone: a config whose earlier repeats already
    spread over 25 % is not regressed by a run 12 % slower, however small `threshold` is.
    """
    if baseline.median <= 0:
        return False
    return newest > baseline.median * (1.0 + threshold) and newest > baseline.hi
