"""Dense peak throughput per GPU model and dtype, from the vendors' datasheets, each with its source.

"How much of the GPU did the run use?" answers "why did the tutorial barely speed up?": 0.3 % of an
H100's peak is a launch-bound model that a bigger GPU will not help. The figures are *dense* (NVIDIA
quotes tensor-core figures "with sparsity" at twice these; those are halved here), in TFLOP/s. A GPU not in
the table has no peak (the run logs none): never a made-up number. A CPU's peak is measured by the run
itself (train/summary.cpu_peak_tflops), since no table knows which CPU a cloud shape gives.

Torch-free, so the report can read it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What each precision's arithmetic runs as (the `devicebench.fp32_math` tag says which for fp32 runs).
MATH_DTYPE = {"ieee": "fp32", "tf32": "tf32", "tf32-conv": "tf32", "tf32-matmul": "tf32"}


@dataclass(frozen=True)
class Peak:
    """One GPU's dense peaks in TFLOP/s by dtype (fp32 is the CUDA cores' IEEE rate) and where they come from."""

    name: str
    tflops: dict[str, float]
    source: str
    sms: int  # streaming multiprocessors of the whole GPU the figures are for: a MIG slice has fewer

    def on(self, sms: int | None) -> Peak:
        """These peaks for a device torch reports `sms` SMs on: a MIG slice (an A100's 1g.5gb has 14 of
        108) gets its share, as compute scales with SMs at one clock; the whole GPU gets the datasheet's."""
        if not sms or sms >= self.sms:
            return self
        share = sms / self.sms
        return Peak(
            f"{self.name} ({sms} of {self.sms} SMs)",
            {k: v * share for k, v in self.tflops.items()},
            f"{self.source}, × {sms}/{self.sms} SMs (a MIG slice)",
            sms,
        )


# Matched against torch's device name in order: the first pattern that matches wins (a variant before
# its family: V100S and V100 PCIe before V100, NVL and PCIe before SXM, GH200 before H200). A GPU with no
# datasheet of its own (AWS's A10G) is not in the table: its peak is unknown, not borrowed. V100 has no
# TF32 or BF16 tensor cores, so it has no figure for them.
_H100_SXM = {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}
_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}
_NVL_SOURCE = "(FP32 60, TF32 835*, BF16/FP16 1,671* TFLOPS; *with sparsity, halved)"
PEAKS: tuple[tuple[str, Peak], ...] = (
    (
        r"V100S",
        Peak(
            "V100S PCIe",
            {"fp32": 16.4, "fp16": 130.0},
            "NVIDIA V100S datasheet (16.4 TFLOPS single, 130 tensor)",
            sms=80,
        ),
    ),
    (
        r"V100.*PCIE",
        Peak(
            "V100 PCIe",
            {"fp32": 14.0, "fp16": 112.0},
            "NVIDIA Tesla V100 datasheet (PCIe: 14 TFLOPS single, 112 TFLOPS tensor)",
            sms=80,
        ),
    ),
    (
        r"V100",
        Peak(
            "V100 SXM2",
            {"fp32": 15.7, "fp16": 125.0},
            "NVIDIA Tesla V100 datasheet (SXM2: 15.7 TFLOPS single, 125 TFLOPS tensor)",
            sms=80,
        ),
    ),
    (
        r"\bA10\b",
        Peak(
            "A10",
            {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
            "NVIDIA A10 datasheet (TF32 62.5, BF16/FP16 125 TFLOPS dense; 125/250 with sparsity)",
            sms=72,
        ),
    ),
    (
        r"\bA100\b",
        Peak(
            "A100",
            {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
            "NVIDIA A100 datasheet (FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS dense)",
            sms=108,
        ),
    ),
    (r"H100 NVL", Peak("H100 NVL", _NVL, f"NVIDIA H100 datasheet, NVL {_NVL_SOURCE}", sms=132)),
    (
        r"H100.*PCIe",
        Peak(
            "H100 PCIe",
            {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
            "NVIDIA H100 datasheet, PCIe (FP32 51, TF32 756*, BF16/FP16 1,513* TFLOPS; *with sparsity, halved)",
            sms=114,
        ),
    ),
    (
        r"H100",
        Peak(
            "H100 SXM",
            _H100_SXM,
            "NVIDIA H100 datasheet, SXM (FP32 67, TF32 989*, BF16/FP16 1,979* TFLOPS; *with sparsity, halved)",
            sms=132,
        ),
    ),
    (
        r"GH200",
        Peak(
            "GH200",
            _H100_SXM,
            "NVIDIA GH200 Grace Hopper datasheet (FP32 67, TF32 989*, BF16/FP16 1,979* TFLOPS; *with sparsity, halved)",
            sms=132,
        ),
    ),
    (r"H200 NVL", Peak("H200 NVL", _NVL, f"NVIDIA H200 datasheet, NVL {_NVL_SOURCE}", sms=132)),
    (
        r"H200",
        Peak(
            "H200 SXM",
            _H100_SXM,
            "NVIDIA H200 datasheet, SXM (FP32 67, TF32 989*, BF16/FP16 1,979* TFLOPS; *with sparsity, halved)",
            sms=132,
        ),
    ),
)


def gpu_peak(device_name: str, sms: int | None = None) -> Peak | None:
    """The datasheet peaks of the GPU torch calls `device_name` with `sms` SMs (its share of them for a
    MIG slice; the whole GPU's where `sms` is not known), or None for a GPU not in the table."""
    for pattern, peak in PEAKS:
        if re.search(pattern, device_name):
            return peak.on(sms)
    return None


def peak_source(gpu_name: str, sms: int | None = None) -> str:
    """The `util.peak_source` tag of a run on `gpu_name`: the datasheet its peaks come from, or why none."""
    peak = gpu_peak(gpu_name, sms)
    if peak is None:
        return f"unknown: {gpu_name} is not in the peaks table (host/peaks.py)"
    return f"datasheet: {peak.source}"


def training_dtype(precision: str, fp32_math: str) -> str:
    """The dtype whose peak a training run is held against: autocast's, else what fp32 resolved to."""
    if precision in ("bf16", "fp16"):
        return precision
    return MATH_DTYPE.get(fp32_math, "fp32")


def matmul_dtype(dtype: str) -> str:
    """A matmul point's dtype in the table's words (float32 products are IEEE: matmul sets it so)."""
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)
