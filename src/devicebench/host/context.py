"""What a workload needs from its surroundings, resolved once by the CLI: the device, where the data is,
whether to draw progress bars, and this rank's place in a torchrun job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from devicebench.host.distributed import World


@dataclass(frozen=True)
class LoadedModel:
    """A logged model loaded for serving (tracking/artifacts.py loads it; a workload never imports
    MLflow): the module on the CPU, one sample's shape from its signature where it has one, its URI,
    what it is called (its logged model's name: the run that serves it is named by it), and where
    MLflow's scoring server serves it when it is asked over HTTP."""

    module: Any  # a torch.nn.Module
    input_shape: tuple[int, ...] | None
    uri: str
    name: str = ""
    url: str = ""  # where MLflow's scoring server serves it (infer's via=http), started by the CLI
    log: Path | None = None  # that server's log


@dataclass(frozen=True)
class Context:
    """What a workload needs from its surroundings, resolved once by the CLI."""

    device: torch.device
    data_root: Path
    progress: bool
    world: World | None = None  # this rank's place in a torchrun job; None: a single process
    served: LoadedModel | None = None  # infer's logged model, loaded (and so checked) before its run

    def __post_init__(self) -> None:
        """A bare `cuda` from a caller of the Python API gets its index here, as the CLI's does in
        `resolve_device`: a workload never passes an unindexed CUDA device on (device.indexed says why)."""
        if self.device.type == "cuda" and self.device.index is None:
            from devicebench.host.device import indexed  # lazy: this module is torch-free at import

            object.__setattr__(self, "device", indexed(self.device))
