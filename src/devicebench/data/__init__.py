"""Datasets: CIFAR-10 and Pascal VOC 2012 in their real on-disk formats, and labelled look-alikes for offline runs."""

from __future__ import annotations

import os
from pathlib import Path

# The label of a pixel that is not scored: VOC's object borders (255 in its palette PNGs), and the
# look-alikes' too. The loss and the metrics (train/metrics.py) skip it.
IGNORE_INDEX = 255


def resolve_root(data_dir: str, default: Path) -> Path:
    """Where a run reads its data: the config's `data_dir` when given (`~` expanded), else the settings'
    data directory (DEVICEBENCH_DATA_DIR). Every workload resolves it here, the same way."""
    return Path(os.path.expanduser(data_dir)) if data_dir.strip() else Path(default)
