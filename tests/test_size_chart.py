"""Issue 55, finding 3: the speedup-against-model-size chart. Without a GPU side there is no speedup to
draw (its axis ran -0.04..0.04 with the points below zero): no chart. With one, every point is named in
the legend under the axes, never by a label beside it (`resnet18 (imfodel)` overprinted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_report_logic import rec, train

from devicebench.report.model.comparison import compare
from devicebench.report.render import charts
from devicebench.schema import FORWARD_FLOPS


def _model(device: str, model: str, t: float, key: str, workload: str = "model") -> Any:
    metrics = train(t, **{FORWARD_FLOPS: 1.8e9 if model == "resnet18" else 4.1e9})
    return rec(device, key=key, workload=workload, params={"model": model}, metrics=metrics)


def test_no_gpu_side_draws_no_speedup_chart(tmp_path: Path) -> None:
    comp = compare([_model("cpu", "resnet18", 10.0, "a"), _model("cpu", "resnet50", 30.0, "b", "infer")])
    assert not charts.size_chart(comp.pairs, comp.unpaired, tmp_path / "size.png")
    assert not (tmp_path / "size.png").exists()


def test_every_point_is_named_in_the_legend_and_none_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [
        _model("cpu", "resnet18", 10.0, "a"),
        _model("cuda:0", "resnet18", 1.0, "a"),
        _model("cpu", "resnet50", 30.0, "b"),
        _model("cuda:0", "resnet50", 2.0, "b"),
        _model("cpu", "resnet18", 12.0, "c", "infer"),  # no GPU side yet: on the bottom edge
    ]
    comp = compare(runs)
    drawn: list[Any] = []
    monkeypatch.setattr(charts, "_save", lambda plt, fig, path: drawn.append(fig))
    assert charts.size_chart(comp.pairs, comp.unpaired, tmp_path / "size.png")
    (ax,) = drawn[0].axes
    assert [t.get_text() for t in ax.texts] == [], "no label beside a point: they overprinted"
    named = [t.get_text() for t in ax.get_legend().get_texts()]
    assert named == [
        "resnet18: training, as configured",
        "resnet50: training, as configured",
        "resnet18 (infer): CPU only: no GPU side yet",
    ]
    lo, hi = ax.get_ylim()
    assert lo > 0 and lo < 1 < 10 < 15 < hi, (lo, hi)  # a log axis of speedups, around 10× and 15×
