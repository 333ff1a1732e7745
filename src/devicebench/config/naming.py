"""One run-naming scheme for every launch path: workload, then the device, then the few things that
differ from the defaults that tell runs apart most, e.g. `cifar · cuda:0 · bs 64 · w 8`.

MLflow's runs list cuts long names at the end, and the device is the one thing a user compares, so it
comes right after the workload. The CLI, `mlflow run` (whose own names are random: `capable-squid-859`)
and the suite all name runs here; a suite only adds `repeat k/N` when a plan repeats an item.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from devicebench.config.fields import is_keyed
from devicebench.schema import MAX_RUN_NAME

SEP = " · "
# Short spellings for the runs list; a field not named here shows as `name value`.
SHORT = {
    "batch_size": "bs",
    "width": "w",
    "epochs": "ep",
    "image_size": "px",
    "base_channels": "ch",
    "channels_last": "nhwc",
    "train_limit": "train",
    "test_limit": "test",
    "val_limit": "val",
    "sizes": "n",
    "num_workers": "workers",
}
# What tells runs apart most often comes first (a crossover's batch and width, a model, a precision);
# dataset sizes, loader workers and the like last. At most MAX_SHOWN differences are named, the rest
# counted (`+2 more`): the runs list cuts a name at about 30 characters, and the params hold it all.
PRIORITY = (
    "model",
    "batch_size",
    "width",
    "precision",
    "sizes",
    "dtypes",
    "image_size",
    "base_channels",
    "compile",
    "channels_last",
    "loader",
    "data",
    "epochs",
    "lr",
)
MAX_SHOWN = 3
# MLflow's generated names: adjective-animal-number, cut at 20 characters (mlflow/utils/name_utils.py).
_GENERATED = re.compile(r"^[a-z]+-[a-z]*(-\d{0,3})?$")


def _value(v: Any) -> str:
    if isinstance(v, tuple):
        return ",".join(_value(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _differences(cfg: Any) -> list[str]:
    """The work-defining fields that differ from the workload's defaults, the most telling first
    (PRIORITY, then the config's own order), at most MAX_SHOWN of them and a count of the rest."""
    found = _all_differences(cfg)
    if len(found) > MAX_SHOWN:
        return [*found[:MAX_SHOWN], f"+{len(found) - MAX_SHOWN} more"]
    return found


def _all_differences(cfg: Any) -> list[str]:
    ranked = sorted(
        (f for f in dataclasses.fields(cfg) if is_keyed(f)),
        key=lambda f: PRIORITY.index(f.name) if f.name in PRIORITY else len(PRIORITY),
    )
    shown = []
    for f in ranked:
        value = getattr(cfg, f.name)
        if value == f.default:
            continue
        short = SHORT.get(f.name, f.name)
        if isinstance(value, bool):
            shown.append(short if value else f"no {short}")
        elif f.metadata.get("choices") and not isinstance(value, tuple):
            shown.append(str(value))  # a choice names itself: bf16, resnet18, tensor
        else:
            shown.append(f"{short} {_value(value)}")
    return shown


def _world(cfg: Any) -> str:
    """` ×8` for a job of 8 processes (` ×16 (2 nodes)` across nodes): part of where it ran, not the work."""
    nproc, nnodes = getattr(cfg, "nproc", 1), getattr(cfg, "nnodes", 1)
    if nproc * nnodes == 1:
        return ""
    return f" ×{nproc * nnodes}" + (f" ({nnodes} nodes)" if nnodes > 1 else "")


def run_name(workload: str, device: str, cfg: Any = None, suffix: str = "") -> str:
    """`<workload> · <device>[ · <differences>][ · <suffix>]`, within MLflow's length limit."""
    parts = [workload, f"{device}{_world(cfg)}", *(_differences(cfg) if cfg is not None else []), suffix]
    return SEP.join(p for p in parts if p)[:MAX_RUN_NAME]


def is_generated(name: str | None) -> bool:
    """True for a name MLflow made up (or none): such a run may be renamed; a name a person chose may not."""
    return not name or (len(name) <= 20 and bool(_GENERATED.match(name)))
