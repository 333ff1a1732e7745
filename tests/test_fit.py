"""The shared training driver in one process (tests/test_distributed.py runs it as a real 2-process job)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DistributedSampler, TensorDataset

from devicebench.config.workloads import CifarConfig
from devicebench.data.loader import LoaderSettings, data_loader
from devicebench.host.context import Context
from devicebench.tracking.protocol import MemoryTracker
from devicebench.train import loop, setup

CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _fit(tmp_path: Path, tracker: MemoryTracker) -> loop.Fitted:
    """Two epochs of a linear classifier on 64 points."""
    cfg = CifarConfig(epochs=2, batch_size=8)
    opts, log = setup.setup(cfg, Context(CPU, tmp_path, False), tracker)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 4, generator=g), torch.randint(0, 3, (64,), generator=g)
    train, val = TensorDataset(x, y), TensorDataset(x[:16], y[:16])

    def load() -> tuple:
        both = LoaderSettings(opts.batch_size, CPU, 0, opts.sampler_for)
        return train, val, data_loader(train, both, shuffle=True), data_loader(val, both, shuffle=False)

    task = setup.Task(
        build=lambda: torch.nn.Linear(4, 3),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        loss_fn=torch.nn.CrossEntropyLoss(),
        num_classes=3,
        eval_metrics=lambda ev: {"eval/loss": ev.mean_loss},
    )
    data = setup.load_data(opts, load)
    done = loop.fit(opts, data, task, log)
    loop.log_summary(log, done, data, opts)
    return done


def test_one_process_trains_everything_and_logs_what_every_report_reads(tmp_path: Path) -> None:
    main = MemoryTracker()
    first = _fit(tmp_path, main)
    assert [e.samples for e in first.epochs] == [64, 64]
    assert [e.samples for e in first.evals] == [16]
    assert first.init_weights == _fit(tmp_path, MemoryTracker()).init_weights  # seeded by the driver
    names = {k for k, _, _ in main.metrics}
    assert {
        "time/warmup_s",
        "train/epoch_loss",
        "eval/loss",
        "time/train_s",
        "memory/peak_rss_bytes",
    } <= names
    assert "memory/peak_bytes" not in names  # the CPU has no device memory apart from the process's
    assert not any(n.startswith("dist/") for n in names)  # one process: no job figures
    assert first.eval_metrics == {"eval/loss": main.values("eval/loss")[-1]}  # what a model is linked to
    assert main.tags["devicebench.fp32_math"] == "ieee" and "devicebench.init_weights" in main.tags
    assert [len(e) for e in main.artifacts["timings.json"]["evals"]] == [3]


def test_a_distributed_sampler_is_told_each_epoch(tmp_path: Path) -> None:
    """DistributedSampler reshuffles only when told the epoch; the driver tells it, so the two epochs
    see the data in different orders (with the same seed, every rank and world size agrees on both).
    One process uses it too, with one replica: the order a job of N processes splits between them."""
    seen: list[int] = []
    real = DistributedSampler.set_epoch

    def record(self: DistributedSampler, epoch: int) -> None:
        seen.append(epoch)
        real(self, epoch)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DistributedSampler, "set_epoch", record)
        _fit(tmp_path, MemoryTracker())
    assert seen == [1, 2]


@pytest.mark.parametrize(
    ("device", "mode", "graphs"),
    [("cuda", "reduce-overhead", True), ("cuda", "default", False), ("cpu", "reduce-overhead", False)],
)
def test_only_a_model_compiled_with_cuda_graphs_marks_where_each_step_begins(
    device: str, mode: str, graphs: bool
) -> None:
    """reduce-overhead replays CUDA graphs, whose outputs a next step may overwrite unless each step is
    marked as begun; eager and default-compiled models pay no such call, and a CPU has no CUDA graphs."""
    opts = setup.Options(torch.device(device), 1, 4, 0, None, False, False, compile=True, compile_mode=mode)
    assert opts.step.cuda_graphs is graphs
