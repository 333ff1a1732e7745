"""Small statistics shared by the timer (which imports torch) and the report (which must not): a
quantile, and the median-with-spread every reported figure is."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def is_figure(x: object) -> bool:
    """Whether `x` is a number a verdict can read: a finite int or float (a metric a run did not log
    comes back as None, a failed one as NaN)."""
    return isinstance(x, int | float) and math.isfinite(x)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default method)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Stat:
    """Median of repeats with its spread: p10–p90 from 5 repeats on, min–max below (p10 of 3 is noise).

    Every figure the report shows is one of these, because a single timing of a GPU is a coin toss."""

    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Stat | None:
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
