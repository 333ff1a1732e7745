"""The training and evaluation loop shared by the cifar and unet workloads.

It measures what a report needs to say *why* a GPU gained little: the time the step loop spent waiting
for the next batch (`data_wait`) apart from the rest (compute, launches, optimizer), with one device
synchronisation per epoch rather than per step. Losses stay on the device and reach the host in one
transfer per flush, so logging never stalls the GPU queue (`.item()` per step would).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import random
import resource
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from devicebench.errors import Diverged
from devicebench.host.timing import Timer
from devicebench.schema import PEAK_BYTES, PEAK_RSS_BYTES, TRAIN_LOSS
from devicebench.tracking.protocol import Tracker
from devicebench.train.metrics import confusion_matrix


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


def batch_sizes(n: int, batch_size: int, drop_last: bool = False) -> list[int]:
    """The distinct batch sizes one pass over `n` samples yields: the full one and the last, shorter one."""
    sizes = [min(batch_size, n)] if n else []
    tail = n % batch_size if n > batch_size else 0
    if tail and not drop_last:
        sizes.append(tail)
    return sizes


def warm_up(
    model: torch.nn.Module,
    make_optimizer: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    loader: Iterable,
    device: torch.device,
    *,
    amp_dtype: torch.dtype | None,
    channels_last: bool,
    fp16_scaler: bool,
    train_sizes: Iterable[int],
    eval_sizes: Iterable[int],
    in_place: bool = False,
) -> float:
    """Untimed training steps and eval forwards on a *copy* of the model, with its own optimizer, on the
    first batch of `loader` (the unshuffled eval loader: the training order is not touched); seconds.

    What a GPU does once per process lands here instead of in `time/train_s` and `time/eval_s`: the
    cuDNN and cuBLAS handles, lazily loaded kernels, the allocator's first blocks and, for a compiled
    model, compiling the train graph and the eval graph (`inference_mode` needs its own) at every batch
    size an epoch will meet (a shorter last batch recompiles). The copy shares the compiled code with the
    real model but not its weights, and the RNG is forked, so the real model, its optimizer and the
    seeded data order are exactly as if no warm-up had run.

    `in_place` warms up the model itself and then restores its weights and buffers: a DDP model (which
    cannot be copied) on every rank at once, so its first all-reduces and buffer broadcasts are warmed too.
    """
    timer = Timer(device)
    start = timer.now()
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()} if in_place else None
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        x_all, y_all = next(iter(loader))  # a DataLoader draws its workers' base seed from the global RNG
        shadow = model if in_place else copy.deepcopy(model)
        optimizer = make_optimizer(shadow.parameters())
        scaler = torch.amp.GradScaler(device.type) if fp16_scaler else None
        shadow.train()
        for size in sorted({s for s in train_sizes if s > 0}, reverse=True):
            x, y = _on_device(*_rows(x_all, y_all, size), device, channels_last)
            train_step(shadow, x, y, optimizer, loss_fn, device, amp_dtype, scaler)
        shadow.eval()
        with torch.inference_mode():
            for size in sorted({s for s in eval_sizes if s > 0}, reverse=True):
                x, y = _on_device(*_rows(x_all, y_all, size), device, channels_last)
                with autocast(device, amp_dtype):
                    logits = shadow(x)
                    loss_fn(logits, y)
                confusion_matrix(logits.argmax(dim=1), y, max(int(logits.shape[1]), 1))
        if saved is not None:
            model.load_state_dict(saved)
        seconds = timer.now() - start
        del shadow, optimizer
    return seconds


def train_step(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: torch.device,
    amp_dtype: torch.dtype | None,
    scaler: torch.amp.GradScaler | None,
) -> torch.Tensor:
    """One optimizer step (through the GradScaler for fp16); the loss stays on the device."""
    optimizer.zero_grad(set_to_none=True)
    with autocast(device, amp_dtype):
        loss = loss_fn(model(x), y)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    return loss


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict[str, float]:
    """The process's peak RSS (`memory/peak_rss_bytes`) and, on a CUDA device, the allocator's peak
    since the last reset (`memory/peak_bytes`).

    A device without its own memory figure logs none: on the CPU a `memory/peak_bytes` repeating the
    RSS read as a device measurement beside a GPU's, and MPS offers no peak to read.
    """
    rss = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024.0  # Linux reports KiB
    if device.type == "cuda":
        return {
            PEAK_BYTES: float(torch.cuda.max_memory_allocated(device)),
            PEAK_RSS_BYTES: rss,
        }
    return {PEAK_RSS_BYTES: rss}


def progress(iterable: Iterable, enabled: bool, desc: str, total: int | None = None) -> Iterable:
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True)


class LossLog:
    """Every step's loss, left on the device as it is and brought to the host in batches: the mean of each
    `every` steps is logged as `key`, and the epoch's mean is kept for `train/epoch_loss`.

    A step costs a list append, no kernel and no sync, so the timed loop does what a bare loop does (a
    running sum on the device cost two launches a step, a visible share of a launch-bound GPU step).
    Every `flush_steps` steps and at each epoch's end, one `stack` and one transfer turn the pending losses
    into numbers; the window means and the divergence check are computed there, on the host. `reduce`
    turns a stack of this process's losses into the job's (the mean over ranks, in a data-parallel job):
    every rank flushes at the same steps, so the collective lines up."""

    def __init__(
        self,
        tracker: Tracker,
        every: int,
        key: str = TRAIN_LOSS,
        flush_steps: int = 1024,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.tracker, self.every, self.key = tracker, max(every, 1), key
        self.flush_steps, self.reduce = max(flush_steps, 1), reduce
        self._pending: list[torch.Tensor] = []
        self._steps: list[int] = []
        self._window = (0.0, 0)  # sum and count of the window being filled (it may span epochs)
        self._epoch = (0.0, 0)  # sum and count of this epoch's losses

    def begin_epoch(self) -> None:
        self._epoch = (0.0, 0)

    def epoch_mean(self) -> float:
        """The mean loss of the steps since `begin_epoch` that have been flushed (NaN for none)."""
        total, count = self._epoch
        return total / count if count else math.nan

    def add(self, loss: torch.Tensor, step: int) -> None:
        self._pending.append(loss.detach())
        self._steps.append(step)
        if len(self._pending) >= self.flush_steps:
            self.flush()

    def flush(self, collective: bool = True) -> None:
        """One host transfer for all pending losses; a NaN/inf window raises Diverged after the finite
        ones before it are logged (checked here, where the values are on the host anyway).
        `collective=False` logs this process's own values: on the way out of a failure, where the
        other ranks may never reach the same flush."""
        if not self._pending:
            return
        stacked = torch.stack(self._pending).float()
        if collective and self.reduce is not None:
            stacked = self.reduce(stacked)
        values, steps = stacked.tolist(), self._steps
        self._pending, self._steps = [], []
        for step, value in zip(steps, values, strict=True):
            self._epoch = (self._epoch[0] + value, self._epoch[1] + 1)
            total, count = self._window[0] + value, self._window[1] + 1
            self._window = (total, count)
            if count == self.every:
                self._window = (0.0, 0)
                if not math.isfinite(total / count):
                    raise Diverged(step)
                self.tracker.log_metrics({self.key: total / count}, step=step)


@dataclass
class EpochResult:
    seconds: float
    data_wait_s: float
    samples: int
    steps: int
    mean_loss: float


def _rows(x: torch.Tensor, y: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `n` rows of a batch, repeated when it has fewer (a short eval set, a bigger train batch)."""
    reps = -(-n // x.shape[0])
    return torch.cat([x] * reps)[:n], torch.cat([y] * reps)[:n]


def _on_device(
    x: torch.Tensor, y: torch.Tensor, device: torch.device, channels_last: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.to(device, non_blocking=True)
    y = y.to(device, non_blocking=True)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, y


def _timed_batches(
    loader: Iterable, device: torch.device, channels_last: bool, wait: list[float]
) -> Iterator:
    """Yield batches on the device, adding the time spent waiting for each to `wait[0]`."""
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            return
        x, y = _on_device(x, y, device, channels_last)
        wait[0] += time.perf_counter() - t0
        yield x, y


def train_epoch(
    model: torch.nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: torch.device,
    *,
    amp_dtype: torch.dtype | None,
    channels_last: bool,
    loss_log: LossLog,
    first_step: int,
    show_progress: bool = False,
    desc: str = "train",
    total: int | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> EpochResult:
    """One epoch; the clock is read after a device synchronisation at both ends.

    Per step the loop does what a bare training loop does, plus only host bookkeeping: two clock reads
    around the batch fetch (the data-wait split), a list append for the loss, and a tqdm tick where a
    terminal shows one. No kernel and no sync of its own: on a launch-bound GPU step (the tutorial Net at
    batch 256 takes ~1.5 ms on an H100) any device work added here would show in the throughput.
    """
    model.train()
    timer = Timer(device)
    wait = [0.0]
    steps = samples = 0
    loss_log.begin_epoch()
    start = timer.now()
    batches = progress(_timed_batches(loader, device, channels_last, wait), show_progress, desc, total)
    try:
        for x, y in batches:
            loss = train_step(model, x, y, optimizer, loss_fn, device, amp_dtype, scaler)
            steps += 1
            samples += x.shape[0]
            loss_log.add(loss, first_step + steps)
    except BaseException:  # SIGTERM, Ctrl-C, a failure: the points measured so far are kept, not dropped
        with contextlib.suppress(Exception):  # a broken device must not hide the original error
            loss_log.flush(collective=False)
        raise
    seconds = timer.now() - start
    loss_log.flush()
    mean = loss_log.epoch_mean() if steps else 0.0
    if not math.isfinite(mean):  # a window LossLog has not closed (fewer than `every` steps)
        raise Diverged(first_step + steps)
    return EpochResult(seconds=seconds, data_wait_s=wait[0], samples=samples, steps=steps, mean_loss=mean)


@dataclass
class EvalResult:
    confusion: torch.Tensor
    mean_loss: float
    seconds: float
    data_wait_s: float
    samples: int


@torch.inference_mode()
def evaluate(
    model: torch.nn.Module,
    loader: Iterable,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: torch.device,
    num_classes: int,
    *,
    amp_dtype: torch.dtype | None,
    channels_last: bool,
    show_progress: bool = False,
    total: int | None = None,
) -> EvalResult:
    """Loss and a confusion matrix over the whole loader, in its order; restores train mode afterwards."""
    was_training = model.training
    model.eval()
    timer = Timer(device)
    wait = [0.0]
    cm = torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)
    loss_sum = torch.zeros((), device=device)
    batches = samples = 0
    start = timer.now()
    for x, y in progress(_timed_batches(loader, device, channels_last, wait), show_progress, "eval", total):
        with autocast(device, amp_dtype):
            logits = model(x)
            loss_sum += loss_fn(logits, y).float()
        cm += confusion_matrix(logits.argmax(dim=1), y, num_classes)
        batches += 1
        samples += x.shape[0]
    seconds = timer.now() - start
    model.train(was_training)
    return EvalResult(
        confusion=cm.cpu(),
        mean_loss=float(loss_sum / max(batches, 1)),
        seconds=seconds,
        data_wait_s=wait[0],
        samples=samples,
    )
