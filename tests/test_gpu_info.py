"""gpu_info.gpu_identity against a fake NVML (the answers NVML gives for a whole GPU, a MIG slice and a GPU
without MIG), its failures, and the real NVML where CUDA exists."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from devicebench.host.gpu_info import gpu_identity

CUDA = torch.device("cuda", 1)
WHOLE = "GPU-11111111-2222-3333-4444-555555555555"
SLICE = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


class NotSupported(Exception):
    pass


def fake_nvml(mig_mode: int | None = 0, fail_init: bool = False) -> Any:
    """UUID → handle lookups as NVML does them; `mig_mode` None: the GPU has no MIG (NotSupported)."""
    calls: list[str] = []
    handles = {WHOLE: "h-whole", SLICE: "h-slice"}

    def init() -> None:
        calls.append("init")
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def mig_mode_of(handle: str) -> tuple[int, int]:
        if mig_mode is None:
            raise NotSupported("Not Supported")
        return mig_mode, mig_mode

    return SimpleNamespace(
        calls=calls,
        NVML_DEVICE_MIG_ENABLE=1,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByUUID=lambda u: handles[u],
        nvmlDeviceGetUUID=lambda h: {v: k for k, v in handles.items()}[h].encode(),
        nvmlDeviceIsMigDeviceHandle=lambda h: h == "h-slice",
        nvmlDeviceGetDeviceHandleFromMigDeviceHandle=lambda h: "h-whole",
        nvmlDeviceGetName=lambda h: b"NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        nvmlDeviceGetMigMode=mig_mode_of,
    )


def test_a_whole_gpu_is_found_by_torchs_uuid_not_by_index() -> None:
    nvml = fake_nvml(mig_mode=0)
    assert gpu_identity(CUDA, nvml=nvml, uuid=WHOLE.removeprefix("GPU-")) == {
        "gpu_uuid": WHOLE,
        "gpu_mig_mode": "disabled",
    }
    assert nvml.calls == ["init", "shutdown"]
    assert gpu_identity(CUDA, nvml=fake_nvml(mig_mode=None), uuid=WHOLE)["gpu_mig_mode"] == "unsupported"


def test_a_mig_slice_names_its_profile_and_parent() -> None:
    assert gpu_identity(CUDA, nvml=fake_nvml(mig_mode=1), uuid=SLICE.removeprefix("MIG-")) == {
        "gpu_uuid": SLICE,
        "gpu_mig_mode": "enabled",
        "gpu_parent_uuid": WHOLE,
        "gpu_mig_profile": "1g.5gb",
    }


def test_no_nvml_no_device_no_cuda_give_no_tags() -> None:
    assert gpu_identity(torch.device("cpu"), nvml=fake_nvml(), uuid=WHOLE) == {}
    failing = fake_nvml(fail_init=True)
    assert gpu_identity(CUDA, nvml=failing, uuid=WHOLE) == {}
    assert gpu_identity(CUDA, nvml=fake_nvml(), uuid="GPU-unknown") == {}
    assert gpu_identity(CUDA, nvml=fake_nvml(), uuid="") == {}
    assert gpu_identity(CUDA, uuid="GPU-no-such-device") == {}  # the real NVML: no driver, or no such GPU


@pytest.mark.gpu
def test_the_real_gpu_has_a_uuid_and_a_mig_mode() -> None:
    ident = gpu_identity(torch.device("cuda", 0))
    assert ident["gpu_uuid"].startswith(("GPU-", "MIG-")), ident
    assert ident["gpu_mig_mode"] in ("enabled", "disabled", "unsupported")
    if ident["gpu_uuid"].startswith("MIG-"):
        assert ident["gpu_mig_profile"] and ident["gpu_parent_uuid"].startswith("GPU-")
