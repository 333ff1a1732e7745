"""The overhead bench's cases fit the data they draw from: on CUDA a gather past the end of the split is a
device-side assert that kills the process (the H100 run of 2026-11-24 lost its last two cases to one)."""

from benchmarks.bench_overhead import CPU_CASES, GPU_CASES
from devicebench.data.synthetic import TRAIN_SIZE


def test_every_case_fits_the_synthetic_train_split() -> None:
    for case in (*CPU_CASES, *GPU_CASES):
        assert case.samples <= TRAIN_SIZE, case
