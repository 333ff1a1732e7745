"""A training run's figures summed over its epochs, evaluations and, in a data-parallel job, its ranks:
what the summary metrics, `timings.json` and the workloads' results report.

A job trains as fast as its slowest rank, on all ranks' samples; every rank evaluates the whole eval set,
so the evaluation figures are any rank's (rank 0's, which logs them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from devicebench.train import training


@dataclass(frozen=True)
class Totals:
    """Sums over a run's epochs and evaluations: what the summary metrics and the results report."""

    train_s: float
    data_wait_s: float
    train_samples: int
    eval_s: float
    train_samples_per_s: float
    eval_samples_per_s: float

    @classmethod
    def of(cls, epochs: list[training.EpochResult], evals: list[training.EvalResult]) -> Totals:
        train_s, eval_s = sum(e.seconds for e in epochs), sum(e.seconds for e in evals)
        train_samples = sum(e.samples for e in epochs)
        return cls(
            train_s=train_s,
            data_wait_s=sum(e.data_wait_s for e in epochs),
            train_samples=train_samples,
            eval_s=eval_s,
            train_samples_per_s=train_samples / train_s if train_s > 0 else math.nan,
            eval_samples_per_s=sum(e.samples for e in evals) / eval_s if eval_s > 0 else math.nan,
        )

    def timings(self) -> dict[str, float]:
        """The fields every workload's result reports, by name."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "train_samples"}

    def of_job(self, ranks: list[dict[str, float]]) -> Totals:
        """The job's training figures from every rank's (this rank's evaluation stays: every rank
        evaluates the whole set): the job trains as fast as its slowest rank, on all ranks' samples."""
        if len(ranks) < 2:
            return self
        slowest = max(ranks, key=lambda r: r["train_s"])
        samples = int(sum(r["train_samples"] for r in ranks))
        return dataclasses.replace(
            self,
            train_s=slowest["train_s"],
            data_wait_s=slowest["data_wait_s"],
            train_samples=samples,
            train_samples_per_s=samples / slowest["train_s"] if slowest["train_s"] > 0 else math.nan,
        )


def dist_metrics(
    ranks: list[dict[str, float]], allreduce_s: float | None, steps: int, train_s: float
) -> dict[str, float]:
    """What a job of several processes adds: its size, each rank's throughput, the slowest rank, and
    the measured all-reduce with the share of training it could at most have taken (`steps` of it over
    the job's `train_s`; DDP overlaps it with backward, so the share is an upper bound)."""
    if len(ranks) < 2:
        return {}
    values = {"dist/world_size": float(len(ranks))}
    for r, fig in enumerate(ranks):
        values[f"dist/rank/{r}/train_s"] = fig["train_s"]
        values[f"dist/rank/{r}/data_wait_s"] = fig["data_wait_s"]
        if fig["train_s"] > 0:
            values[f"dist/rank/{r}/train_samples_per_s"] = fig["train_samples"] / fig["train_s"]
    values["dist/slowest_rank"] = float(max(range(len(ranks)), key=lambda r: ranks[r]["train_s"]))
    if allreduce_s is not None:
        values["dist/allreduce_s"] = allreduce_s
        if train_s > 0:
            values["dist/comm_share"] = min(steps * allreduce_s / train_s, 1.0)
    return values
