"""Runs → sides → pairs → speedups, plus the tables that explain them (quality, hosts, crossover, regressions).

Runs with the same `devicebench.config_key` did the same work. Within one key, runs on the same device and
hardware model are repeats of one *side*; a *pair* is two sides of one key (CPU vs GPU, or two GPU models).
Every figure is a median of repeats with its spread, because a single timing of a GPU is a coin toss.
Nothing is dropped: keys with one side are listed as unpaired, unfinished runs are listed apart.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from devicebench.report import verdicts
from devicebench.report.query import RunRecord
from devicebench.stats import quantile

TIME_METRICS = ("time/train_s", "time/eval_s", "time/total_s", "time/data_wait_s")
THROUGHPUT_METRICS = ("throughput/train_samples_per_s", "throughput/eval_samples_per_s")
QUALITY_METRICS = ("eval/accuracy", "eval/miou")
MEMORY_METRICS = ("memory/peak_bytes", "memory/peak_rss_bytes")
SUMMARY_METRICS = TIME_METRICS + THROUGHPUT_METRICS + QUALITY_METRICS + MEMORY_METRICS
# params that say where or how verbosely a run worked, not what it measured (and the grid's own axes)
NOT_WORK = {"device", "seed", "data_dir", "download", "verify", "log_every", "system_metrics"}
GRID_AXES = ("width", "batch_size")


# --------------------------------------------------------------------------------------------- stats


@dataclass(frozen=True)
class Stat:
    """Median of repeats with its spread: p10–p90 from 5 repeats on, min–max below (p10 of 3 is noise)."""

    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat | None:
        xs = sorted(v for v in values if v is not None and math.isfinite(v))
        if not xs:
            return None
        if len(xs) >= 5:
            return cls(statistics.median(xs), quantile(xs, 0.10), quantile(xs, 0.90), len(xs))
        return cls(statistics.median(xs), xs[0], xs[-1], len(xs))

    @property
    def spread_kind(self) -> str:
        return "p10–p90" if self.n >= 5 else "min–max"

    @property
    def rel_spread(self) -> float:
        """(hi − lo) / median: 0.1 means the repeats spread over ±5 % of the median."""
        return (self.hi - self.lo) / self.median if self.median else 0.0


# --------------------------------------------------------------------------------------------- sides


@dataclass
class Side:
    """The repeats of one config on one device model (possibly from several hosts with that model)."""

    workload: str
    config_key: str
    device: str
    device_name: str
    runs: list[RunRecord]
    metrics: dict[str, Stat] = field(default_factory=dict)
    wait_share: Stat | None = None
    # (backend, dtype, size) -> {"time": Stat, "unsynced": Stat}
    matmul: dict[tuple[str, str, int], dict[str, Stat]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.device} ({self.device_name})" if self.device_name else self.device

    @property
    def is_cpu(self) -> bool:
        return self.device.startswith("cpu")

    @property
    def params(self) -> dict[str, str]:
        return self.runs[0].params

    @property
    def data(self) -> str:
        return self.runs[0].tag("data")

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.runs})

    def time_metric(self) -> str | None:
        """The headline time: training where there is one, else the whole run."""
        for key in ("time/train_s", "time/total_s"):
            if key in self.metrics:
                return key
        return None


def wait_share(run: RunRecord) -> float | None:
    """The fraction of training time spent waiting for the next batch (`data_wait / train`)."""
    wait = run.metrics.get("time/data_wait_s")
    total = run.metrics.get("time/train_s") or run.metrics.get("time/total_s")
    if wait is None or not total:
        return None
    return min(max(wait / total, 0.0), 1.0)


def summarise(workload: str, key: str, device: str, name: str, runs: list[RunRecord]) -> Side:
    """Medians and spreads of everything the report shows, over one side's repeats."""
    side = Side(workload, key, device, name, sorted(runs, key=lambda r: r.start_time))
    for m in SUMMARY_METRICS:
        s = Stat.of(r.metrics[m] for r in runs if m in r.metrics)
        if s is not None:
            side.metrics[m] = s
    side.wait_share = Stat.of(w for r in runs if (w := wait_share(r)) is not None)
    points: dict[tuple[str, str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        for k, hist in r.history.items():
            parts = k.split("/")
            kind = "unsynced" if parts[-1] == "unsynced_time_s" else "time"
            for size, value in hist.items():
                points[(parts[1], parts[2], size)][kind].append(value)
    for pt in sorted(points):
        side.matmul[pt] = {kind: s for kind, vs in points[pt].items() if (s := Stat.of(vs)) is not None}
    return side


def side_of(run: RunRecord) -> tuple[str, str]:
    """(device kind, hardware model): `cuda:0` and `cuda:1` of one model are repeats of one side, not two
    sides to pair (a "speedup" of one A10 over an identical one is noise). A MIG slice is its own model."""
    name = run.device_name
    mig = run.tag("host.gpu_mig_profile")
    if mig and mig.lower() not in name.lower():
        name = f"{name} MIG {mig}"
    return run.device.split(":")[0], name


def build_sides(runs: Sequence[RunRecord]) -> dict[str, list[Side]]:
    """config_key → its sides (one per device and hardware model), CPU first."""
    groups: dict[tuple[str, str], dict[tuple[str, str], list[RunRecord]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in runs:
        groups[(r.workload, r.config_key or f"(no key) {r.run_id}")][side_of(r)].append(r)
    out: dict[str, list[Side]] = {}
    for (workload, key), by_side in groups.items():
        sides = [
            summarise(workload, key, ", ".join(sorted({r.device for r in rs})), n, rs)
            for (_, n), rs in by_side.items()
        ]
        out[key] = sorted(sides, key=lambda s: (not s.is_cpu, s.device, s.device_name))
    return out


# --------------------------------------------------------------------------------------------- pairs


def gflops(size: int, seconds: float) -> float:
    """2n³ floating-point operations per n×n product (the workload's own definition)."""
    return 2.0 * size**3 / seconds / 1e9


@dataclass
class Pair:
    """Two sides of one config: `speedup` = base time / other time (> 1: `other` is faster)."""

    base: Side
    other: Side
    speedups: dict[str, float] = field(default_factory=dict)
    speedup_range: tuple[float, float] | None = None
    # (backend on base, dtype, size) -> torch-on-other speedup at that point
    matmul: dict[tuple[str, str, int], float] = field(default_factory=dict)
    in_crossover: bool = False
    verdicts: list[str] = field(default_factory=list)

    @property
    def workload(self) -> str:
        return self.base.workload

    @property
    def config_key(self) -> str:
        return self.base.config_key

    @property
    def is_cpu_gpu(self) -> bool:
        return self.base.is_cpu and not self.other.is_cpu

    @property
    def headline(self) -> float | None:
        """The one number for the pair: training-time speedup, or matmul at its largest common size."""
        if "matmul" in self.speedups:
            return self.speedups["matmul"]
        for key in ("train", "total"):
            if key in self.speedups:
                return self.speedups[key]
        return self.speedups.get("matmul")


def _time_speedups(pair: Pair) -> None:
    for name in ("train", "eval", "total"):
        a, b = pair.base.metrics.get(f"time/{name}_s"), pair.other.metrics.get(f"time/{name}_s")
        if a and b and b.median > 0:
            pair.speedups[name] = a.median / b.median
    a, b = pair.base.metrics.get(THROUGHPUT_METRICS[0]), pair.other.metrics.get(THROUGHPUT_METRICS[0])
    if a and b and a.median > 0:
        pair.speedups["throughput"] = b.median / a.median
    key = pair.base.time_metric()
    if key and key in pair.other.metrics:
        a, b = pair.base.metrics[key], pair.other.metrics[key]
        if b.hi > 0 and b.lo > 0:
            pair.speedup_range = (a.lo / b.hi, a.hi / b.lo)


def _matmul_speedups(pair: Pair) -> None:
    """torch on `other` against each backend on `base` at every common (dtype, size)."""
    theirs = {(d, n): v["time"] for (b, d, n), v in pair.other.matmul.items() if b == "torch" and "time" in v}
    for (backend, dtype, size), v in pair.base.matmul.items():
        o = theirs.get((dtype, size))
        if o is not None and "time" in v and o.median > 0:
            pair.matmul[(backend, dtype, size)] = v["time"].median / o.median
    torch_points = [k for k in pair.matmul if k[0] == "torch"] or list(pair.matmul)
    if torch_points:
        biggest = max(k[2] for k in torch_points)
        at = [k for k in torch_points if k[2] == biggest]
        pick = next((k for k in at if k[1] == "float32"), at[0])
        pair.speedups["matmul"] = pair.matmul[pick]
        pair.speedups["matmul_point"] = float(biggest)
        a, b = pair.base.matmul[pick]["time"], theirs[(pick[1], pick[2])]
        pair.speedup_range = (a.lo / b.hi, a.hi / b.lo) if b.lo > 0 else None


def _order(params: dict[str, str]) -> tuple:
    """Params as a sort key with numbers compared as numbers (batch 4 before batch 32)."""
    out = []
    for k, v in sorted(params.items()):
        try:
            out.append((k, 0, float(v), ""))
        except ValueError:
            out.append((k, 1, 0.0, v))
    return tuple(out)


def make_pair(base: Side, other: Side) -> Pair:
    pair = Pair(base, other)
    _time_speedups(pair)
    _matmul_speedups(pair)
    return pair


def build_pairs(sides_by_key: dict[str, list[Side]]) -> tuple[list[Pair], list[Side]]:
    """Every pair of sides within a key (CPU as the base where present); keys with one side are unpaired."""
    pairs: list[Pair] = []
    unpaired: list[Side] = []
    for sides in sides_by_key.values():
        if len(sides) < 2:
            unpaired.extend(sides)
            continue
        pairs.extend(make_pair(a, b) for a, b in combinations(sides, 2))
    pairs.sort(
        key=lambda p: (p.workload, not p.is_cpu_gpu, p.base.label, p.other.label, _order(p.base.params))
    )
    return pairs, unpaired


# --------------------------------------------------------------------------------------------- crossover


@dataclass
class Grid:
    """Speedup over width × batch_size for one workload, device pair and otherwise equal config."""

    workload: str
    base: str
    other: str
    fixed: dict[str, str]
    cells: dict[tuple[float, float], float]  # (width, batch_size) -> speedup

    @property
    def widths(self) -> list[float]:
        return sorted({w for w, _ in self.cells})

    @property
    def batch_sizes(self) -> list[float]:
        return sorted({b for _, b in self.cells})

    @property
    def title(self) -> str:
        return f"{self.workload}: {self.other} vs {self.base}"


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def build_grids(pairs: Sequence[Pair]) -> list[Grid]:
    """Group pairs whose configs differ only in width/batch_size; a grid needs two cells or more."""
    groups: dict[tuple, list[Pair]] = defaultdict(list)
    for p in pairs:
        params = p.base.params
        if p.headline is None or not any(a in params for a in GRID_AXES):
            continue
        fixed = tuple(sorted((k, v) for k, v in params.items() if k not in NOT_WORK and k not in GRID_AXES))
        groups[(p.workload, p.base.label, p.other.label, fixed)].append(p)
    grids = []
    for (workload, base, other, fixed), ps in groups.items():
        cells: dict[tuple[float, float], float] = {}
        for p in ps:
            w = _num(p.base.params.get("width"))
            b = _num(p.base.params.get("batch_size"))
            cells[(w if w is not None else 1.0, b if b is not None else 0.0)] = p.headline  # type: ignore[assignment]
        if len(cells) >= 2:
            grids.append(Grid(workload, base, other, dict(fixed), cells))
            if len({b for _, b in cells}) > 1:
                for p in ps:
                    p.in_crossover = True
    return grids


# --------------------------------------------------------------------------------------------- regressions


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

    @property
    def change(self) -> float:
        return self.newest / self.baseline.median - 1.0

    def line(self) -> str:
        return (
            f"regression: {self.workload} {self.config_key} on {self.device} @ {self.host}: {self.measure} "
            f"{self.newest:.4g} s vs baseline median {self.baseline.median:.4g} s ({self.change:+.0%}; "
            f"baseline {self.baseline.spread_kind} {self.baseline.lo:.4g}–{self.baseline.hi:.4g} s over "
            f"{self.baseline.n} run(s)); newest run {self.run_ids[-1]}"
        )


def measures(run: RunRecord) -> dict[str, float]:
    """The lower-is-better times a regression is judged on: training time, or each matmul point."""
    out = {}
    for key in ("time/train_s", "time/total_s"):
        if key in run.metrics and run.workload != "matmul":
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
        groups[(r.workload, r.config_key, r.device, r.host)].append(r)
    history: dict[tuple[str, str, str, str], list[RunRecord]] = defaultdict(list)
    chosen = {r.run_id for r in runs}
    for r in earlier_runs:
        if r.run_id not in chosen:
            history[(r.workload, r.config_key, r.device, r.host)].append(r)
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
            if verdicts.is_regression(new.median, base, threshold):
                found.append(
                    Regression(
                        workload, key, device, host, name, new.median, base, tuple(r.run_id for r in newest)
                    )
                )
    return found, checked


# --------------------------------------------------------------------------------------------- all


@dataclass
class Comparison:
    """Everything the renderers show, computed once."""

    runs: list[RunRecord]
    finished: list[RunRecord]
    unfinished: list[RunRecord]
    sides: dict[str, list[Side]]
    pairs: list[Pair]
    unpaired: list[Side]
    grids: list[Grid]
    hosts: dict[str, list[Pair]]
    regressions: list[Regression] | None = None
    regression_groups: int = 0
    threshold: float = 0.1

    @property
    def matmul_sides(self) -> list[Side]:
        return [s for sides in self.sides.values() for s in sides if s.matmul]


def host_tables(finished: Sequence[RunRecord]) -> dict[str, list[Pair]]:
    """When runs come from several machines: the pairs formed within each machine alone."""
    by_host: dict[str, list[RunRecord]] = defaultdict(list)
    for r in finished:
        by_host[r.host].append(r)
    if len(by_host) < 2:
        return {}
    return {h: build_pairs(build_sides(rs))[0] for h, rs in sorted(by_host.items())}


def compare(
    runs: Sequence[RunRecord],
    baseline: str = "none",
    threshold: float = 0.1,
    earlier_runs: Sequence[RunRecord] = (),
) -> Comparison:
    """The whole comparison: only FINISHED runs are results; the others are listed, not averaged in.

    `earlier_runs`: where the baseline comes from when the selection was narrowed (see find_regressions).
    """
    finished = [r for r in runs if r.status == "FINISHED"]
    unfinished = [r for r in runs if r.status != "FINISHED"]
    sides = build_sides(finished)
    pairs, unpaired = build_pairs(sides)
    grids = build_grids(pairs)
    for p in pairs:
        p.verdicts = verdicts.explain(p)
    comp = Comparison(
        list(runs),
        finished,
        unfinished,
        sides,
        pairs,
        unpaired,
        grids,
        host_tables(finished),
        threshold=threshold,
    )
    if baseline == "previous":
        earlier = [r for r in earlier_runs if r.status == "FINISHED"]
        comp.regressions, comp.regression_groups = find_regressions(finished, threshold, earlier)
    return comp
