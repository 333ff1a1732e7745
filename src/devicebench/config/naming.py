"""One run-naming scheme for every launch path: workload, then the device, then the few things that
differ from the defaults that tell runs apart most, e.g. `cifar · cuda:0 · bs 64 · w 8`.

MLflow's runs list cuts long names at the end, and the device is the one thing a user compares, so it
comes right after the workload. The CLI, `mlflow run` (whose own names are random: `capable-squid-859`)
and the suite all name runs here; a suite only adds `repeat k/N` when a plan repeats an item.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from devicebench.config.fields import config_fields, is_keyed
from devicebench.config.parts import Job
from devicebench.schema import MAX_RUN_NAME
from devicebench.util.fmt import SEP

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
# Never in a name: an id nobody reads there (the params hold it; an infer run names the model it served).
NEVER = ("model_uri",)
LIMITS = ("train_limit", "test_limit", "val_limit")  # 0 is every image, which `train 0` reads as none
# MLflow's generated names: adjective-animal-number, cut at 20 characters (mlflow/utils/name_utils.py).
_GENERATED = re.compile(r"^[a-z]+-[a-z]*(-\d{0,3})?$")


def _value(v: Any) -> str:
    if isinstance(v, tuple):
        return ",".join(_value(x) for x in v)
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def model_label(spec: str) -> str:
    """A model as names show it: a torchvision name as it is, a factory by its module's or file's own
    name and the factory (`my_models:build`, never the file's whole path)."""
    module, colon, factory = spec.rpartition(":")
    if not colon:
        return spec
    stem = module.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].removesuffix(".py")
    return f"{stem.rsplit('.', 1)[-1]}:{factory}"


def spelled(name: str, value: str, f: dataclasses.Field | None = None) -> str:
    """One work field, given as its param string, as every name spells it: `bs 32`, a choice by
    itself (`synthetic`, `bf16`), a flag by its short name (`nhwc`, `no nhwc`), a model by its own name,
    a limit of 0 as `train all`. Run names and the report's config labels both call this."""
    short = SHORT.get(name, name)
    if f is not None and f.type in (bool, "bool") and value in ("true", "false"):
        return short if value == "true" else f"no {short}"
    if name == "model":
        return model_label(value)
    if f is not None and f.metadata.get("choices") and "," not in value:
        return value
    if name in LIMITS and value == "0":
        return f"{short} all"
    return f"{short} {value}"


def always_named(config_cls: type | None) -> tuple[str, ...]:
    """The fields a workload's run names say whatever their value (a config's ALWAYS_NAMED), or none."""
    return getattr(config_cls, "ALWAYS_NAMED", ())


def _differences(cfg: Any, workload: str = "") -> list[str]:
    """What the workload always names (its config's ALWAYS_NAMED: a default resnet18 on synthetic images
    is still resnet18 on synthetic images, and `model · cpu` says neither), then the work-defining fields that differ from its
    defaults, the most telling first (PRIORITY, then the config's own order), at most MAX_SHOWN of
    them and a count of the rest."""
    always = [n for n in always_named(type(cfg)) if hasattr(cfg, n)]
    found = _all_differences(cfg, always)
    if len(found) > MAX_SHOWN:
        found = [*found[:MAX_SHOWN], f"+{len(found) - MAX_SHOWN} more"]
    fields = {f.name: f for f in config_fields(cfg)}
    return [spelled(n, _value(getattr(cfg, n)), fields[n]) for n in always] + found


def _all_differences(cfg: Any, always: Sequence[str] = ()) -> list[str]:
    ranked = sorted(
        (f for f in config_fields(cfg) if is_keyed(f) and f.name not in (*always, *NEVER)),
        key=lambda f: PRIORITY.index(f.name) if f.name in PRIORITY else len(PRIORITY),
    )
    return [
        spelled(f.name, _value(getattr(cfg, f.name)), f) for f in ranked if getattr(cfg, f.name) != f.default
    ]


def _world(cfg: Any) -> str:
    """` ×8` for a job of 8 processes (` ×16 (2 nodes)` across nodes): part of where it ran, not the work."""
    if not isinstance(cfg, Job) or cfg.world_size == 1:
        return ""
    return f" ×{cfg.world_size}" + (f" ({cfg.nnodes} nodes)" if cfg.nnodes > 1 else "")


def run_name(workload: str, device: str, cfg: Any = None, suffix: str = "") -> str:
    """`<workload> · <device>[ · <differences>][ · <suffix>]`, within MLflow's length limit."""
    parts = [workload, f"{device}{_world(cfg)}", *(_differences(cfg, workload) if cfg is not None else [])]
    parts.append(suffix)
    return SEP.join(p for p in parts if p)[:MAX_RUN_NAME]


def is_generated(name: str | None) -> bool:
    """True for a name MLflow made up (or none): such a run may be renamed; a name a person chose may not."""
    return not name or (len(name) <= 20 and bool(_GENERATED.match(name)))
