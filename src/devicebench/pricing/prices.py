"""The price table and the one rule that prices a host: what an hour of this machine costs.

A speedup alone does not say whether a GPU shape is worth its price; a run that knows its hourly price
can say what its work cost. The price comes from, in this order: the run's `price_per_hour`, the host's
DEVICEBENCH_PRICE_PER_HOUR, or the table (experiments/prices.yaml, or the user's own contract prices in
DEVICEBENCH_PRICES) looked up by the OCI shape the host fingerprint read. A host with none of them gets
no price and the reason, never a made-up number. Torch- and mlflow-free: a report may read the table too.
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
from devicebench.schema import tag
from devicebench.util.yamlfile import load_capped

# A price table is a page of YAML; past this it is not one (a plan's cap is 1 MiB, a table needs far less).
MAX_PRICES_BYTES = 256 * 1024
VERSION = 1
TOP_KEYS = ("version", "description", "shapes")
FIXED = "usd_per_hour"
FLEX = ("usd_per_ocpu_hour", "usd_per_gb_hour")
META = ("currency", "date", "source")
ENTRY_KEYS = (FIXED, *FLEX, *META, "note")
SHAPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
CURRENCY_RE = re.compile(r"[A-Z]{3}")
OVERRIDE = "override"
ILLUSTRATIVE = "illustrative"  # a made-up price (the demo's): shown as such wherever it appears
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
    """One shape's list price: per hour for a fixed shape, per OCPU-hour plus per GB-hour for a flex one."""

    shape: str
    currency: str
    date: str
    source: str
    usd_per_hour: float | None = None
    usd_per_ocpu_hour: float | None = None
    usd_per_gb_hour: float | None = None

    def hourly(self, ocpus: float | None, memory_gb: float | None) -> float | None:
        """The hourly price; a flex shape needs the instance's OCPUs and memory (None without them)."""
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


@dataclass(frozen=True)
class Price:
    """The hourly price a run used and where it came from: the `devicebench.price.*` tags."""

    usd_per_hour: float
    currency: str = "USD"
    source: str = OVERRIDE  # "override", "illustrative" or "table:<file name>"
    shape: str = ""
    date: str = ""
    reference: str = ""

    def tags(self) -> dict[str, str]:
        out = {
            "usd_per_hour": fmt_price(self.usd_per_hour),
            "currency": self.currency,
            "source": self.source,
            "shape": self.shape,
            "date": self.date,
            "reference": self.reference,
        }
        return {tag(f"price.{k}"): v for k, v in out.items() if v}


@dataclass(frozen=True)
class Pricing:
    """What a run can be priced by, settled before the run exists so a bad table refuses it at once:
    an override (param or setting), a table, or the reason there is no table."""

    override: float = 0.0
    override_source: str = OVERRIDE  # ILLUSTRATIVE when the run's own price_per_hour is made up
    table: PriceTable | None = None
    missing: str = ""


def fmt_price(value: float) -> str:
    """`1.275`, `80`, `0.074`: ten significant digits hide float noise (0.07400000000000001)."""
    return f"{value:.10g}"


# ------------------------------------------------------------------------------------------ loading


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


def _err(label: str, where: str, message: str) -> UsageError:
    return UsageError(f"price table {label}: {where}: {message}")


def _read(path: Path, label: str) -> Any:
    return load_capped(
        path,
        MAX_PRICES_BYTES,
        "a price table",
        _NoAliasLoader,
        _Refused,
        lambda where, msg: _err(label, where, msg),
    )


def load_prices(path: str | Path, label: str = "") -> PriceTable:
    """Read and validate a whole table; every problem is one line naming the file and the key."""
    path = Path(path)
    label = label or str(path)
    doc = _read(path, label)
    if not isinstance(doc, dict):
        raise _err(label, "file", f"must be a mapping with keys {', '.join(TOP_KEYS)}")
    _no_unknown(doc, TOP_KEYS, label, "")
    if doc.get("version") != VERSION or isinstance(doc.get("version"), bool):
        raise _err(label, "version", f"{doc.get('version')!r} is not a known version; expected {VERSION}")
    shapes = doc.get("shapes")
    if not isinstance(shapes, dict):
        raise _err(label, "shapes", "must be a mapping of OCI shape name -> price entry")
    entries = {}
    for shape, raw in shapes.items():
        if not isinstance(shape, str) or not SHAPE_RE.fullmatch(shape):
            raise _err(label, f"shapes[{shape!r}]", "is not a shape name (letters, digits, '.', '_', '-')")
        entries[shape] = _entry(shape, raw, label)
    return PriceTable(path=path, label=label, entries=entries)


def _no_unknown(doc: dict, known: tuple[str, ...], label: str, where: str) -> None:
    unknown = sorted(str(k) for k in doc if k not in known)
    if unknown:
        raise _err(label, f"{where}{unknown[0]}", f"unknown key; allowed: {', '.join(known)}")


def _entry(shape: str, raw: Any, label: str) -> Entry:
    where = f"shapes[{shape}]"
    if not isinstance(raw, dict):
        raise _err(
            label, where, f"must be a mapping with {FIXED} (or {' and '.join(FLEX)}), {', '.join(META)}"
        )
    _no_unknown(raw, ENTRY_KEYS, label, f"{where}.")
    for key in META:
        if raw.get(key) in (None, ""):
            raise _err(label, f"{where}.{key}", "missing; every entry says its currency, date and source")
    if FIXED in raw and any(k in raw for k in FLEX):
        raise _err(
            label,
            f"{where}.{FIXED}",
            f"a shape has a fixed price or a flex price ({', '.join(FLEX)}), not both",
        )
    if FIXED not in raw:
        for key in FLEX:
            if key not in raw:
                raise _err(
                    label, f"{where}.{key}", f"missing; a shape needs {FIXED}, or {' and '.join(FLEX)}"
                )
    prices = {
        k: _price(raw[k], label, f"{where}.{k}", zero_ok=k == FLEX[1]) for k in (FIXED, *FLEX) if k in raw
    }
    currency = str(raw["currency"])
    if not CURRENCY_RE.fullmatch(currency):
        raise _err(label, f"{where}.currency", f"{currency!r} is not a currency code such as USD")
    return Entry(
        shape=shape,
        currency=currency,
        date=_date(raw["date"], label, f"{where}.date"),
        source=_text(raw["source"], label, f"{where}.source"),
        **prices,
    )


def _price(value: Any, label: str, where: str, *, zero_ok: bool) -> float:
    """A price is a plain finite number: "2.0" in quotes, true, -1 and .inf are refused by name."""
    floor = ">= 0" if zero_ok else "> 0"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _err(label, where, f"{value!r} is not a number; expected a price per hour {floor}")
    if value < 0 or (value == 0 and not zero_ok):
        raise _err(label, where, f"{value!r} is out of range; expected a price per hour {floor}")
    return float(value)


def _date(value: Any, label: str, where: str) -> str:
    if isinstance(value, datetime.date):  # YAML reads 2026-11-23 as a date
        return value.isoformat()[:10]
    try:
        return datetime.date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise _err(
            label, where, f"{value!r} is not a date; expected YYYY-MM-DD (the day it was read)"
        ) from None


def _text(value: Any, label: str, where: str) -> str:
    text = " ".join(str(value).split())
    if len(text) > 500:
        raise _err(label, where, f"{len(text):,} characters; at most 500")
    return text


# ------------------------------------------------------------------------------------------ resolving


def pricing_for(
    price_per_hour: float, setting_price: float, prices_path: str, illustrative: bool = False
) -> Pricing:
    """The run's pricing, before the run exists: an override needs no table; otherwise the table is read
    and validated now (DEVICEBENCH_PRICES, else the repository's), so a bad one is refused at once.

    `illustrative` marks the run's own `price_per_hour` as made up (the demo's); it names no price
    itself, so without one it is refused rather than attached to a real price."""
    if illustrative and not price_per_hour:
        raise UsageError(
            "illustrative_price marks a made-up price_per_hour, and none was given; give price_per_hour "
            "or leave illustrative_price out",
            param="illustrative_price",
        )
    if price_per_hour:
        return Pricing(override=price_per_hour, override_source=ILLUSTRATIVE if illustrative else OVERRIDE)
    if setting_price:
        return Pricing(override=setting_price)
    if prices_path:
        path = Path(prices_path).expanduser()
        if not path.is_file():
            raise UsageError(f"setting DEVICEBENCH_PRICES={prices_path!r}: no such file")
        return Pricing(table=load_prices(path, f"{prices_path} (DEVICEBENCH_PRICES)"))
    path = default_path()
    if not path.is_file():
        return Pricing(missing=f"no price table ({DEFAULT_LABEL} not found; set DEVICEBENCH_PRICES)")
    return Pricing(table=load_prices(path, DEFAULT_LABEL))


def resolve_price(pricing: Pricing, host: Mapping[str, str]) -> Price | str:
    """The Price for this host, or the one-line reason there is none (the `devicebench.price.none` tag).

    `host` is the fingerprint (oci.shape, oci.ocpus, oci.memory_gb from the metadata answer it read)."""
    if pricing.override:
        return Price(usd_per_hour=pricing.override, source=pricing.override_source)
    shape = host.get("oci.shape", "")
    if not shape:
        return "no OCI shape (not on OCI) and no price_per_hour"
    if pricing.table is None:
        return f"shape {shape}: {pricing.missing}"
    table = pricing.table
    entry = table.entries.get(shape)
    if entry is None:
        return f"shape {shape} is not in {table.label}"
    hourly = entry.hourly(_number(host.get("oci.ocpus")), _number(host.get("oci.memory_gb")))
    if hourly is None:
        return f"shape {shape} is priced per OCPU and GB, but the OCI metadata gave no shapeConfig"
    return Price(
        usd_per_hour=hourly,
        currency=entry.currency,
        source=f"table:{table.path.name}",
        shape=shape,
        date=entry.date,
        reference=entry.source,
    )


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None
