"""benchmarks/bench_repeat.py, the follow-up to ResNet-18's moving figure on a GPU, run here on its small
CPU case: each variant really changes its one suspect (the allocator's in a fresh process), the verdict
is about `default`, and a bad argument is one line before any work."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import BadArgument
from benchmarks.bench_repeat import Sample, in_fresh_process, line, main, measure, verdict

NO_NVML = (math.nan,) * 4


def _samples(*ours: float) -> list[Sample]:
    return [Sample("cudnn.benchmark=False,alloc=default,first=bare", v, 1000.0, NO_NVML) for v in ours]


def test_the_verdict_is_whether_default_holds_to_5_percent_with_every_variant_said() -> None:
    said, ok = verdict({"default": _samples(1000, 1040, 980), "cudnn_benchmark": _samples(1000, 1200, 900)})
    assert ok and said == (
        "repeat: within ±5% over fresh processes: default holds (±4.0%); cudnn_benchmark does not (±20.0%) ok"
    )
    said, ok = verdict({"default": _samples(11_852, 14_644), "expandable": "a process failed (exit 1): x"})
    assert (
        not ok and "default does not (±" in said and "expandable FAILED" in said and said.endswith("MISSED")
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("gpu",), "bench_repeat: device 'gpu' is not allowed; allowed: cuda, cpu"),
        (("cpu", "0"), "bench_repeat: processes must be a whole number >= 1, not '0'"),
        (("cpu", "1", "cudnn"), "bench_repeat: no variant 'cudnn'; the variants: default, ours_first, "),
    ],
)
def test_a_bad_argument_is_one_line_before_any_work(args: tuple[str, ...], said: str) -> None:
    with pytest.raises(BadArgument) as refused:
        main(*args)
    assert str(refused.value).startswith(said)


def test_the_allocator_variant_reaches_a_fresh_processs_environment_on_the_cpu_case() -> None:
    # PYTORCH_CUDA_ALLOC_CONF is read once, when the allocator starts: only a fresh process can take it
    got = in_fresh_process("expandable", "cpu")
    assert isinstance(got, Sample), got
    assert got.ran_with == "cudnn.benchmark=False,alloc=expandable_segments:True,first=bare"
    assert got.ours > 0 and got.bare > 0 and all(math.isnan(v) for v in got.nvml)  # no NVML on the CPU
    said = line("expandable", [got, Sample(got.ran_with, got.ours * 1.1, got.bare, got.nvml)])
    assert said.startswith(
        "repeat: expandable (cudnn.benchmark=False,alloc=expandable_segments:True,first=bare)"
    )
    assert "over 2 fresh processes" in said and said.endswith("; no NVML figures")


def test_the_order_and_cudnn_variants_run_as_they_say(
    monkeypatch: pytest.MonkeyPatch, one_torch_thread: None
) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)  # measure sets it; restored after
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    ours_first = measure("ours_first", torch.device("cpu"))
    assert ours_first.ran_with == "cudnn.benchmark=False,alloc=default,first=ours"
    assert ours_first.ours > 0 and ours_first.bare > 0 and all(math.isnan(v) for v in ours_first.nvml)
    assert measure("cudnn_benchmark", torch.device("cpu")).ran_with.startswith("cudnn.benchmark=True,")
