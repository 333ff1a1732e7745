"""The run schema in one torch-free place: workload names, the tag prefix, MLflow's size limits.

Workloads, tracker, suite, report and benchmarks all speak this schema (DESIGN.md, "Run schema"); a
name defined twice drifts, so each is defined here once. Nothing here imports torch or mlflow: the
report and the suite's plan validation read it without paying for either.
"""

from __future__ import annotations

WORKLOADS = ("matmul", "cifar", "unet")
TAG_PREFIX = "devicebench."
MAX_TAG_VALUE = 8000  # MLflow's tag value limit
MAX_BATCH_METRICS = 1000  # MLflow's log_batch limit


def tag(name: str) -> str:
    """`devicebench.<name>`: every tag the project writes or reads is spelled through this."""
    return TAG_PREFIX + name
