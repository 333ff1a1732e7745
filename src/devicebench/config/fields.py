"""Workload configs: one frozen dataclass per workload is the single source of its parameters.

The same field list feeds the CLI (flags, help, validation), the MLflow params (every field, nothing
else) and the `config_key` that says which runs did the same work. MLflow passes every `-P` value as a
string and checks none of them, so validation here is the real gate: a bad value is one line naming
the parameter and what is allowed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import inspect
import json
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from devicebench.errors import UsageError

C = TypeVar("C")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
# The largest integer a parameter may take when its field sets no max: torch and NumPy seeds, tensor
# sizes and the stores' integer columns are 64-bit, and a bigger value would fail deep inside a run.
INT_LIMIT = 2**63 - 1
# Fields no config key includes, whatever their `key`: where a run worked and its random draw.
NOT_KEYED = ("device", "seed")


@dataclass(frozen=True)
class Unset:
    """The word that stands for a text field's empty value (`auto`, `default`), and what its text is
    when one is given (`a directory`, `an OCI shape name`): the flag's help shows both."""

    word: str
    kind: str


def config_fields(cls: Any) -> tuple[dataclasses.Field, ...]:
    """A config's fields (`cls` a config class or instance) in the order a user sees them, in its CLI
    help, its MLproject entry point and its params: its own first, in the order it declares them, then
    each part's (`config.parts`), in the order its bases are named. Dataclass inheritance alone would
    list every part's before the config's own, `device` last."""
    cls = cls if isinstance(cls, type) else type(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    order = [n for n in inspect.get_annotations(cls) if n in by_name]
    for base in cls.__bases__:
        if dataclasses.is_dataclass(base):
            order += [f.name for f in config_fields(base)]
    return tuple(by_name[n] for n in dict.fromkeys(order))


def field_names(cls: Any) -> list[str]:
    """A config's parameters' names, in `config_fields`' order."""
    return [f.name for f in config_fields(cls)]


def fields_by_name(cls: Any) -> dict[str, dataclasses.Field]:
    """A config's fields by name, in `config_fields`' order: for a reader of logged params (the
    report), which knows a workload's config class but holds no config."""
    return {f.name: f for f in config_fields(cls)}


def param(
    default: Any,
    help: str,
    *,
    choices: Sequence[str] | None = None,
    min: float | None = None,
    max: float | None = None,
    above: float | None = None,
    key: bool = True,
    unset: Unset | None = None,
) -> Any:
    """A config field with its help text and constraints.

    `key=False` keeps a field out of the config key: it changes *where* or *how verbosely* a run works
    (data directory, seed, log interval), not what work it measures.
    `above` is an exclusive lower bound (a learning rate must be > 0: `min=0` admitted 0 and told -1
    that ">= 0" was allowed).
    `unset` is the word that stands for a text field's empty value (`auto`, `default`): the field holds
    "" as before, but the word is what is logged and what MLproject passes. `mlflow run` logs every
    parameter shell-quoted, so an empty default was logged as the literal `''` and MLflow's compare view
    set those runs apart from the same work logged by the CLI. Such a field says what its text is
    (`Unset.kind`: "a directory", "an OCI shape name"), which its flag's help shows beside the word.
    """
    meta = {"help": help, "choices": tuple(choices) if choices else None, "min": min, "max": max, "key": key}
    meta["unset"] = unset.word if unset else None
    meta["above"] = above
    meta["kind"] = unset.kind if unset else None
    if unset is not None and default != "":
        raise TypeError("a field with an unset word defaults to its empty value")
    if isinstance(default, list | dict | set):
        raise TypeError("use tuples for sequence defaults")
    return dataclasses.field(default=default, metadata=meta)


def spelt(f: Any, canonical: Callable[[str], str]) -> Any:
    """`f` (a `param` field of text) whose value is kept, logged and keyed as `canonical` spells it:
    `3X16X16` and `3×16×16` are the work of `3x16x16` and must share its config key. `canonical` raises
    the UsageError for a value it cannot read."""
    f.metadata = types.MappingProxyType({**f.metadata, "canonical": canonical})
    return f


def _base_type(tp: Any) -> tuple[Any, bool]:
    """(element type, is_sequence) for int, float, bool, str and tuple[X, ...]."""
    if typing.get_origin(tp) is tuple:
        return typing.get_args(tp)[0], True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], False
    return tp, False


def _bound_text(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _describe(f: dataclasses.Field, elem: Any, seq: bool) -> str:
    meta = f.metadata
    if meta.get("choices"):
        what = "one of " + ", ".join(meta["choices"])
    elif elem is bool:
        what = "true or false"
    elif elem in (int, float):
        kind = "an integer" if elem is int else "a number"
        lo, hi, gt = meta.get("min"), meta.get("max"), meta.get("above")
        bounds = [
            f">= {_bound_text(lo)}" if lo is not None else "",
            f"<= {_bound_text(hi)}" if hi is not None else "",
        ]
        bounds.insert(0, f"> {_bound_text(gt)}" if gt is not None else "")
        what = f"{kind} {' and '.join(b for b in bounds if b)}".strip()
    else:
        what = "a string"
    return f"a comma-separated list of {what.removeprefix('one of ')}" if seq else what


def _convert_one(raw: str, f: dataclasses.Field, elem: Any, seq: bool) -> Any:
    meta = f.metadata
    text = raw.strip()
    allowed = _describe(f, elem, seq)
    if elem is bool:
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise UsageError(f"{raw!r} is not {allowed}", param=f.name)
    if elem in (int, float):
        try:
            value = int(text) if elem is int else float(text)
        except ValueError:
            raise UsageError(f"{raw!r} is not {allowed}", param=f.name) from None
        if not math.isfinite(value):  # `inf`, `1e309` and `nan` parse, but no parameter means them
            raise UsageError(f"{raw!r} is not a finite number; expected {allowed}", param=f.name)
        too_low = meta.get("above") is not None and value <= meta["above"]
        if too_low or (meta.get("min") is not None and value < meta["min"]):
            raise UsageError(f"{raw!r} is out of range; expected {allowed}", param=f.name)
        if meta.get("max") is not None and value > meta["max"]:
            raise UsageError(f"{raw!r} is out of range; expected {allowed}", param=f.name)
        if elem is int and value > INT_LIMIT:
            raise UsageError(f"{raw!r} is out of range; expected {allowed} and <= {INT_LIMIT}", param=f.name)
        return value
    if meta.get("unset") and text.lower() == meta["unset"]:
        return ""
    if meta.get("choices") and text.lower() not in meta["choices"]:
        raise UsageError(f"unknown value {raw!r}; allowed: {', '.join(meta['choices'])}", param=f.name)
    if meta.get("canonical") and text:
        return meta["canonical"](text)
    return text.lower() if meta.get("choices") else text


def _in_canonical_order(values: Sequence[Any], f: dataclasses.Field) -> tuple[Any, ...]:
    """A list's values once each, in one order: its choices' for words, ascending for numbers. A list is
    a set of points to measure, each measured alike whatever its place: `--batch_sizes 8,1` is the work
    of `1,8` and `--sizes 64,64,64` that of `64`, logged and keyed as such."""
    choices = f.metadata.get("choices")
    unique = set(values)
    return tuple(c for c in choices if c in unique) if choices else tuple(sorted(unique))


def convert(raw: Any, f: dataclasses.Field, cls: type) -> Any:
    """Parse a CLI/MLproject/plan value (a string, or a YAML scalar/list) into the field's type."""
    hints = typing.get_type_hints(cls)
    elem, seq = _base_type(hints[f.name])
    if seq:
        items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
        items = [str(i) for i in items if str(i).strip()]
        if not items:
            raise UsageError(f"needs at least one value ({_describe(f, elem, seq)})", param=f.name)
        return _in_canonical_order([_convert_one(i, f, elem, seq) for i in items], f)
    if isinstance(raw, bool) and elem is bool:
        return raw
    return _convert_one(str(raw), f, elem, seq)


def build_config(cls: type[C], values: Mapping[str, Any]) -> C:
    """A validated config from name → raw value; unknown names are an error that lists the known ones."""
    fields = {f.name: f for f in config_fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise UsageError(f"unknown parameter {unknown[0]!r}; known: {', '.join(fields)}")
    cfg = cls(**{name: convert(raw, fields[name], cls) for name, raw in values.items()})
    check = getattr(cfg, "validate", None)
    if check is not None:
        check()
    return cfg


def add_config_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One `--name` flag per field (`--batch_size` and `--batch-size` both work), help from the field.

    A boolean also takes `--name` alone (true) and `--no-name` (false); MLproject and plans pass the
    explicit `--name true|false`, which still works.
    """
    hints = typing.get_type_hints(cls)
    defaults = to_params(cls())
    for f in config_fields(cls):
        elem, seq = _base_type(hints[f.name])
        spellings = [f.name, *([f.name.replace("_", "-")] if "_" in f.name else [])]
        what = f"{_describe(f, elem, seq)}; default {defaults[f.name]}"
        if f.metadata.get("unset"):
            what = f"{f.metadata['kind']}, or {f.metadata['unset']} (the default)"
        extra: dict[str, Any] = {"metavar": "VALUE"}
        if elem is bool and not seq:
            what = f"--{f.name} alone: true, --no-{spellings[-1]}: false; default {defaults[f.name]}"
            extra = {"metavar": "true|false", "nargs": "?", "const": "true"}
            parser.add_argument(
                *(f"--no-{s}" for s in spellings),
                dest=f.name,
                action="store_const",
                const="false",
                default=None,
                help=argparse.SUPPRESS,  # named in the flag's own help
            )
        parser.add_argument(
            *(f"--{s}" for s in spellings),
            dest=f.name,
            default=None,
            help=f"{f.metadata['help']} [{what}]".replace("%", "%%"),  # argparse formats help with %
            **extra,
        )


def config_from_args(cls: type[C], args: argparse.Namespace) -> C:
    """The config for the flags the user actually gave (the rest keep their defaults)."""
    given = {f.name: getattr(args, f.name) for f in config_fields(cls) if getattr(args, f.name) is not None}
    return build_config(cls, given)


def to_params(cfg: Any) -> dict[str, str]:
    """Every field as an MLflow param string (lists comma-joined, booleans lower case, an empty value
    as its unset word): the same strings MLproject's defaults are spelled in, so a run started by
    `mlflow run` and one started by the CLI log the same work alike."""
    out = {}
    for f in config_fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, tuple):
            v = ",".join(map(str, v))
        elif isinstance(v, bool):
            v = str(v).lower()
        elif v == "" and f.metadata.get("unset"):
            v = f.metadata["unset"]
        out[f.name] = str(v)
    return out


def is_keyed(f: dataclasses.Field) -> bool:
    """Whether a field is part of the work a run did: the config key's one rule, which
    `devicebench.config.workloads.not_work` reads too."""
    return bool(f.metadata.get("key", True)) and f.name not in NOT_KEYED


def config_key(workload: str, cfg: Any) -> str:
    """A stable hash of the work a run did: every param except device, seed and the `key=False` ones,
    as the run logs them (to_params)."""
    params = to_params(cfg)
    return key_of(workload, {f.name: params[f.name] for f in config_fields(cfg) if is_keyed(f)})


# How a device is fed and set up, not what it computes: a side tuned to `loader=tensor`, NHWC and a
# compiled model trained the same model on the same data as the tutorial's DataLoader did. Keyed apart
# (each changes what a run measures), but one `work_key`, where the report looks for each device at its
# best. Reduced precision is a setting too, and every figure that rests on it says so.
SETTING = ("loader", "num_workers", "channels_last", "compile", "compile_mode", "precision")


def work_key(workload: str, cfg: Any) -> str:
    """`config_key` without the setting fields: runs with equal work keys trained the same model on the
    same data for the same steps, however their data reached the device and the device ran it."""
    params = to_params(cfg)
    keyed = (f.name for f in config_fields(cfg) if is_keyed(f) and f.name not in SETTING)
    return key_of(workload, {name: params[name] for name in keyed})


def key_of(workload: str, work: Mapping[str, Any]) -> str:
    """The hash behind `config_key`, for callers that hold logged params rather than a config (the
    compare benchmark's generated runs): pass only the params that are work (`config.workloads.not_work()`),
    as they were logged."""
    blob = json.dumps({"workload": workload, **work}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
