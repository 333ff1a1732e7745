"""Issue 55, finding 2: runs of one config priced two ways (the table's price and `--price_per_hour 0.5`)
are never averaged: each price is its own side, with its own cost, in the report, the terminal, the
budget lines, runs.csv and the report run's description."""

from __future__ import annotations

from pathlib import Path

from test_report_logic import rec, train

from devicebench.report.command import budget_text
from devicebench.report.judge.judgement import judge
from devicebench.report.model.comparison import compare
from devicebench.report.render.files import write_report
from devicebench.report.render.headline import summary_note
from devicebench.report.render.terminal import terminal_table

TABLE = {  # as the run side logs a CPU priced from the table, as if on the reference CPU shape
    "devicebench.price.usd_per_hour": "0.034",
    "devicebench.price.currency": "USD",
    "devicebench.price.source": "table:prices.yaml",
    "devicebench.price.shape": "VM.Standard.E5.Flex",
    "devicebench.price.units": "1 OCPU + 2 GB",
    "devicebench.price.as_if": "true",
}
BY_HAND = {
    "devicebench.price.usd_per_hour": "0.5",
    "devicebench.price.currency": "USD",
    "devicebench.price.source": "override",
}


def _priced(device: str, t: float, tags: dict[str, str]) -> object:
    hourly = float(tags["devicebench.price.usd_per_hour"])
    cost = {"cost/usd_per_epoch": hourly * t / 3600, "cost/usd_per_hour": hourly}
    return rec(device, params={"epochs": "1"}, metrics=train(t, **cost), tags=tags)


def test_one_config_priced_two_ways_is_two_sides_and_no_figure_is_their_mean(tmp_path: Path) -> None:
    runs = [_priced("cpu", 3.6, TABLE), _priced("cpu", 3.6, BY_HAND), _priced("cuda:0", 0.36, BY_HAND)]
    comp = compare(runs)
    cpus = [s for s in comp.all_sides if s.is_cpu]
    assert [(s.label, len(s.runs)) for s in cpus] == [
        ("cpu (EPYC)", 1),
        ("cpu (EPYC, $0.5/h set by hand)", 1),
    ]
    judged = judge(comp)
    write_report(judged, tmp_path, {})
    said = {
        "report.md": (tmp_path / "report.md").read_text(),
        "runs.csv": (tmp_path / "runs.csv").read_text(),
        "terminal": terminal_table(judged),
        "budget": budget_text(judged),
        "description": summary_note(judged, "read 3 runs"),
    }
    mean_cost = (0.034 + 0.5) / 2 * 3.6 / 3600  # what one side of both runs said per epoch: $0.000267
    for where, text in said.items():
        assert "$0.0340–$0.500" not in text and "0.000267" not in text, where
    md = said["report.md"]
    assert "$0.0000340 per epoch" in md and "$0.000500 per epoch" in md, md
    assert f"{mean_cost:.6f}" not in md
    # each CPU side is held against the GPU at its own price
    assert "cost per epoch: $0.0000500 on cuda:0 against $0.0000340 on cpu" in md
    assert "cost per epoch: $0.0000500 on cuda:0 against $0.000500 on cpu" in md


def test_two_prices_of_one_device_are_not_a_pair_of_their_own() -> None:
    """Two prices of one measurement pair with the other devices, never with each other ("1.00×
    faster"); without a GPU side both are sides without a partner, each at its own price."""
    runs = [_priced("cpu", 3.6, TABLE), _priced("cpu", 3.6, BY_HAND), _priced("cuda:0", 0.36, BY_HAND)]
    comp = compare(runs)
    assert [(p.base.label, p.other.label) for p in comp.pairs] == [
        ("cpu (EPYC)", "cuda:0 (A10)"),
        ("cpu (EPYC, $0.5/h set by hand)", "cuda:0 (A10)"),
    ]
    alone = compare(runs[:2])
    assert alone.pairs == [] and [s.label for s in alone.unpaired] == [
        "cpu (EPYC)",
        "cpu (EPYC, $0.5/h set by hand)",
    ]
