"""Price-performance in the report (issue 17), on plain data: runs planted with the cost contract's tags
and metrics (/work/prompts/cost-schema.md) as the run side logs them, read into pairs, verdicts, the
tables, the charts, the headline metrics and `compare --budget`.

The two cases of the issue: a GPU 12× faster at 8× the hourly price is 1.5× cheaper per epoch; one 3×
faster at 8× the price costs 2.67× more. A side without a price shows "–" and gets no cost verdict.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from devicebench.errors import UsageError
from devicebench.report.command import budget_text
from devicebench.report.judge import price_rules
from devicebench.report.judge.judgement import judge
from devicebench.report.judge.pair_rules import explain
from devicebench.report.model.comparison import compare
from devicebench.report.read.records import RunRecord
from devicebench.report.render.files import write_report
from devicebench.report.render.headline import headline_metrics
from devicebench.report.render.tables import (
    COST,
    PAIR_COLUMNS,
    PRICE_COLUMNS,
    cells,
    headers,
    pair_cells,
    price_items,
    shown,
)
from devicebench.report.render.terminal import terminal_table

_ids = itertools.count()
SAMPLES = 50_000


def run(
    device: str,
    t: float,
    price: float | None,
    key: str = "k1",
    params: dict[str, str] | None = None,
    shape: str = "",
    name: str = "",
    epochs: int = 2,
) -> RunRecord:
    """A finished cifar run of `t` s training; priced as the run side logs it, or tagged `price.none`."""
    tags = {
        "devicebench.workload": "cifar",
        "devicebench.device": device.split(":")[0],
        "devicebench.device.resolved": device,
        "devicebench.device.name": name or ("EPYC" if device == "cpu" else "A10"),
        "devicebench.config_key": key,
        "devicebench.data": "cifar10",
        "devicebench.host.cpu_model": "EPYC",
    }
    metrics = {"time/train_s": t, "time/total_s": t + 1.0, "time/data_wait_s": 0.0}
    if price is None:
        tags["devicebench.price.none"] = "no OCI shape (not on OCI) and no price_per_hour"
    else:
        tags |= {"devicebench.price.usd_per_hour": str(price), "devicebench.price.currency": "USD"}
        tags |= {"devicebench.price.source": "table:prices.yaml" if shape else "override"}
        if shape:
            tags |= {"devicebench.price.shape": shape, "devicebench.host.oci.shape": shape}
        metrics |= {
            "cost/usd": price * (t + 1.0) / 3600,
            "cost/usd_per_hour": price,
            "cost/usd_per_epoch": price * (t / epochs) / 3600,
            "cost/usd_per_1k_samples": price * (t / SAMPLES) * 1000 / 3600,
        }
    return RunRecord(
        run_id=f"r{next(_ids)}",
        status="FINISHED",
        start_time=next(_ids),
        tags=tags,
        params={"batch_size": "128", "width": "1", "epochs": str(epochs), **(params or {})},
        metrics=metrics,
    )


def two_cases() -> list[RunRecord]:
    """Config `cheap`: CPU 12 s at $1/h, GPU 1 s at $8/h. Config `dear`: CPU 3 s at $1/h, GPU 1 s at $8/h."""
    cheap, dear = {"width": "4"}, {"width": "2"}
    return [
        *(run("cpu", 12.0, 1.0, "cheap", cheap) for _ in range(2)),
        *(run("cuda:0", 1.0, 8.0, "cheap", cheap) for _ in range(2)),
        *(run("cpu", 3.0, 1.0, "dear", dear) for _ in range(2)),
        *(run("cuda:0", 1.0, 8.0, "dear", dear) for _ in range(2)),
    ]


def by_key(comp, key: str):
    return next(p for p in comp.pairs if p.config_key == key)


# --------------------------------------------------------------------------------------------- pairs


def test_the_two_cases_give_exact_cost_ratios_and_the_right_verdicts() -> None:
    comp = compare(two_cases())
    cheap, dear = by_key(comp, "cheap"), by_key(comp, "dear")
    assert (cheap.headline, cheap.price_ratio, cheap.cost_ratio) == pytest.approx((12.0, 8.0, 8.0 / 12.0))
    assert (dear.headline, dear.price_ratio, dear.cost_ratio) == pytest.approx((3.0, 8.0, 8.0 / 3.0))
    assert explain(cheap)[0] == (
        "A10 ($8.00/h set by hand) trains this 12.0× faster than this CPU ($1.00/h set by hand) and costs "
        "1.50× less per epoch: worth its price (break-even at 8.00× faster)"
    )
    assert explain(dear)[0] == (
        "A10 ($8.00/h set by hand) trains this 3.00× faster than this CPU ($1.00/h set by hand) and costs "
        "2.67× more per epoch: worth it only when time matters more than money (break-even at 8.00× faster)"
    )
    # the pairs table: time speedup, price ratio and cost ratio side by side
    row = pair_cells(cheap)
    assert (row["speedup"].split(" ")[0], row["price_ratio"], row["cost_ratio"]) == (
        "12.0×",
        "8.00× ($1.00 / $8.00)",
        "0.67× per epoch",
    )
    assert row["cost"] == "$0.00167 / $0.00111 per epoch; $0.0000667 / $0.0000444 per 1k samples"
    assert pair_cells(dear)["cost_ratio"] == "2.67× per epoch"
    assert headers(shown(PAIR_COLUMNS, COST))[-3:] == [
        "price ratio (per hour)",
        "cost ratio (per unit of work)",
        "cost (base / other)",
    ]
    table = terminal_table(judge(comp))
    assert "0.67× per epoch" in table and "2.67× per epoch" in table


def test_a_side_without_a_price_shows_a_dash_and_gets_no_cost_verdict() -> None:
    comp = compare([run("cpu", 12.0, None), run("cuda:0", 1.0, 8.0)])
    (p,) = comp.pairs
    assert p.price_ratio is None and p.cost_ratio is None
    row = pair_cells(p)
    assert (row["price_ratio"], row["cost_ratio"], row["cost"]) == ("–", "–", "–")
    assert price_rules.price_performance(p) is None
    assert not any("cheaper" in v or "dearer" in v for v in explain(p))
    metrics = headline_metrics(comp)
    assert "speedup/cifar cpu vs cuda_0" in metrics and not any(k.startswith("cost_ratio/") for k in metrics)
    rows = cells(PRICE_COLUMNS, price_items(comp.all_sides, lambda s: s.config_key))
    cpu = next(r for r in rows if r[1] == "cpu (EPYC)")
    assert cpu[2] == "– (no OCI shape (not on OCI) and no price_per_hour)" and cpu[4:8] == ["–"] * 4
    assert cpu[3] == "6.00 s per epoch", "unpriced, a training side's unit is still the epoch"


def test_prices_in_different_currencies_make_no_ratio() -> None:
    eur = run("cuda:0", 1.0, 8.0)
    eur.tags["devicebench.price.currency"] = "EUR"
    (p,) = compare([run("cpu", 12.0, 1.0), eur]).pairs
    assert p.price_ratio is None and p.cost_ratio is None and price_rules.price_performance(p) is None


def test_headline_metrics_carry_the_cost_ratio_beside_the_speedup() -> None:
    m = headline_metrics(compare(two_cases()))
    assert m["speedup/cifar width_4 cpu vs cuda_0"] == pytest.approx(12.0)
    assert m["cost_ratio/cifar width_4 cpu vs cuda_0"] == pytest.approx(8.0 / 12.0)
    assert m["cost_ratio/cifar width_2 cpu vs cuda_0"] == pytest.approx(8.0 / 3.0)


# --------------------------------------------------------------------------------------------- shapes


def shapes() -> list[RunRecord]:
    """One config on a CPU flex shape, an A10 in VM.GPU.A10.1 and in VM.GPU.A10.2, and an H100."""
    return [
        run("cpu", 20.0, 0.1, shape="VM.Standard.E4.Flex"),
        run("cuda:0", 2.0, 2.0, shape="VM.GPU.A10.1"),
        run("cuda:0", 2.0, 4.0, shape="VM.GPU.A10.2"),
        run("cuda:0", 0.5, 40.0, shape="BM.GPU.H100.8", name="H100"),
    ]


def test_the_same_gpu_in_two_shapes_is_two_sides_with_a_cost_ratio() -> None:
    comp = compare(shapes())
    labels = [s.label for s in comp.sides["k1"]]
    assert "cuda:0 (A10, VM.GPU.A10.1)" in labels and "cuda:0 (A10, VM.GPU.A10.2)" in labels
    a10s = next(p for p in comp.pairs if "A10.1" in p.base.label and "A10.2" in p.other.label)
    assert (a10s.headline, a10s.price_ratio, a10s.cost_ratio) == pytest.approx((1.0, 2.0, 2.0))
    assert explain(a10s)[0] == (
        "A10 (VM.GPU.A10.2, $4.00/h) runs this 1.00× faster than A10 (VM.GPU.A10.1, $2.00/h) and costs 2.00× more per epoch: not worth its price (break-even at 2.00× faster)"
    )


def test_the_shape_table_and_budget_name_the_most_work_per_dollar() -> None:
    comp = compare(shapes())
    rows = cells(PRICE_COLUMNS, price_items(comp.all_sides, lambda s: s.config_key))
    assert [r[1] for r in rows] == [
        "cpu (EPYC, VM.Standard.E4.Flex)",  # $0.1/h × 10 s per epoch: 3,600 epochs per dollar
        "cuda:0 (A10, VM.GPU.A10.1)",  # $2/h × 1 s: 1,800
        "cuda:0 (A10, VM.GPU.A10.2)",  # $4/h × 1 s: 900
        "cuda:0 (H100, BM.GPU.H100.8)",  # $40/h × 0.25 s: 360
    ]
    assert rows[0][6] == "3,600 epochs per USD" and rows[1][7] == "0.50×" and rows[3][7] == "0.10×"
    assert rows[1][2] == "$2.00 (VM.GPU.A10.1; table:prices.yaml)"
    first, ranks = budget_text(judge(comp)).splitlines()
    assert first == (
        "budget: cifar · bs 128: cheapest cpu (EPYC, VM.Standard.E4.Flex): 3,600 epochs per USD "
        "($0.000278 per epoch at $0.100 (VM.Standard.E4.Flex; table:prices.yaml); 3 other priced side(s))"
    )
    assert ranks.startswith(
        "  ranked by cost per epoch: 1. cpu (EPYC, VM.Standard.E4.Flex) $0.000278, 10.00 s per epoch; 2. "
    )
    assert (
        ranks.count(". cuda:0") == 3 and ranks.count(". cpu") == 1 and ranks.endswith("250.00 ms per epoch")
    )


def test_a_deadline_picks_the_cheapest_side_that_meets_it_or_says_none_does() -> None:
    judged = judge(compare(shapes()))
    within = budget_text(judged, deadline=5.0).splitlines()[-1]
    assert within.startswith("  within 5.00 s per epoch: cheapest cuda:0 (A10"), within
    none = budget_text(judged, deadline=0.01).splitlines()[-1]
    assert none.startswith("  within 10.00 ms per epoch: no priced side meets it; the fastest, cuda:0"), none


@pytest.mark.parametrize("raw", ["0", "-5", "soon", "5 days", "1e9h"])
def test_a_bad_deadline_is_one_line_before_anything_is_read(raw: str) -> None:
    from devicebench.report.cli import parse_deadline

    with pytest.raises(UsageError, match=r"is not allowed; use a time per unit of work") as err:
        parse_deadline(raw)
    assert err.value.param == "deadline"
    assert (parse_deadline("90"), parse_deadline("2m"), parse_deadline("1.5h"), parse_deadline("")) == (
        90.0,
        120.0,
        5400.0,
        None,
    )


def test_budget_for_matmul_in_gflop_and_for_a_config_without_prices() -> None:
    def matmul(device: str, t: float, price: float) -> RunRecord:
        r = run(device, t, price, key="mm")
        r.tags["devicebench.workload"] = "matmul"
        return dataclasses.replace(
            r, metrics={}, history={"matmul/torch/float32/time_s": {512: t * 1e6, 1024: t}}
        )

    comp = compare([matmul("cpu", 0.02, 0.36), matmul("cuda:0", 0.001, 3.6), run("cpu", 1.0, None, key="k")])
    (p,) = comp.pairs
    assert p.cost_ratio == pytest.approx(0.5)  # 20× faster at 10× the price
    assert explain(p)[0] == (
        "A10 ($3.60/h set by hand) computes this product 20.0× faster than this CPU ($0.360/h set by hand) and "
        "costs 2.00× less per GFLOP: worth its price (break-even at 10.0× faster)"
    )
    assert pair_cells(p)["cost"] == "1,073,742 / 2,147,484 GFLOP per USD at n=1024 float32"
    lines = budget_text(judge(comp)).splitlines()
    assert lines == [
        "budget: cifar · bs 128: no side has a price (no OCI shape (not on OCI) and no price_per_hour)",
        "budget: matmul · mm: cheapest cuda:0 (A10): 2,147,484 GFLOP per USD at n=1024 float32 "
        "($0.000000466 per GFLOP at $3.60 (override); 1 other priced side(s))",
        "  ranked by cost per GFLOP: 1. cuda:0 (A10) $0.000000466, 1.00 ms per product; 2. cpu (EPYC) "
        "$0.000000931, 20.00 ms per product",
    ]


# --------------------------------------------------------------------------------------------- files


def test_report_files_show_costs_and_the_cost_chart(tmp_path: Path) -> None:
    files = write_report(judge(compare(two_cases())), tmp_path, {"experiments": "e"})
    names = {f.name for f in files}
    assert "cost_vs_time_cifar.png" in names and (tmp_path / "cost_vs_time_cifar.png").stat().st_size > 0
    md = (tmp_path / "report.md").read_text()
    assert "## Price-performance" in md
    assert "costs 1.50× less per epoch: worth its price (break-even at 8.00× faster)" in md
    assert "costs 2.67× more per epoch: worth it only when time matters more than money" in md
    assert "| 0.67× per epoch |" in md and "| 2.67× per epoch |" in md


def test_without_prices_there_is_no_cost_chart_and_the_report_says_how_to_get_prices(tmp_path: Path) -> None:
    files = write_report(judge(compare([run("cpu", 12.0, None), run("cuda:0", 1.0, None)])), tmp_path, {})
    assert not any(f.name.startswith("cost_vs_time") for f in files)
    assert "No run carries a price" in (tmp_path / "report.md").read_text()


def test_crossover_heatmap_gets_a_money_panel_only_with_prices(tmp_path: Path) -> None:
    from devicebench.report.render.charts import crossover_chart

    def grid_runs(priced: bool) -> list[RunRecord]:
        out = []
        for width, batch in itertools.product((1, 2), (4, 128)):
            p, key = {"width": str(width), "batch_size": str(batch)}, f"w{width}b{batch}"
            out += [run("cpu", 10.0 * width, 1.0 if priced else None, key, p)]
            out += [run("cuda:0", 64.0 / batch, 8.0 if priced else None, key, p)]
        return out

    (grid,) = compare(grid_runs(priced=True)).grids
    assert grid.cost_cells[(1.0, 4.0)] == pytest.approx(8.0 * 16.0 / 10.0)  # 0.625× faster at 8× the price
    assert grid.cost_cells[(2.0, 128.0)] == pytest.approx(8.0 * 0.5 / 20.0)
    assert crossover_chart(grid, tmp_path / "priced.png") == 2
    (bare,) = compare(grid_runs(priced=False)).grids
    assert bare.cost_cells == {} and crossover_chart(bare, tmp_path / "bare.png") == 1
    # GPU runs that logged their share of the peak get a third panel: where the GPU is launch-bound.
    runs = grid_runs(priced=True)
    for r in runs:
        if r.device.startswith("cuda"):
            r.metrics["util/peak_fraction"] = float(r.params["batch_size"]) * float(r.params["width"]) / 1e4
    (grid,) = compare(runs).grids
    assert grid.peak_cells[(1.0, 4.0)] == pytest.approx(0.0004) and grid.peak_cells[(2.0, 128.0)] == 0.0256
    assert crossover_chart(grid, tmp_path / "peak.png") == 3
    assert grid.best_cpu_cells == {}, "no faster CPU side was measured"
    from devicebench.report.render.charts import crossover_caption

    assert crossover_caption(grid) == "; where it pays in money, the share of the GPU's peak"
    unpriced = grid_runs(priced=False)
    for r in unpriced:
        if r.device.startswith("cuda"):
            r.metrics["util/peak_fraction"] = 0.001
    (grid,) = compare(unpriced).grids
    assert crossover_caption(grid) == "; the share of the GPU's peak", "no money panel, so no word of money"


def test_compare_parser_takes_budget() -> None:
    from devicebench.run.cli import build_parser

    assert build_parser("compare").parse_args(["compare", "--budget"]).budget is True
    assert build_parser("compare").parse_args(["compare"]).budget is False


# --------------------------------------------------------------------------------------------- per-use prices


def as_if_cpu(t: float, usd: float) -> RunRecord:
    """A CPU run on an H100 host priced as the CPU shape that gives it its cores, as the run side logs it."""
    r = run("cpu", t, usd, shape="VM.Standard.E5.Flex")
    r.tags.update(
        {
            "devicebench.host.oci.shape": "BM.GPU.H100.8",
            "devicebench.price.units": "1 OCPU + 2 GB",
            "devicebench.price.as_if": "true",
        }
    )
    return r


def test_an_as_if_price_never_names_the_side() -> None:
    """A CPU side priced as if on VM.Standard.E5.Flex ran on its H100 host: its label and its side key
    are the host's."""
    gpu = run("cuda:0", 1.0, 10.0, shape="BM.GPU.H100.8")
    gpu.tags["devicebench.price.units"] = "1 of its 8 GPUs"
    new = compare([as_if_cpu(20.0, 0.034), as_if_cpu(21.0, 0.034), gpu])
    cpu = next(s for s in new.all_sides if s.is_cpu)
    assert cpu.label == "cpu (EPYC, BM.GPU.H100.8)" and cpu.price.as_if
    (p,) = new.pairs
    assert p.price_ratio == pytest.approx(10.0 / 0.034) and p.cost_ratio != pytest.approx(1 / p.headline)
