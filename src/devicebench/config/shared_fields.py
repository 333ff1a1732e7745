"""The fields several workloads share, each defined once: where a run trains, its seed and numerics,
its model and input where it names one, and how it is priced and threaded. Each function is a field's
default (`config.fields.param`), so a config class names the field and calls its function.
"""

from __future__ import annotations

from devicebench.config.fields import Unset, param, spelt
from devicebench.config.spelling import input_text, model_spec_text

# `default` is PyTorch's out-of-the-box math (TF32 convolutions on an Ampere or newer GPU, IEEE matmuls),
# what users' own code runs; fp32 is strict IEEE, tf32 TF32 everywhere, bf16/fp16 autocast.
PRECISIONS = ("default", "fp32", "tf32", "bf16", "fp16")
COMPILE_MODES = ("default", "reduce-overhead")


def train_device() -> str:
    return param("cpu", "where the model trains: cpu, cuda, cuda:N, mps or auto")


def train_seed() -> int:
    return param(0, "seed for initial weights and shuffle order (same on every device)", min=0, key=False)


def precision() -> str:
    return param(
        "default",
        "numerics: default (PyTorch's own: TF32 convolutions on Ampere+), fp32 (strict IEEE), tf32, "
        "bf16 or fp16 (autocast)",
        choices=PRECISIONS,
    )


def channels_last() -> bool:
    return param(False, "NHWC memory format for model and inputs (tensor cores like it)")


def torch_compile() -> bool:
    return param(False, "wrap the model in torch.compile (compiled before timing, logged as time/compile_s)")


def compile_mode() -> str:
    return param(
        "default",
        "torch.compile's mode where compile=true: default, or reduce-overhead (CUDA graphs on a GPU: "
        "no launch cost per kernel, for small steps)",
        choices=COMPILE_MODES,
    )


def system_metrics() -> bool:
    return param(False, "sample CPU, memory and GPU use with MLflow's system metrics", key=False)


def price_per_hour() -> float:
    """Every workload's: what an hour of this host costs, for this run's `cost/*` metrics. Not the work
    (key=False): the same work priced twice is still the same work."""
    return param(
        0.0,
        "hourly price in USD for this run's cost metrics (0 = the host's: DEVICEBENCH_PRICE_PER_HOUR, "
        "else the price table by OCI shape)",
        min=0,
        max=100_000,
        key=False,
    )


def illustrative_price() -> bool:
    """A made-up price (the demo's) must never pass for a real one: this flag tags the run
    `price.source=illustrative`, and the run's description and every report table and verdict say so."""
    return param(
        False,
        "price_per_hour is made up, or price_shape's list prices stand for this host (a demo's): tagged "
        "price.source=illustrative",
        key=False,
    )


def cpu_shape() -> str:
    """Every workload's: the flex CPU shape a CPU run is priced as where it is not on a CPU shape (on a
    GPU host, off OCI), at the OCPUs and memory it used (pricing.prices.price_side). Not the work."""
    return param(
        "",
        "the flex CPU shape a CPU run off a CPU shape is priced as, at the OCPUs it used "
        "(default: DEVICEBENCH_CPU_SHAPE, else VM.Standard.E5.Flex)",
        key=False,
        unset=Unset("default", "an OCI CPU shape name"),
    )


def price_shape() -> str:
    """Every workload's: the GPU shape a GPU run is priced as where the host's own is not known (off
    OCI, a shape not in the table; the demo's "as if"). Not the work."""
    return param(
        "",
        "price a GPU run as if on this GPU shape of the price table where the host's shape is unknown "
        "(default: DEVICEBENCH_PRICE_SHAPE)",
        key=False,
        unset=Unset("none", "an OCI GPU shape name"),
    )


def cpu_threads() -> int:
    """Every workload's: torch's CPU threads (and NumPy's BLAS threads in matmul). Not the work
    (key=False): the same work on 4 threads or 16 is one config, whose best CPU the report looks for."""
    return param(
        0,
        "CPU threads for torch (and NumPy's BLAS in matmul); 0 = torch's default (the usable cores)",
        min=0,
        max=4096,
        key=False,
    )


def model_spec() -> str:
    return spelt(
        param(
            "resnet18",
            "a torchvision model name (resnet18, vit_b_16, ...; no weights downloaded) or your own as "
            "module.path:factory or path/to/file.py:factory (a callable returning an nn.Module)",
        ),
        model_spec_text,
    )


def input_shape() -> str:
    return spelt(
        param("3x224x224", "one sample's shape CxHxW (3x224x224); the batch dimension is left out"),
        input_text,
    )


def num_classes() -> int:
    return param(
        0,
        "classes of the model's head (0 = the data folder's classes, else 1000 for a torchvision "
        "classifier, 21 for a segmentation model)",
        min=0,
        max=100_000,
    )
