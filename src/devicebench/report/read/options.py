"""What to read, as the user asked for it: the `Query` record, the `--since` window, comma-separated
lists, "every experiment". MLflow-free, so that `compare` refuses a bad flag before MLflow loads."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from devicebench.errors import UsageError

ALL = "all"  # --experiment all: every active experiment (MLproject's default)
PAGE_SIZE = 500  # a page a request; 1000 is MLflow's REST cap
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float | None:
    """`45s`, `30m`, `12h`, `7d`, `2w` → seconds; None for anything else (the caller names the option)."""
    m = _DURATION.match(text)
    return float(m.group(1)) * _UNIT_S[m.group(2).lower()] if m else None


def means_every(names: Sequence[str]) -> bool:
    """No names, or `all` among them, means every active experiment."""
    return not names or any(n.lower() == ALL for n in names)


@dataclass(frozen=True)
class Query:
    """What to read. Empty or None means "not set"; no experiments (or `all`) means every active one."""

    experiments: tuple[str, ...]
    workloads: tuple[str, ...] = ()
    since: str | None = None
    filter: str | None = None
    host: str | None = None
    page_size: int = PAGE_SIZE

    @property
    def every_experiment(self) -> bool:
        return means_every(self.experiments)


def parse_since(text: str, now: float | None = None) -> int:
    """`7d`, `12h`, `30m`, `45s`, `2w` or an ISO date/time → a start time in ms since the epoch.

    A relative window is what a scheduled job wants (`--since 1d`); an ISO date is what a person
    investigating a change wants. Naive ISO times are taken as UTC so a report is the same on every host.
    """
    now = time.time() if now is None else now
    raw = text.strip()
    window = parse_duration(raw)
    if window is not None:
        start = now - window
    else:
        try:
            when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(
                f"{text!r} is not a time window; use e.g. 7d, 12h, 30m, 2w or an ISO date like 2024-05-01",
                param="since",
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        start = when.timestamp()
    if not start >= 0:  # before 1970 (or not a number): no run is that old, and MLflow cannot search it
        raise UsageError(
            f"{text!r} reaches back before 1970; use a shorter window such as 365d", param="since"
        )
    return int(start * 1000)


def split_list(values: Iterable[str] | str | None) -> tuple[str, ...]:
    """`["a,b", "c"]` or `"a,b"` → `("a", "b", "c")`: options given several times or comma-separated."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        out.extend(p.strip() for p in str(v).split(",") if p.strip())
    return tuple(dict.fromkeys(out))
