"""Device resolution (no silent fallback) and the host fingerprint, OCI metadata included."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from devicebench.errors import DeviceUnavailable, UsageError
from devicebench.host.cpu import cpu_budget, numpy_blas, thread_facts
from devicebench.host.device import (
    ResolvedDevice,
    activate,
    host_fingerprint,
    indexed,
    no_cuda_reason,
    oci_metadata,
    require_native_bf16,
    resolve_device,
)
from devicebench.schema import check_device_spelling
from servers import fake_oci_metadata

# What OCI's instance metadata service v2 returns on a GPU VM (abridged, values made up).
OCI_DOC = {
    "availabilityDomain": "Uocm:PHX-AD-1",
    "faultDomain": "FAULT-DOMAIN-2",
    "compartmentId": "ocid1.compartment.oc1..aaaaaaaaexample",
    "displayName": "devicebench-a10",
    "hostname": "devicebench-a10",
    "id": "ocid1.instance.oc1.phx.anyhqljexample",
    "image": "ocid1.image.oc1.phx.aaaaaaaaexample",
    "region": "phx",
    "canonicalRegionName": "us-phoenix-1",
    "ociAdName": "phx-ad-1",
    "regionInfo": {"realmKey": "oc1", "regionKey": "PHX", "regionIdentifier": "us-phoenix-1"},
    "shape": "VM.GPU.A10.1",
    "shapeConfig": {"ocpus": 15.0, "memoryInGBs": 240.0, "gpus": 1, "gpuDescription": "NVIDIA A10"},
    "state": "Running",
    "timeCreated": 1763000000000,
}


def test_cpu_and_auto_resolve_here() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


def test_cuda_without_a_gpu_is_an_error_that_says_what_torch_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # what a CPU host's torch answers
    with pytest.raises(DeviceUnavailable) as err:
        resolve_device("cuda")
    msg = str(err.value)
    assert f"torch {torch.__version__} finds no CUDA device" in msg
    assert "device=auto" in msg


def test_a_cuda_index_beyond_the_count_is_an_error() -> None:
    with pytest.raises(DeviceUnavailable, match="cuda:99"):
        resolve_device("cuda:99")


def test_a_run_resolves_its_device_once_and_keeps_the_error_for_its_run() -> None:
    """The run names itself by the device it resolved, and one that is not here raises its error only
    once the run exists (so it ends FAILED), without resolving again."""
    here = ResolvedDevice.of("cpu")
    assert here.get() == torch.device("cpu") and here.name == "cpu"
    missing = ResolvedDevice.of("cuda:99")
    assert missing.name == "cuda:99"
    with pytest.raises(DeviceUnavailable, match="cuda:99"):
        missing.get()


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "tpu", "", "cuda:-1"])
def test_misspelt_devices_list_what_is_allowed(bad: str) -> None:
    with pytest.raises(UsageError, match="allowed: cpu, cuda, cuda:N, mps, auto"):
        check_device_spelling(bad)


@pytest.fixture
def oci_server() -> Iterator[str]:
    """A metadata service on 127.0.0.1 that, like OCI's v2, wants `Authorization: Bearer Oracle`."""

    with fake_oci_metadata(lambda: OCI_DOC) as url:
        yield url


def test_oci_metadata_gives_shape_region_domain_and_size(oci_server: str) -> None:
    """The size (shapeConfig) prices a flex shape per OCPU and GB (issue 17)."""
    assert oci_metadata(oci_server, 2.0) == {
        "oci.shape": "VM.GPU.A10.1",
        "oci.region": "us-phoenix-1",
        "oci.availability_domain": "Uocm:PHX-AD-1",
        "oci.ocpus": "15.0",
        "oci.memory_gb": "240.0",
    }


def test_fingerprint_carries_host_facts_and_oci_tags(oci_server: str) -> None:
    fp = host_fingerprint(torch.device("cpu"), oci_server, 2.0)
    for key in (
        "hostname",
        "cpu_model",
        "cpu_count",
        "torch_threads",
        "gpu_count",
        "gpu_name",
        "torch_cuda_build",
        "torch",
    ):
        assert fp[key], key
    assert fp["torch"] == torch.__version__
    assert fp["oci.shape"] == "VM.GPU.A10.1"
    assert fp["oci.region"] == "us-phoenix-1"
    assert all(isinstance(v, str) for v in fp.values())


def test_a_silent_metadata_service_costs_under_a_second() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    port = listener.getsockname()[1]
    try:
        t0 = time.monotonic()
        assert oci_metadata(f"http://127.0.0.1:{port}/opc/v2/instance/", 0.5) == {}
        assert time.monotonic() - t0 < 1.0
    finally:
        listener.close()


def test_an_absent_metadata_service_costs_under_a_second() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    t0 = time.monotonic()
    assert oci_metadata(f"http://127.0.0.1:{port}/", 0.5) == {}
    assert time.monotonic() - t0 < 1.0
    assert "oci.shape" not in host_fingerprint(torch.device("cpu"), f"http://127.0.0.1:{port}/", 0.5)


@pytest.mark.gpu
def test_gpu_fingerprint_names_the_gpu() -> None:
    fp = host_fingerprint(resolve_device("cuda"), "http://127.0.0.1:9/", 0.2)
    assert fp["gpu_name"] != "none"
    assert float(fp["gpu_memory_gb"]) > 0
    assert fp["driver"] != "none"
    assert fp["torch_cuda_build"] == torch.version.cuda and "cuda" not in fp
    major, minor = fp["cuda_driver"].split(".")  # the newest CUDA the driver runs, e.g. 12.4
    assert int(major) >= 10 and int(minor) >= 0
    assert int(fp["cudnn"]) > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a host without a GPU")
def test_without_a_gpu_the_fingerprint_names_the_torch_build_and_no_cuda_runtime() -> None:
    """torch.version.cuda is the CUDA the wheel was built for (13.0 on this GPU-less host): it is
    `torch_cuda_build`, never a bare `cuda` that reads as the CUDA this host runs."""
    fp = host_fingerprint(torch.device("cpu"), "http://127.0.0.1:9/", 0)
    assert fp["torch_cuda_build"] == str(torch.version.cuda or "none")
    assert not {"cuda", "cuda_driver", "driver", "cudnn"} & set(fp), fp
    assert fp["gpu_count"] == "0" and fp["gpu_name"] == "none"


def test_fingerprint_names_every_cpu_thread_pool_and_the_usable_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CPU half of every speedup depends on these; a variable someone set to tune a pool shows."""
    import numpy as np

    np.ones((8, 8)) @ np.ones((8, 8))  # NumPy's BLAS is loaded in any process that measures with it
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    facts = thread_facts()
    assert facts["torch_threads"] == str(torch.get_num_threads())
    assert int(facts["cpu_affinity"]) == len(os.sched_getaffinity(0))
    assert facts["blas"].split()[0] in {"openblas", "mkl", "blis"}, facts
    assert int(facts["blas_threads"]) >= 1
    assert facts["env.OMP_WAIT_POLICY"] == "PASSIVE"
    assert "env.MKL_NUM_THREADS" not in facts


# What NumPy 2.5.2's manylinux wheel (the H100 host's) records and loads, copied from its files.
NUMPY_25_CONFIG = {
    "Build Dependencies": {
        "blas": {
            "name": "scipy-openblas",
            "found": True,
            "version": "0.3.34.0.0",
            "detection method": "pkgconfig",
            "openblas configuration": "OpenBLAS 0.3.34.0.0  USE64BITINT DYNAMIC_ARCH NO_AFFINITY Haswell",
        },
        "lapack": {"name": "scipy-openblas", "found": True, "version": "0.3.34.0.0"},
    }
}
NUMPY_25_MAPS = (
    "7f2a00000000-7f2a00200000 r-xp 00000000 fd:00 1234 "
    "/usr/local/lib/python3.12/dist-packages/numpy.libs/libscipy_openblas64_-61654e39.so\n"
    "7f2a10000000-7f2a10100000 r-xp 00000000 fd:00 1235 /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0\n"
)


def test_blas_is_named_from_numpy_itself_where_threadpoolctl_does_not_know_numpy_2s_openblas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """H100 host, 2026-11-24: numpy 2.5.2 beside a system threadpoolctl older than 3.5, and every run
    logged `host.blas = none`. NumPy's build record and the loaded library name it instead."""
    asked = []
    facts = numpy_blas(NUMPY_25_CONFIG, NUMPY_25_MAPS, lambda lib: asked.append(lib) or 16)
    assert facts == {"blas": "openblas 0.3.34.0.0", "blas_threads": "16"}
    assert asked == ["/usr/local/lib/python3.12/dist-packages/numpy.libs/libscipy_openblas64_-61654e39.so"]
    assert numpy_blas({"Build Dependencies": {}}, NUMPY_25_MAPS) == {}
    # This process for real, with threadpoolctl answering as an old one does for NumPy 2 (no BLAS pool).
    import numpy as np
    import threadpoolctl

    np.ones((8, 8)) @ np.ones((8, 8))
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [])
    real = thread_facts()
    assert real["blas"].startswith("openblas ") and int(real["blas_threads"]) >= 1, real


def test_cpu_budget_says_when_threads_and_loader_workers_exceed_the_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert cpu_budget(cores, 0)["cpu.oversubscribed"] == "false"
    over = cpu_budget(cores, 2)
    assert over == {
        "cpu.usable_cores": str(cores),
        "cpu.busy_threads": str(cores + 2),
        "cpu.oversubscribed": "true",
    }


@pytest.mark.parametrize(
    ("host", "said"),
    [
        ({"torch_cuda": None}, "a CPU-only torch build"),
        ({"visible": ""}, "CUDA_VISIBLE_DEVICES='' hides every GPU from this process"),
        ({"visible": "-1"}, "CUDA_VISIBLE_DEVICES='-1' hides every GPU"),
        ({"driver_files": False}, "no NVIDIA driver"),
        (
            {"driver_cuda": (12, 4)},
            "the NVIDIA driver supports CUDA up to 12.4, older than this torch build's CUDA 13.0: "
            "update the driver or install a torch built for CUDA <= 12.4",
        ),
        ({"visible": "3"}, "CUDA_VISIBLE_DEVICES='3' names no GPU the driver has"),
        ({"driver_cuda": (13, 1)}, "the driver reports no usable GPU"),
        ({"driver_cuda": None}, "the driver reports no usable GPU"),
    ],
)
def test_no_cuda_reason_points_at_the_fix(host: dict, said: str) -> None:
    facts = {"torch_cuda": "13.0", "visible": None, "driver_files": True, "driver_cuda": (13, 0), **host}
    assert no_cuda_reason(**facts).startswith(said)


def test_a_resolved_gpu_becomes_the_current_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cuda:1` on a two-GPU host: torch's current device must follow, or events land on GPU 0."""
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    device = resolve_device("cuda:1")
    activate(device)
    assert chosen == [torch.device("cuda", 1)]
    activate(torch.device("cpu"))
    assert len(chosen) == 1


def test_a_bare_cuda_gets_its_index_once_where_it_is_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """H100 host, 2026-11-24: `matmul.run` given `torch.device("cuda")` raised in its isolated child
    ("Expected a torch.device with a specified index"). Every way in gives the index: the CLI's
    resolution, `auto`, and a `Context` built by a caller of the Python API; matmul's child spec too."""
    from devicebench.config.fields import build_config
    from devicebench.host.context import Context
    from devicebench.workloads.matmul import Config
    from devicebench.workloads.matmul_series import series

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert indexed(torch.device("cuda")) == torch.device("cuda", 1)
    assert indexed(torch.device("cuda", 0)) == torch.device("cuda", 0)
    assert indexed(torch.device("cpu")) == torch.device("cpu")
    ctx = Context(torch.device("cuda"), Path("."), False)
    assert ctx.device == torch.device("cuda", 1)
    cfg = build_config(Config, {"device": "cuda", "sizes": "64", "backends": "torch"})
    assert [spec.device for spec in series(cfg, str(ctx.device))] == ["cuda:1"]


@pytest.mark.gpu
def test_activate_moves_the_current_device_for_real() -> None:
    last = torch.device("cuda", torch.cuda.device_count() - 1)
    activate(last)
    assert torch.cuda.current_device() == last.index
    activate(torch.device("cuda", 0))


def test_bf16_on_a_gpu_older_than_ampere_is_refused_even_where_torch_emulates_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A V100 (OCI VM.GPU3) says is_bf16_supported() (emulation counts); its figure would not be bf16."""
    from devicebench.host.precision import check_precision

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla V100-SXM2-16GB")
    with pytest.raises(UsageError, match=r"--precision: Tesla V100-SXM2-16GB \(compute capability 7.0\)"):
        check_precision("bf16", torch.device("cuda", 0))
    with pytest.raises(UsageError, match=r"--dtypes: .* no native bfloat16"):
        require_native_bf16(torch.device("cuda", 0), "dtypes")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 0))
    assert check_precision("bf16", torch.device("cuda", 0)) == torch.bfloat16
    require_native_bf16(torch.device("cpu"), "dtypes")  # the CPU's bf16 is what it is: measured as such


def test_oci_metadata_keeps_only_names_as_oci_spells_them() -> None:
    """Issue 40, item 11: the metadata answer's shape, region and domain were stored as they came, so
    escape codes, matplotlib's `$...$` and `=cmd` reached a run's tags (and a report's chart titles)."""
    hostile = {
        "shape": "VM.GPU.A10.1\x1b]0;owned\x07",
        "canonicalRegionName": '=HYPERLINK("http://evil.example")',
        "availabilityDomain": "AD $x^{$",
        "shapeConfig": {"ocpus": 15.0, "memoryInGBs": 240.0},
    }
    with fake_oci_metadata(lambda: hostile) as url:
        assert oci_metadata(url, 2.0) == {"oci.ocpus": "15.0", "oci.memory_gb": "240.0"}
