"""A run's peak memory: the process's resident set and, on a CUDA device, the allocator's own peak, which
training and serving both reset before their timed work and read after it."""

from __future__ import annotations

import torch

from devicebench.host.cpu import peak_rss_bytes
from devicebench.schema import PEAK_BYTES, PEAK_RSS_BYTES


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict[str, float]:
    """The process's peak RSS (`memory/peak_rss_bytes`) and, on a CUDA device, the allocator's peak
    since the last reset (`memory/peak_bytes`).

    A device without its own memory figure logs none: on the CPU a `memory/peak_bytes` repeating the
    RSS read as a device measurement beside a GPU's, and MPS offers no peak to read.
    """
    rss = peak_rss_bytes()
    if device.type == "cuda":
        return {
            PEAK_BYTES: float(torch.cuda.max_memory_allocated(device)),
            PEAK_RSS_BYTES: rss,
        }
    return {PEAK_RSS_BYTES: rss}
