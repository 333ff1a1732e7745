"""The one rule that prices a run: what an hour of what it *used* costs.

A speedup alone does not say whether a GPU shape is worth its price; a run that knows its hourly price
can say what its work cost. A side is priced as what it uses, never as "the host" (docs/design.md, pricing
rules): a GPU run at its shape's rate per GPU-hour times the GPUs it used (OCI bills GPU shapes per
GPU-hour, CPU and memory included); a CPU run as the CPU-only shape that would give it its cores and
memory (a reference flex shape, "as if"), or as the host itself on a CPU shape. So the CPU side of a
pair run on a GPU host is no longer charged the GPU host's price, and the price ratio is not always 1.

Where a price comes from, in this order: the run's `price_per_hour` or the host's
DEVICEBENCH_PRICE_PER_HOUR (a number the user gives, used as it is); DEVICEBENCH_PRICE_WHOLE_SHAPE (the
host's whole shape, for an instance that runs nothing else); the table (experiments/prices.yaml, or the
user's contract prices in DEVICEBENCH_PRICES) by the rule above. Without a shape or a table entry a run
gets no price and the reason, never a made-up number. Torch- and mlflow-free: a report reads it too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from devicebench.errors import UsageError
from devicebench.pricing.price_table import (
    DEFAULT_LABEL,
    VCPUS_PER_OCPU,
    Entry,
    PriceTable,
    default_path,
    load_prices,
)
from devicebench.schema import tag
from devicebench.util.fmt import fmt_number, fmt_price

DEFAULT_CPU_SHAPE = "VM.Standard.E5.Flex"  # the reference CPU shape: the current AMD flex shape
MIG_SLICES = 7  # an A100's or H100's compute slices: a MIG profile `Ng.<mem>gb` holds N of them
OVERRIDE = "override"
ILLUSTRATIVE = "illustrative"  # a made-up price (the demo's): shown as such wherever it appears


@dataclass(frozen=True)
class Price:
    """The hourly price a run used, what it was priced as and where it came from: the `price.*` tags.

    `shape` and `units` say what was priced (`VM.GPU.A10.1`, `1 of its 1 GPUs`; `VM.Standard.E5.Flex`,
    `1 OCPU + 2 GB`); `as_if` says the shape is not the host's own (a CPU side on a GPU host, priced as
    the CPU shape that would give it its cores)."""

    usd_per_hour: float
    currency: str = "USD"
    source: str = OVERRIDE  # "override", "illustrative" or "table:<file name>"
    shape: str = ""
    date: str = ""
    reference: str = ""
    units: str = ""
    as_if: bool = False
    per_use: bool = False  # priced as what the run used (its GPUs, its OCPUs): already the whole job's

    def tags(self) -> dict[str, str]:
        out = {
            "usd_per_hour": fmt_price(self.usd_per_hour),
            "currency": self.currency,
            "source": self.source,
            "shape": self.shape,
            "date": self.date,
            "reference": self.reference,
            "units": self.units,
            "as_if": "true" if self.as_if else "",
        }
        return {tag(f"price.{k}"): v for k, v in out.items() if v}


@dataclass(frozen=True)
class Pricing:
    """What a run can be priced by, settled before the run exists so a bad table or shape refuses it at
    once: an override (param or setting), a table with the reference CPU shape and an as-if GPU shape,
    or the reason there is no table."""

    override: float = 0.0
    override_source: str = OVERRIDE  # ILLUSTRATIVE when the run's own price_per_hour is made up
    table: PriceTable | None = None
    missing: str = ""
    cpu_shape: str = DEFAULT_CPU_SHAPE  # what a CPU side off a CPU shape is priced as
    gpu_shape: str = ""  # what a GPU side is priced as where the host's shape is unknown (price_shape)
    whole_shape: bool = False  # the host's whole shape, whatever the run used
    illustrative: bool = False  # the table's list prices stand for another host's: say so everywhere


@dataclass(frozen=True)
class Usage:
    """What a run used: the device kind, the GPUs of its job (a MIG slice its share), the vCPUs it kept
    busy (torch threads plus loader workers, per process, times processes) and the memory it needed."""

    device: str  # cpu, cuda, mps
    gpus: float = 0.0
    vcpus: int = 1
    memory_gb: float = 0.0


def mig_share(profile: str) -> float:
    """A MIG slice's share of its GPU, from its profile (`1g.10gb`: 1 of 7 compute slices); 1 for none."""
    m = re.match(r"^(\d+)g\.", profile or "")
    return min(int(m.group(1)), MIG_SLICES) / MIG_SLICES if m and int(m.group(1)) > 0 else 1.0


def pricing_for(
    price_per_hour: float,
    setting_price: float,
    prices_path: str,
    illustrative: bool = False,
    *,
    cpu_shape: str = "",
    gpu_shape: str = "",
    whole_shape: bool = False,
) -> Pricing:
    """The run's pricing, before the run exists: an override needs no table; otherwise the table is read
    and validated now (DEVICEBENCH_PRICES, else the repository's), with the reference CPU shape and the
    as-if GPU shape in it, so a bad table or a shape it lacks is refused at once.

    `illustrative` marks the price as made up or as another host's (the demo's): the run's own
    `price_per_hour`, or list prices "as if" on `gpu_shape`; it names no price itself, so with neither
    it is refused rather than attached to a real price."""
    if illustrative and not price_per_hour and not gpu_shape:
        raise UsageError(
            "illustrative_price marks a made-up price_per_hour, or list prices as if on price_shape, and "
            "neither was given; give one of them or leave illustrative_price out",
            param="illustrative_price",
        )
    override = price_per_hour or setting_price
    by_hand = Pricing(
        override=override, override_source=ILLUSTRATIVE if price_per_hour and illustrative else OVERRIDE
    )
    if override and not (cpu_shape or gpu_shape):  # a number given: no table to read
        return by_hand
    shapes = {"cpu_shape": cpu_shape or DEFAULT_CPU_SHAPE, "gpu_shape": gpu_shape}
    flags = {"whole_shape": whole_shape, "illustrative": illustrative}
    if prices_path:
        path = Path(prices_path).expanduser()
        if not path.is_file():
            raise UsageError(f"setting DEVICEBENCH_PRICES={prices_path!r}: no such file")
        table = load_prices(path, f"{prices_path} (DEVICEBENCH_PRICES)")
    elif default_path().is_file():
        table = load_prices(default_path(), DEFAULT_LABEL)
    elif gpu_shape or cpu_shape:
        raise UsageError(f"no price table to look {gpu_shape or cpu_shape} up in ({DEFAULT_LABEL} not found)")
    else:
        return Pricing(missing=f"no price table ({DEFAULT_LABEL} not found; set DEVICEBENCH_PRICES)", **flags)
    _check_shapes(table, cpu_shape, gpu_shape)  # the ones the user named; a default may be absent
    if override:  # the shapes were checked; the number given still prices the run
        return by_hand
    return Pricing(table=table, **shapes, **flags)


def _names(entries: Iterable[Entry]) -> str:
    return ", ".join(sorted(e.shape for e in entries)) or "none"


def _check_shapes(table: PriceTable, cpu_shape: str, gpu_shape: str) -> None:
    """A reference CPU shape the user named must be a flex CPU shape of the table, an as-if GPU shape a
    GPU shape of it."""
    cpu = table.entries.get(cpu_shape)
    if cpu_shape and (cpu is None or not cpu.is_flex):
        flex = _names(e for e in table.entries.values() if e.is_flex)
        raise UsageError(
            f"{cpu_shape!r} is not a flex CPU shape in {table.label}; allowed: {flex}", param="cpu_shape"
        )
    if gpu_shape:
        gpu = table.entries.get(gpu_shape)
        if gpu is None or not gpu.is_gpu:
            gpus = _names(e for e in table.entries.values() if e.is_gpu)
            raise UsageError(
                f"{gpu_shape!r} is not a GPU shape in {table.label}; allowed: {gpus}", param="price_shape"
            )


def price_side(pricing: Pricing, host: Mapping[str, str], usage: Usage) -> Price | str:
    """What the run used, priced (docs/design.md, pricing rules), or the one-line reason there is no price
    (the `devicebench.price.none` tag). `host` is the fingerprint (oci.shape, oci.ocpus, oci.memory_gb)."""
    if pricing.override:
        return Price(usd_per_hour=pricing.override, source=pricing.override_source)
    if pricing.whole_shape:
        return resolve_price(pricing, host)
    table, shape = pricing.table, host.get("oci.shape", "")
    if table is None:
        return f"shape {shape}: {pricing.missing}" if shape else f"not on OCI and {pricing.missing}"
    entry = table.entries.get(shape)
    if usage.device == "cuda":
        return _gpu_price(pricing, table, shape, entry, usage)
    if usage.device != "cpu":
        return f"{usage.device} is not sold as an OCI shape; give price_per_hour"
    if entry is not None and not entry.is_gpu:  # on a CPU shape: the host is what it used
        return resolve_price(pricing, host)
    return _cpu_price(pricing, table, shape, usage)


def _table_price(
    e: Entry,
    pricing: Pricing,
    table: PriceTable,
    hourly: float,
    units: str,
    *,
    as_if: bool = False,
    per_use: bool = False,
) -> Price:
    """A table entry's price for `hourly` of it, saying what of it (`units`) and where it came from."""
    return Price(
        usd_per_hour=hourly,
        currency=e.currency,
        source=_source(pricing, table, as_if),
        shape=e.shape,
        date=e.date,
        reference=e.source,
        units=units,
        as_if=as_if,
        per_use=per_use,
    )


def _source(pricing: Pricing, table: PriceTable, as_if: bool) -> str:
    """Where the price came from; a list price standing for a shape the host is not, in a plan that
    says its prices are illustrative (the demo's), is illustrative; the host's own is not."""
    return ILLUSTRATIVE if pricing.illustrative and as_if else f"table:{table.path.name}"


def priced_as(shape: str, units: str, as_if: bool) -> str:
    """What a price is of, in the words every output uses (the run's line, the report's price column
    and verdicts): `VM.GPU.A10.1: 1 of its 1 GPUs`, `as if on VM.Standard.E5.Flex: 1 OCPU + 2 GB`."""
    what = f"{shape}: {units}" if units else shape
    return f"as if on {what}" if as_if else what


def _gpu_price(
    pricing: Pricing, table: PriceTable, shape: str, entry: Entry | None, usage: Usage
) -> Price | str:
    """A GPU run: its shape's rate per GPU-hour times the GPUs its job used; as if on `price_shape`
    where the host's own shape is not a GPU shape of the table (off OCI, or a shape not listed)."""
    as_if = entry is None or not entry.is_gpu
    name = pricing.gpu_shape if as_if else shape
    if not name:
        where = f"shape {shape} is not a GPU shape in {table.label}" if shape else "no OCI shape (not on OCI)"
        return f"{where}, and no price_shape or price_per_hour"
    e = table.entries[name]
    gpus = usage.gpus or 1.0
    units = f"{fmt_number(gpus)} of its {e.gpus} GPU{'s' if e.gpus != 1 else ''}"
    if gpus > (e.gpus or 1):  # a job on several hosts of the shape
        units = f"{fmt_number(gpus)} GPUs at its rate per GPU"
    return _table_price(e, pricing, table, (e.per_gpu or 0.0) * gpus, units, as_if=as_if, per_use=True)


def _cpu_price(pricing: Pricing, table: PriceTable, shape: str, usage: Usage) -> Price | str:
    """A CPU run off a CPU shape (on a GPU host, or off OCI): the reference flex shape that would give
    it its cores and memory, "as if": OCPUs = busy vCPUs / vCPUs per OCPU (rounded up; OCI rents whole
    OCPUs), memory = what it needed, at least the shape's minimum per OCPU (whole GB)."""
    e = table.entries.get(pricing.cpu_shape)
    if e is None or not e.is_flex:
        return (
            f"the reference CPU shape {pricing.cpu_shape} is not in {table.label}; set DEVICEBENCH_CPU_SHAPE"
        )
    ocpus = max(1, math.ceil(usage.vcpus / VCPUS_PER_OCPU[e.arch]))
    gb = max(1, math.ceil(usage.memory_gb), math.ceil(e.min_gb_per_ocpu * ocpus))
    hourly = (e.usd_per_ocpu_hour or 0.0) * ocpus + (e.usd_per_gb_hour or 0.0) * gb
    units = f"{ocpus} OCPU{'s' if ocpus != 1 else ''} + {gb} GB"
    return _table_price(e, pricing, table, hourly, units, as_if=e.shape != shape, per_use=True)


def gpu_to_weigh(pricing: Pricing, usage: Usage) -> dict[str, str]:
    """For a CPU run where an as-if GPU shape was named (price_shape; the demo's): that shape and its
    rate per GPU-hour as tags, so that a report without a GPU side yet can say how much faster a GPU
    must be to cost less (the break-even: its price over the CPU's)."""
    entry = pricing.table.entries.get(pricing.gpu_shape) if pricing.table and pricing.gpu_shape else None
    if usage.device != "cpu" or entry is None or entry.per_gpu is None or pricing.override:
        return {}
    return {tag("price.gpu_shape"): entry.shape, tag("price.gpu_usd_per_hour"): fmt_price(entry.per_gpu)}


def resolve_price(pricing: Pricing, host: Mapping[str, str]) -> Price | str:
    """The host's whole shape, priced (a CPU shape a CPU run ran on, or any shape with
    DEVICEBENCH_PRICE_WHOLE_SHAPE), or the one-line reason there is no price."""
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
    ocpus, memory_gb = _positive_number(host.get("oci.ocpus")), _positive_number(host.get("oci.memory_gb"))
    hourly = entry.hourly(ocpus, memory_gb)
    if hourly is None:
        return f"shape {shape} is priced per OCPU and GB, but the OCI metadata gave no shapeConfig"
    units = f"the whole shape ({entry.gpus} GPUs)" if entry.is_gpu else "the whole shape"
    if entry.is_flex:
        units = f"{fmt_number(ocpus or 0)} OCPUs + {fmt_number(memory_gb or 0)} GB"
    return _table_price(entry, pricing, table, hourly, units)


def _positive_number(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None
