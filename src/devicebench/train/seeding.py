"""Seeding a training run, and the fingerprint of the weights it starts from: the same seed gives the
same initial weights and data order on every device, and the fingerprint, logged, proves it."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Same seed, same initial weights and data order on every device (the UNet notebook's GPU run did
    different work from its CPU run; ours may not)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def weights_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of the parameters, logged so two runs can prove they started from the same weights."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
