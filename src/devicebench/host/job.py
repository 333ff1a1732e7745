"""Whether this process is a rank of a devicebench torchrun job: the launcher's mark on the environment.

The launcher (run/launch.py) sets `DEVICEBENCH_JOB_DIR` on its workers and torchrun sets `RANK`; a pod of
a Kubeflow PyTorchJob has RANK too, but not the mark, so it starts the launcher instead of joining.
Torch-free: `python -m devicebench` asks this before it imports anything heavy.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

JOB_DIR = "DEVICEBENCH_JOB_DIR"  # the launcher's mark on its workers' environment; torchrun sets the rest


def worker_rank(environ: Mapping[str, str] = os.environ) -> int | None:
    """This process's global rank when devicebench's launcher started it, else None."""
    if environ.get(JOB_DIR) and "RANK" in environ:
        return int(environ["RANK"])
    return None
