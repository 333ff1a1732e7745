"""The fields of a data-parallel job (torchrun + DistributedDataParallel) that cifar and unet share, and
their check. None of them is the work: the same config at 1, 2 or 8 processes is one scaling series (the
report splits it by world size), so all are `key=False`.
"""

from __future__ import annotations

from devicebench.config.fields import Unset, param
from devicebench.errors import UsageError


def nproc() -> int:
    return param(
        1,
        "processes per node; > 1 relaunches under torchrun with DDP (one GPU each on cuda, gloo on cpu); "
        "batch_size is per process",
        min=1,
        max=1024,
        key=False,
    )


def nnodes() -> int:
    return param(
        1,
        "nodes in the job (> 1: every node runs the same command with its node_rank)",
        min=1,
        max=1024,
        key=False,
    )


def node_rank() -> int:
    return param(
        0,
        "this node's index, 0 to nnodes-1 (node 0 holds rank 0, which owns the run)",
        min=0,
        max=1023,
        key=False,
    )


def rdzv_endpoint() -> str:
    return param(
        "",
        "host:port of node 0 where the nodes meet (nnodes > 1; auto: this host, a free port)",
        key=False,
        unset=Unset("auto", "host:port"),
    )


def check_job_fields(cfg: object) -> None:
    """A multi-node job needs to know where to meet and which node this is; one node needs neither."""
    nnodes, node_rank, endpoint = (getattr(cfg, k) for k in ("nnodes", "node_rank", "rdzv_endpoint"))
    if node_rank >= nnodes:
        raise UsageError(
            f"{node_rank} is out of range; expected 0 to nnodes-1 = {nnodes - 1}", param="node_rank"
        )
    if nnodes > 1 and not endpoint.strip():
        raise UsageError(
            f"nnodes={nnodes} needs node 0's address as host:port (every node gives the same)",
            param="rdzv_endpoint",
        )
    if endpoint.strip():
        host, _, port = endpoint.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"{endpoint!r} is not host:port (port 1-65535)", param="rdzv_endpoint")
