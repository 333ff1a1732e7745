"""How the report names a config and says what a time measured, so no table shows a bare hash or a
"time" that could be anything.

A workload's only config is named by what differs from the workload's defaults, spelled as run names
spell it (naming.py: `bs 32 · lr 0.02 · synthetic`); each headline time says what it covers (training,
all epochs; or the whole run). Torch-free: it reads the configs' dataclasses, never runs them.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from devicebench.config.fields import is_keyed, to_params
from devicebench.config.naming import SEP, SHORT
from devicebench.config.workloads import CONFIGS
from devicebench.report.model.sides import NOT_WORK, Side
from devicebench.schema import SERVE_P50, TOTAL_S, TRAIN_S
from devicebench.util.fmt import NONE

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
    """A config as the report's tables name it: the params that differ between its workload's configs
    (`batch_size=64`), or, for a workload's only config, what differs from the defaults, as run names
    spell it (`bs 32 · lr 0.02 · synthetic`). Its config key only where that is needed: beside a label
    two configs share, or alone for runs that logged none of those params."""
    label = _label(side, varying)
    if (side.workload, label) in getattr(varying, "shared", ()):
        return f"{label} (key {side.config_key})"
    return label


def _label(side: Side, varying: dict[str, list[str]]) -> str:
    keys = [k for k in varying.get(side.workload) or [] if side.params.get(k, "") != ""]
    text = " ".join(f"{k}={side.params[k]}" for k in keys)
    return text or default_label(side.workload, side.params) or side.config_key


def default_label(workload: str, params: dict[str, str]) -> str:
    """The work-defining params that differ from the workload's defaults, short (naming.SHORT);
    `defaults` for the workload's own defaults; "" for a workload this version does not know, or for
    runs that logged none of its params (then only the config key can name it)."""
    cls = CONFIGS.get(workload)
    if cls is None:
        return ""
    defaults = to_params(cls())
    fields = [f for f in dataclasses.fields(cls) if is_keyed(f) and f.name not in NOT_WORK]
    logged = [f for f in fields if f.name in params]
    if not logged:
        return ""
    shown = []
    for f in logged:
        value = params[f.name]
        if value == defaults.get(f.name):
            continue
        if f.metadata.get("choices") and "," not in value:
            shown.append(value)  # a choice names itself: synthetic, bf16, resnet18
        else:
            shown.append(f"{SHORT.get(f.name, f.name)} {value}")
    return SEP.join(shown) or "defaults"


def timed_label(metric: str | None) -> str:
    """`training, all epochs`: what a time in the report measured, said beside it."""
    if not metric:
        return NONE
    return TIMED.get(metric, metric.removeprefix("time/").removesuffix("_s"))
