"""The rules about money: is the faster side worth its price, where to serve a model (a pair's, and
each served model's cheapest device within its p99 promise), and, before any GPU run, how much faster
a GPU must be to cost less. Every verdict bought with a made-up price says so
(MADE_UP). Small pure functions (pair_rules orders them; judgement calls `break_even`).
"""

from __future__ import annotations

from devicebench.pricing.prices import priced_as
from devicebench.report.model.cost import side_cost
from devicebench.report.model.pairs import Pair
from devicebench.report.model.serving import ServingChoice
from devicebench.report.model.sides import Side
from devicebench.schema import SERVE_BATCH, SERVE_MAX_WAIT, SERVE_P99, SERVE_RATE, SERVING, TRAINING
from devicebench.util.fmt import fmt_count, fmt_money, fmt_s, fmt_x

MADE_UP = " (illustrative prices, not real ones)"  # after every verdict bought with a made-up price


def price_performance(pair: Pair) -> str | None:
    """Is the faster side worth its price (below); a verdict bought with a made-up price says so. A
    served model is answered by `serving`: its cost is per prediction at full throughput, not per the
    request time its headline speedup compares."""
    text = _where_to_serve(pair) if pair.kind is SERVING else _worth_its_price(pair)
    if text and (pair.base.price.illustrative or pair.other.price.illustrative):
        return text + MADE_UP
    return text


def price_said(side: Side) -> str:
    """What an hour of the side cost and what it was priced as: `VM.GPU.A10.1: 1 of its 1 GPUs, $2.00/h`,
    `as if on VM.Standard.E5.Flex: 1 OCPU + 2 GB, $0.0340/h`, `$1.00/h set by hand`."""
    p = side.price
    hourly = f"{fmt_money(p.hourly.median if p.hourly else None, p.currency)}/h"
    if not p.shape:
        return f"{hourly} set by hand"
    return f"{priced_as(p.shape, p.units, p.as_if)}, {hourly}"


def _verb(pair: Pair) -> str:
    kind = pair.kind or TRAINING
    return "runs this" if kind is TRAINING and not pair.is_cpu_gpu else kind.does


def _p99(side: Side) -> str:
    s = side.metrics.get(SERVE_P99)
    return f"p99 {fmt_s(s.median if s else None)}"


def _where_to_serve(pair: Pair) -> str | None:
    """Where to serve this model: the side that costs less per million predictions (each at its best
    batch size, kept busy), and what a caller waits on each (p99 of a batch-1 request), e.g. "serve on
    the CPU: p99 3.80 ms against 1.20 ms on the A10, at 0.10× its cost per million predictions"."""
    base, other = pair.base, pair.other
    rate = pair.speedups.get("serve_throughput")
    if rate is None:
        return None
    name = {id(s): s.device_name or s.device for s in (base, other)}
    pace = f"{name[id(other)]} serves {fmt_x(rate)} the predictions a second of {name[id(base)]}"
    ratio = pair.cost_ratio
    if ratio is None or ratio == 1.0:
        return f"{pace}; {_p99(other)} against {_p99(base)}"
    cheap, dear = (other, base) if ratio < 1 else (base, other)
    share = ratio if ratio < 1 else 1.0 / ratio
    return (
        f"serve on the {'CPU' if cheap.is_cpu else name[id(cheap)]}: {_p99(cheap)} against "
        f"{_p99(dear)} on {name[id(dear)]}, at {fmt_x(share)} its cost per million predictions ({pace})"
    )


def break_even(side: Side) -> str | None:
    """A priced CPU side with no GPU side yet, where its runs named a GPU shape to weigh it against
    (price_shape; the demo's): how much faster that GPU must be to cost less for the same work, its
    hourly price over the CPU's. The price answer a CPU-only host can give before any GPU run."""
    p = side.price
    if not side.is_cpu or p.hourly is None or p.hourly.median <= 0 or p.gpu_hourly is None:
        return None
    verb = (side.kind or TRAINING).to_do
    line = (
        f"break-even: a GPU of {p.gpu_shape} ({fmt_money(p.gpu_hourly, p.currency)}/h) must {verb} "
        f"{fmt_x(p.gpu_hourly / p.hourly.median)} faster than this CPU ({price_said(side)}) to cost less"
    )
    return line + MADE_UP if p.illustrative else line


def _worth_its_price(pair: Pair) -> str | None:
    """The user's first question, answered with both sides' prices: is the faster side worth its price?
    Only where both sides' runs carry a price: the cost of the same work against the hourly price ratio,
    which is the speedup at which the two cost the same (the break-even). Where a CPU side faster than
    the pair's own was measured, the cost and the speedup are both taken against that best CPU."""
    speedup, cost = pair.cost_speedup, pair.cost
    if speedup is None or cost is None or cost.cost_ratio is None or cost.price_ratio is None:
        return None
    ratio, base, other = cost.cost_ratio, pair.cost_base, pair.other
    against = base.device_name or base.device
    if base.is_cpu:
        against = "this CPU at its best" if base is not pair.base else "this CPU"
    pace = f"{fmt_x(speedup)} {'faster' if speedup >= 1 else 'as fast'}"
    if ratio == 1.0:
        money, answer = "the same", "no cheaper and no dearer"
    elif ratio < 1.0:
        money, answer = f"{fmt_x(1.0 / ratio)} less", "worth its price"
    else:
        money = f"{fmt_x(ratio)} more"
        answer = "worth it only when time matters more than money" if speedup > 1 else "not worth its price"
    return (
        f"{other.device_name or other.device} ({price_said(other)}) {_verb(pair)} {pace} than {against} "
        f"({price_said(base)}) and costs {money} per {cost.unit}: {answer} (break-even at "
        f"{fmt_x(cost.price_ratio)} faster)"
    )


def batching_said(side: Side) -> str:
    """`120/s at batch up to 4, waiting up to 5.00 ms`: the highest QPS a side held within its promise
    and the server's batch setting that held it (the medians over its runs)."""
    rate, batch, wait = (side.metrics.get(k) for k in (SERVE_RATE, SERVE_BATCH, SERVE_MAX_WAIT))
    at = f" at batch up to {batch.median:g}" if batch else ""
    waiting = f", waiting up to {fmt_s(wait.median)}" if wait and wait.median > 0 else ""
    return f"{fmt_count(rate.median) if rate else '?'}/s{at}{waiting}"


def _named(side: Side) -> str:
    return f"{side.device} ({side.device_name})" if side.device_name else side.device


def _what_is_missing(choice: ServingChoice) -> list[str]:
    """What the answer lacks: the other kind of device, a price, a server scenario."""
    said = []
    kinds = {s.is_cpu for s in (*choice.bests, *choice.unheld)}
    if len(kinds) == 1:  # a device of the other kind never served it (one that did is named below)
        other = "cpu" if not choice.cheapest.is_cpu else "cuda"
        said.append(
            f"a {'CPU' if other == 'cpu' else 'GPU'} side (the same infer flags with --device {other})"
        )
    said += [f"a price for {s.device} ({s.price.none_reason})" for s in choice.bests if not s.price.known]
    said += [
        f"a server scenario on {_named(s)} (scenarios server): it held no QPS within the promise"
        for s in choice.unheld
    ]
    return said


def serving_choice(choice: ServingChoice) -> str:
    """Which device serves a million predictions cheaper within the p99 promise, by how much, and at
    which batch setting each held its highest QPS; where one device (or a price, or a server scenario)
    is missing, what its one device did and what is missing."""
    promise = f"within p99 {fmt_s(choice.promise_s)}"
    held = "; ".join(f"{_named(s)} held {batching_said(s)}" for s in choice.bests)
    if choice.pair is not None:
        where = _where_to_serve(choice.pair) or ""
        line = f"{promise}, {where}; {held}"
    else:
        cheap = choice.cheapest
        per = side_cost(cheap).per_unit
        cost = f", {fmt_money(per, cheap.price.currency)} per million predictions" if per is not None else ""
        line = f"{promise} only {held}{cost}"
    missing = _what_is_missing(choice)
    line += f"; missing: {', '.join(missing)}" if missing else ""
    return line + MADE_UP if any(s.price.illustrative for s in choice.bests) else line
