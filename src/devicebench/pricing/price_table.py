"""The price table: its YAML format (experiments/prices.yaml, or the user's contract prices in
DEVICEBENCH_PRICES), read and checked whole, each problem one line naming the file and the key. What a
run's price is, from the table, is `pricing.prices`.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devicebench.errors import UsageError
from devicebench.util.fmt import fmt_count
from devicebench.util.yamlfile import load_capped

# A price table is a page of YAML; past this it is not one (a plan's cap is 1 MiB, a table needs far less).
MAX_PRICES_BYTES = 256 * 1024
VERSION = 1
TOP_KEYS = ("version", "description", "shapes")
FIXED = "usd_per_hour"
PER_GPU = "usd_per_gpu_hour"
FLEX = ("usd_per_ocpu_hour", "usd_per_gb_hour")
META = ("currency", "date", "source")
GPU_KEYS = ("gpus",)
CPU_KEYS = ("arch", "min_gb_per_ocpu")
ENTRY_KEYS = (FIXED, PER_GPU, *FLEX, *META, *GPU_KEYS, *CPU_KEYS, "note")
GPU_SHAPE_RE = re.compile(r"(^|\.)GPU")  # OCI names its GPU shapes so: VM.GPU.A10.1, BM.GPU4.8
MAX_GPUS = 16  # no OCI shape has more than 8 GPUs; a count past this is a typo
VCPUS_PER_OCPU = {"x86": 2, "arm": 1}  # an x86 OCPU is a core with two hardware threads
SHAPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
CURRENCY_RE = re.compile(r"[A-Z]{3}")
DEFAULT_LABEL = "experiments/prices.yaml"


def default_path() -> Path:
    """The repository's own table, beside the plans; when the package is installed elsewhere (the
    trainer image pip-installs it and copies experiments/ to its working directory), the working
    directory's experiments/prices.yaml."""
    beside_source = Path(__file__).resolve().parents[3] / DEFAULT_LABEL  # src/devicebench/pricing/..
    in_cwd = Path.cwd() / DEFAULT_LABEL
    return in_cwd if not beside_source.is_file() and in_cwd.is_file() else beside_source


@dataclass(frozen=True)
class Entry:
    """One shape's list price: per GPU-hour for a GPU shape (with its GPU count), per OCPU-hour plus per
    GB-hour for a flex CPU shape (with its architecture and minimum memory), or per hour."""

    shape: str
    currency: str
    date: str
    source: str
    usd_per_hour: float | None = None
    usd_per_gpu_hour: float | None = None
    gpus: int | None = None
    usd_per_ocpu_hour: float | None = None
    usd_per_gb_hour: float | None = None
    arch: str = "x86"
    min_gb_per_ocpu: float = 1.0

    @property
    def is_gpu(self) -> bool:
        return self.gpus is not None

    @property
    def is_flex(self) -> bool:
        return self.usd_per_ocpu_hour is not None

    @property
    def per_gpu(self) -> float | None:
        """The rate of one of its GPUs for an hour (what OCI bills a GPU shape by)."""
        if not self.gpus:
            return None
        return (
            self.usd_per_gpu_hour
            if self.usd_per_gpu_hour is not None
            else (self.usd_per_hour or 0.0) / self.gpus
        )

    def hourly(self, ocpus: float | None, memory_gb: float | None) -> float | None:
        """The whole shape's hourly price; a flex shape needs the instance's OCPUs and memory (None
        without them)."""
        if self.per_gpu is not None and self.gpus:
            return self.per_gpu * self.gpus
        if self.usd_per_hour is not None:
            return self.usd_per_hour
        if ocpus is None or memory_gb is None:
            return None
        return float(self.usd_per_ocpu_hour or 0.0) * ocpus + float(self.usd_per_gb_hour or 0.0) * memory_gb


@dataclass(frozen=True)
class PriceTable:
    path: Path
    label: str  # how messages and the `no price` reason name the file
    entries: Mapping[str, Entry]


class _Refused(yaml.YAMLError):
    """An anchor or alias: a price table has no use for them, and refusing them bounds the load."""


class _NoAliasLoader(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise _Refused(
                f"line {mark.line + 1}: aliases are not allowed in a price table; write each entry out"
            )
        return super().compose_node(parent, index)


def _table_error(label: str, where: str, message: str) -> UsageError:
    return UsageError(f"price table {label}: {where}: {message}")


def _read_table(path: Path, label: str) -> Any:
    return load_capped(
        path,
        MAX_PRICES_BYTES,
        "a price table",
        _NoAliasLoader,
        _Refused,
        lambda where, msg: _table_error(label, where, msg),
    )


def load_prices(path: str | Path, label: str = "") -> PriceTable:
    """Read and validate a whole table; every problem is one line naming the file and the key."""
    path = Path(path)
    label = label or str(path)
    doc = _read_table(path, label)
    if not isinstance(doc, dict):
        raise _table_error(label, "file", f"must be a mapping with keys {', '.join(TOP_KEYS)}")
    _no_unknown(doc, TOP_KEYS, label, "")
    if doc.get("version") != VERSION or isinstance(doc.get("version"), bool):
        raise _table_error(
            label, "version", f"{doc.get('version')!r} is not a known version; expected {VERSION}"
        )
    shapes = doc.get("shapes")
    if not isinstance(shapes, dict):
        raise _table_error(label, "shapes", "must be a mapping of OCI shape name -> price entry")
    entries = {}
    for shape, raw in shapes.items():
        if not isinstance(shape, str) or not SHAPE_RE.fullmatch(shape):
            raise _table_error(
                label, f"shapes[{shape!r}]", "is not a shape name (letters, digits, '.', '_', '-')"
            )
        entries[shape] = _entry(shape, raw, label)
    return PriceTable(path=path, label=label, entries=entries)


def _no_unknown(doc: dict, known: tuple[str, ...], label: str, where: str) -> None:
    unknown = sorted(str(k) for k in doc if k not in known)
    if unknown:
        raise _table_error(label, f"{where}{unknown[0]}", f"unknown key; allowed: {', '.join(known)}")


def _entry(shape: str, raw: Any, label: str) -> Entry:
    where = f"shapes[{shape}]"
    if not isinstance(raw, dict):
        raise _table_error(
            label,
            where,
            f"must be a mapping with {FIXED}, {PER_GPU} (and gpus) or {' and '.join(FLEX)}, "
            f"and {', '.join(META)}",
        )
    _no_unknown(raw, ENTRY_KEYS, label, f"{where}.")
    for key in META:
        if raw.get(key) in (None, ""):
            raise _table_error(
                label, f"{where}.{key}", "missing; every entry says its currency, date and source"
            )
    _one_kind_of_price(raw, label, where)
    prices = {
        k: _price_value(raw[k], label, f"{where}.{k}", zero_ok=k == FLEX[1])
        for k in (FIXED, PER_GPU, *FLEX)
        if k in raw
    }
    currency = str(raw["currency"])
    if not CURRENCY_RE.fullmatch(currency):
        raise _table_error(label, f"{where}.currency", f"{currency!r} is not a currency code such as USD")
    return Entry(
        shape=shape,
        currency=currency,
        date=_date(raw["date"], label, f"{where}.date"),
        source=_source_text(raw["source"], label, f"{where}.source"),
        **prices,
        **_gpu_fields(shape, raw, label, where),
        **_cpu_fields(raw, label, where),
    )


def _one_kind_of_price(raw: dict, label: str, where: str) -> None:
    """A shape has one price: per hour, per GPU-hour, or per OCPU-hour and GB-hour (a flex shape)."""
    kinds = [k for k in (FIXED, PER_GPU) if k in raw] + [k for k in FLEX[:1] if any(f in raw for f in FLEX)]
    if len(kinds) > 1:
        raise _table_error(
            label,
            f"{where}.{kinds[1]}",
            f"a shape has one price: {FIXED}, {PER_GPU}, or {' and '.join(FLEX)}",
        )
    if not kinds or (kinds == [FLEX[0]] and not all(k in raw for k in FLEX)):
        missing = next((k for k in FLEX if k not in raw), FIXED) if kinds else FIXED
        raise _table_error(
            label, f"{where}.{missing}", f"missing; a shape needs {FIXED}, {PER_GPU}, or {' and '.join(FLEX)}"
        )


def _gpu_fields(shape: str, raw: dict, label: str, where: str) -> dict[str, int]:
    """`gpus`: required of a GPU shape (OCI bills it per GPU-hour, and a run is charged the GPUs it
    used), refused on a flex CPU shape, a whole count from 1 to MAX_GPUS."""
    gpu_named = bool(GPU_SHAPE_RE.search(shape))
    if "gpus" not in raw:
        if gpu_named or PER_GPU in raw:
            raise _table_error(
                label,
                f"{where}.gpus",
                "missing; a GPU shape says how many GPUs it has (a run is charged per GPU it used)",
            )
        return {}
    n = raw["gpus"]
    if any(k in raw for k in FLEX):
        raise _table_error(label, f"{where}.gpus", "a flex CPU shape has no GPUs; leave gpus out")
    if isinstance(n, bool) or not isinstance(n, int):
        raise _table_error(label, f"{where}.gpus", f"{n!r} is not a whole number of GPUs (1-{MAX_GPUS})")
    if not 1 <= n <= MAX_GPUS:
        raise _table_error(label, f"{where}.gpus", f"{n!r} is out of range; a shape has 1-{MAX_GPUS} GPUs")
    return {"gpus": n}


def _cpu_fields(raw: dict, label: str, where: str) -> dict[str, Any]:
    """A flex CPU shape's `arch` (x86: 2 vCPUs per OCPU; arm: 1) and `min_gb_per_ocpu` (the least
    memory OCI lets an instance have per OCPU, 1 GB on the current flex shapes)."""
    out: dict[str, Any] = {}
    for key in CPU_KEYS:
        if key in raw and not any(k in raw for k in FLEX):
            raise _table_error(label, f"{where}.{key}", "only a flex CPU shape (usd_per_ocpu_hour) takes it")
    if "arch" in raw:
        if raw["arch"] not in VCPUS_PER_OCPU:
            raise _table_error(label, f"{where}.arch", f"{raw['arch']!r} is not allowed; allowed: x86, arm")
        out["arch"] = raw["arch"]
    if "min_gb_per_ocpu" in raw:
        value = raw["min_gb_per_ocpu"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 64:
            raise _table_error(
                label, f"{where}.min_gb_per_ocpu", f"{value!r} is not a number of GB from 0 to 64"
            )
        out["min_gb_per_ocpu"] = float(value)
    return out


def _price_value(value: Any, label: str, where: str, *, zero_ok: bool) -> float:
    """A price is a plain finite number: "2.0" in quotes, true, -1 and .inf are refused by name."""
    floor = ">= 0" if zero_ok else "> 0"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**15:
        # math.isfinite of a 400-digit integer raised OverflowError, which no check named
        digits = len(str(abs(value)))
        raise _table_error(
            label,
            where,
            f"a number of {fmt_count(digits)} digits is not a price; expected a price per hour {floor}",
        )
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _table_error(label, where, f"{value!r} is not a number; expected a price per hour {floor}")
    if value < 0 or (value == 0 and not zero_ok):
        raise _table_error(label, where, f"{value!r} is out of range; expected a price per hour {floor}")
    return float(value)


def _date(value: Any, label: str, where: str) -> str:
    if isinstance(value, datetime.date):  # YAML reads an unquoted YYYY-MM-DD as a date
        return value.isoformat()[:10]
    try:
        return datetime.date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise _table_error(
            label, where, f"{value!r} is not a date; expected YYYY-MM-DD (the day it was read)"
        ) from None


def _source_text(value: Any, label: str, where: str) -> str:
    text = " ".join(str(value).split())
    if len(text) > 500:
        raise _table_error(label, where, f"{len(text):,} characters; at most 500")
    return text
