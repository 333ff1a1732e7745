"""How the report names a config and says what a time measured, so no table shows a bare hash or a
"time" that could be anything.

A config has one name in a report, in run names' style (naming.py), workload first: `cifar · bs 32 ·
w 2` where the workload has several configs (the params that tell them apart), `unet · bs 8 · ep 2`
for its only one (what differs from the defaults). Each headline time says what it covers (training,
all epochs; or the whole run). Torch-free: it reads the configs' dataclasses, never runs them.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import defaultdict
from collections.abc import Sequence

from devicebench.config.fields import fields_by_name, is_keyed, to_params
from devicebench.config.naming import PRIORITY, always_named, spelled
from devicebench.config.workloads import CONFIGS
from devicebench.report.model.sides import NOT_WORK, Side
from devicebench.report.read.records import RunRecord
from devicebench.schema import SERVE_P50, TOTAL_S, TRAIN_S
from devicebench.util.fmt import NONE, SEP

# What each headline time measures, for the column that shows it (sides.Side.time_metric's choices)
TIMED = {
    TRAIN_S: "training, all epochs",
    SERVE_P50: "one request, batch 1 (p50)",
    TOTAL_S: "whole run (setup, data, work, logging)",
}


class Varying(dict):
    """workload → the params whose values differ between its configs; `shared`: the (workload, label)
    pairs that two configs would share (their params logged alike, keys apart), which get their key.
    Both are given at construction and not changed after."""

    def __init__(
        self, params: dict[str, list[str]], shared: frozenset[tuple[str, str]] = frozenset()
    ) -> None:
        super().__init__(params)
        self.shared = shared


def varying_params(sides: Sequence[Side]) -> Varying:
    """workload → the params whose values differ between its configs: what tells two rows apart."""
    values: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for s in sides:
        for k, v in s.params.items():
            values[s.workload][k].add(v)
    by_workload = {
        w: sorted(k for k, vs in params.items() if len(vs) > 1 and k not in NOT_WORK)
        for w, params in values.items()
    }
    keys_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for s in sides:
        keys_of[(s.workload, _label(s, by_workload))].add(s.config_key)
    return Varying(by_workload, frozenset(k for k, keys in keys_of.items() if len(keys) > 1))


def describe(side: Side, varying: dict[str, list[str]]) -> str:
    """A config as every part of the report names it, in run names' style (naming.py), workload first:
    `cifar · bs 32 · w 2` (the params that differ between the workload's configs), or, for a
    workload's only config, what differs from the defaults (`unet · bs 8 · ep 2`). Its config key
    only where that is needed: beside a label two configs share, or alone for runs that logged none of
    those params. The one spelling of a config: tables, charts, the terminal, the budget and the
    report run's description all call this."""
    label = _label(side, varying)
    if (side.workload, label) in getattr(varying, "shared", ()):
        label = f"{label} (key {side.config_key})"
    return f"{side.workload}{SEP}{label}"


def _label(side: Side, varying: dict[str, list[str]]) -> str:
    keys = [k for k in varying.get(side.workload) or [] if side.params.get(k, "") != ""]
    if keys:  # and what a run name always says (its config's ALWAYS_NAMED: the model, its data)
        always = [
            k for k in always_named(CONFIGS.get(side.workload)) if side.params.get(k, "") and k not in keys
        ]
        keys += always
    text = SEP.join(_spelled(side.workload, k, side.params[k]) for k in _ordered(side.workload, keys))
    return text or default_label(side.workload, side.params) or side.config_key


def _fields(workload: str) -> dict[str, dataclasses.Field]:
    cls = CONFIGS.get(workload)
    return fields_by_name(cls) if cls is not None else {}


def _ordered(workload: str, names: Sequence[str]) -> list[str]:
    """Run names' order (naming.PRIORITY: what tells runs apart most, first), then the config's own."""
    order = list(_fields(workload))
    return sorted(
        names,
        key=lambda k: (
            PRIORITY.index(k) if k in PRIORITY else len(PRIORITY),
            order.index(k) if k in order else len(order),
            k,
        ),
    )


def _spelled(workload: str, name: str, value: str) -> str:
    """One param as run names spell it (naming.spelled): `bs 32`, `synthetic`, `nhwc`, `train all`."""
    return spelled(name, value, _fields(workload).get(name))


def default_label(workload: str, params: dict[str, str]) -> str:
    """The work-defining params that differ from the workload's defaults, spelled and ordered as run
    names are (`bs 32 · lr 0.02`); `defaults` for the workload's own defaults; "" for a workload this
    version does not know, or for runs that logged none of its params (then only the config key can
    name it)."""
    cls = CONFIGS.get(workload)
    if cls is None:
        return ""
    defaults = to_params(cls())
    logged = [
        f.name
        for f in fields_by_name(cls).values()
        if is_keyed(f) and f.name not in NOT_WORK and f.name in params
    ]
    if not logged:
        return ""
    always = always_named(cls)
    shown = [k for k in _ordered(workload, logged) if params[k] != defaults.get(k) or k in always]
    return SEP.join(_spelled(workload, k, params[k]) for k in shown) or "defaults"


def timed_label(metric: str | None) -> str:
    """`training, all epochs`: what a time in the report measured, said beside it."""
    if not metric:
        return NONE
    return TIMED.get(metric, metric.removeprefix("time/").removesuffix("_s"))


# a filter on one plan launch as the suite passes it: `devicebench.suite` = '<plan>:<parent run id>'
_LAUNCH = re.compile(r"tags\.`?devicebench\.suite`?\s*=\s*'([A-Za-z0-9_.\-]+):([0-9a-f]{32})'")


def selection_row(key: str, value: str, runs: Sequence[RunRecord]) -> tuple[str, str]:
    """A row of the selection table as a reader knows it: a filter on one plan launch says which plan
    and when it started, not the suite's parent run id (the exact filter is the report run's `filter`
    param, and each run's suite tag is in runs.csv)."""

    def launch(m: re.Match[str]) -> str:
        tag = f"{m.group(1)}:{m.group(2)}"
        starts = [r.start_time for r in runs if r.tag("suite") == tag]
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(min(starts) / 1000)) if starts else ""
        return f"the runs of one launch of plan {m.group(1)}" + (f", started {when}" if when else "")

    said = _LAUNCH.sub(launch, value)
    return (key.replace(" (sent to MLflow)", ""), said) if said != value else (key, value)
