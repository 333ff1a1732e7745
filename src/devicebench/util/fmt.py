"""How devicebench spells a figure: times, rates, speedups, shares, money, bytes, quality.

One function per spelling, and every table, verdict, chart, run line and report line calls it, so a
figure reads the same wherever it appears (a report once said "time per unit 15.60 s" in one table and
a money amount with other rounding rules in the next). A spelling of a figure that may be missing (a
time, a ratio, a share, money, a stat) takes None or a NaN and gives the dash; the rest spell a figure
that is there. Torch- and mlflow-free.
"""

from __future__ import annotations

import math

from devicebench.util.stats import Stat

NONE = "–"  # what a cell shows when there is nothing to show
SEP = " · "  # between the parts of one name or line: a run name, a side's label, a run's answer
PROG = "devicebench"  # the command's name, in front of what it says on stderr


def _missing(x: float | None) -> bool:
    return x is None or not math.isfinite(x)


# --------------------------------------------------------------------------------------------- time


def fmt_s(x: float | None) -> str:
    """`135 s`, `2.50 s`, `12.30 ms`, `85.0 µs`."""
    if _missing(x):
        return NONE
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} µs"


def fmt_stat_s(s: Stat | None) -> str:
    """A time with its repeats' range: `2.50 s (2.40 s–2.60 s, n=3)`."""
    if s is None:
        return NONE
    if s.n == 1:
        return fmt_s(s.median)
    return f"{fmt_s(s.median)} ({fmt_s(s.lo)}–{fmt_s(s.hi)}, n={s.n})"


def fmt_duration(seconds: float) -> str:
    """A progress line's duration: `45 s`, `1.5 min` from 90 s on."""
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def fmt_sig4(x: float) -> str:
    """Four significant digits, no unit: a regression line's figures, exact enough to paste into a ticket."""
    return f"{x:.4g}"


# --------------------------------------------------------------------------------------------- ratios


def fmt_x(x: float | None) -> str:
    """A speedup or a ratio: two decimals where 1.05× and 1.5× differ, fewer once it is large; a dash
    where there is none (no common time, or a zero that made it infinite)."""
    if _missing(x):
        return NONE
    if x < 10:
        return f"{x:.2f}×"
    return f"{x:.1f}×" if x < 100 else f"{x:.0f}×"


def fmt_efficiency(x: float | None) -> str:
    """A scaling efficiency (speedup / ideal speedup) as a plain fraction: 1.00 is perfect scaling."""
    return NONE if _missing(x) else f"{x:.2f}"


def fmt_sig3(x: float) -> str:
    """A bare figure in three significant digits: a metric's value in a run's description."""
    return f"{x:.3g}"


# --------------------------------------------------------------------------------------------- shares


def fmt_share(x: float | Stat | None) -> str:
    """A share of time in whole percent (`83%`): how long a side waited for data, or a threshold."""
    if isinstance(x, Stat):
        x = x.median
    return NONE if _missing(x) else f"{x:.0%}"


def fmt_change(x: float) -> str:
    """A relative change in whole percent with its sign: `+30%`."""
    return f"{x:+.0%}"


def fmt_percent(x: float | None) -> str:
    """A share as a percentage that never rounds a real figure to zero: the tutorial Net on an H100 uses
    0.00076 % of its TF32 peak, which two decimals would print as 0.00 %. Two significant digits below
    0.1 %, in fixed point however small."""
    if _missing(x):
        return NONE
    if x == 0 or abs(x) >= 1e-3:
        return f"{x:.2%}"
    digits = 1 - math.floor(math.log10(abs(x) * 100))  # two significant digits
    return f"{x * 100:.{digits}f}%"


# --------------------------------------------------------------------------------------------- rates


def fmt_count(x: float) -> str:
    """A rate or an amount: `3,542`, `42.3`."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def fmt_rate(s: Stat | None) -> str:
    """A throughput (samples per second) with the repeats' range, like `fmt_stat_s` for times."""
    if s is None:
        return NONE
    if s.n == 1:
        return fmt_count(s.median)
    return f"{fmt_count(s.median)} ({fmt_count(s.lo)}–{fmt_count(s.hi)}, n={s.n})"


def fmt_number(x: float) -> str:
    """A count that may be a share: `8`, `0.14` (GPUs of a MIG slice, OCPUs)."""
    return f"{x:g}" if x == int(x) else f"{x:.2f}"


def fmt_gflops(x: float) -> str:
    """GFLOP/s in a table of matmul points: one decimal."""
    return f"{x:.1f}"


def fmt_amount(x: float | None) -> str:
    """A count of work per money (epochs or GFLOP per dollar): three significant digits, thousands apart."""
    if _missing(x):
        return NONE
    return f"{x:,.0f}" if x >= 1000 else f"{x:.3g}"


# --------------------------------------------------------------------------------------------- money


def fmt_money(x: float | None, cur: str = "USD") -> str:
    """`$0.00333`, `$1.28`, `12.50 EUR`: cents from 1 up, three significant digits below (never an
    exponent: `$0.0000667` reads as money, `6.67e-05` does not), whole units from 1000."""
    if _missing(x):
        return NONE
    if x >= 1000:
        text = f"{x:,.0f}"
    elif x >= 1 or x <= 0:
        text = f"{x:.2f}"
    else:
        text = f"{x:.{2 - math.floor(math.log10(x))}f}"
    return f"${text}" if cur in ("USD", "") else f"{text} {cur}"


def fmt_price(value: float) -> str:
    """A price as a table or a tag holds it: `1.275`, `80`, `0.074` (ten significant digits hide float
    noise such as 0.07400000000000001)."""
    return f"{value:.10g}"


# --------------------------------------------------------------------------------------------- the rest


def fmt_bytes(s: Stat | None) -> str:
    """`2.3 GiB`: a side's median peak memory."""
    if s is None:
        return NONE
    x = s.median
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024:
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} TiB"


def fmt_rel_error(x: float) -> str:
    """A relative error, which spans decades: `1.0e-07`."""
    return f"{x:.1e}"


def fmt_quality(x: float) -> str:
    """An accuracy or mIoU: three decimals."""
    return f"{x:.3f}"


def fmt_q(s: Stat | None) -> str:
    """A quality figure with its repeats' range: `0.902 (0.899–0.905)`."""
    if s is None:
        return NONE
    if s.n == 1:
        return fmt_quality(s.median)
    return f"{fmt_quality(s.median)} ({fmt_quality(s.lo)}–{fmt_quality(s.hi)})"


def fmt_setting(
    threads: int | str | None,
    in_memory: bool,
    workers: int | str,
    nhwc: bool = False,
    compiled: str | None = None,
    reduced: str | None = None,
) -> str:
    """How a device was set up to run a config, the one spelling the tuning's trials and the report's
    verdicts share: `2 threads, DataLoader, 1 worker, NHWC, compiled with CUDA graphs, bf16 autocast
    (reduced precision)`. `threads` None: a GPU side's, not said; `compiled`: torch.compile's mode, None
    when eager; `reduced`: the autocast dtype of a reduced precision, None at full precision."""
    words = [] if threads is None else [f"{threads} thread{'' if str(threads) == '1' else 's'}"]
    feed = f"DataLoader, {workers} worker{'' if str(workers) == '1' else 's'}"
    words.append("data in memory" if in_memory else feed)
    if nhwc:
        words.append("NHWC")
    if compiled is not None:
        words.append("compiled" + (" with CUDA graphs" if compiled == "reduce-overhead" else ""))
    if reduced:
        words.append(f"{reduced} autocast (reduced precision)")
    return ", ".join(words)
