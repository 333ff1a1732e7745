"""Classification and segmentation metrics, computed from a confusion matrix on the device.

One confusion matrix per evaluation (accumulated with `index_add_`, no per-batch host sync) gives every
figure the report needs: accuracy per class, IoU per class, Dice, pixel accuracy. Pixels labelled 255
(VOC's void border) are ignored everywhere. A class absent from both truth and prediction has no IoU
(NaN) and is left out of the mean, rather than counted as a perfect 1 or a failed 0.

Why not torchmetrics: its numbers are ours (docs/measured.md, torchmetrics), but importing it loads
torchvision's models, torch._dynamo and scipy.signal into every devicebench process, and on a GPU its
update syncs with the host on every batch (boolean-mask indexing for `ignore_index`, `torch.bincount`,
`torch.unique` in argument validation), which `confusion_matrix` avoids by design. So it is not a dependency.
"""

from __future__ import annotations

import math

import torch

from devicebench.data import IGNORE_INDEX


def confusion_matrix(
    pred: torch.Tensor, target: torch.Tensor, num_classes: int, ignore_index: int = IGNORE_INDEX
) -> torch.Tensor:
    """cm[t, p] = how many samples (or pixels) of true class t were predicted as p.

    Shapes never depend on the data, so on a GPU nothing waits for the device: ignored pixels go to one
    extra bin that is dropped at the end (boolean-mask indexing would call `nonzero`, a host sync), and
    the counts are added into a fixed-size buffer with `index_add_` (CUDA `bincount` reads the min and max
    back to size its output, two more syncs per batch).
    """
    pred, target = pred.reshape(-1).long(), target.reshape(-1).long()
    bins = num_classes * num_classes
    idx = torch.where(target != ignore_index, target * num_classes + pred, bins)
    counts = torch.zeros(bins + 1, dtype=torch.long, device=idx.device)
    counts.index_add_(0, idx, torch.ones((), dtype=torch.long, device=idx.device).expand_as(idx))
    return counts[:bins].reshape(num_classes, num_classes)


def per_class_accuracy(cm: torch.Tensor) -> list[float]:
    """Recall per class (the tutorial's "accuracy for class"); NaN where a class has no samples."""
    cm = cm.double()
    support = cm.sum(dim=1)
    return [
        float(c) if s > 0 else math.nan
        for c, s in zip(cm.diag() / support.clamp(min=1), support, strict=True)
    ]


def accuracy(cm: torch.Tensor) -> float:
    total = cm.sum()
    return float(cm.diag().sum().double() / total) if total > 0 else math.nan


def iou_per_class(cm: torch.Tensor) -> list[float]:
    """TP / (TP + FP + FN) per class; NaN when the class is absent from both truth and prediction."""
    cm = cm.double()
    tp = cm.diag()
    union = cm.sum(dim=0) + cm.sum(dim=1) - tp
    return [float(t / u) if u > 0 else math.nan for t, u in zip(tp, union, strict=True)]


def dice_per_class(cm: torch.Tensor) -> list[float]:
    """2·TP / (2·TP + FP + FN) per class; NaN when absent from both truth and prediction."""
    cm = cm.double()
    tp = cm.diag()
    denom = cm.sum(dim=0) + cm.sum(dim=1)
    return [float(2 * t / d) if d > 0 else math.nan for t, d in zip(tp, denom, strict=True)]


def nanmean(values: list[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) / len(present) if present else math.nan


def metric_name(class_name: str) -> str:
    """Class names as metric keys: lower case, spaces as `_` ("potted plant" → "potted_plant")."""
    return class_name.strip().lower().replace(" ", "_").replace("/", "_")


def soft_dice_loss(
    logits: torch.Tensor, target: torch.Tensor, ignore_index: int = IGNORE_INDEX, eps: float = 1.0
) -> torch.Tensor:
    """1 − mean soft Dice over classes, ignored pixels masked out of both prediction and truth.

    Classes absent from a batch's truth and prediction contribute a Dice of 1 through `eps`, as in
    Pytorch-UNet, so the gradient stays finite.
    """
    num_classes = logits.shape[1]
    valid = (target != ignore_index).unsqueeze(1)
    probs = logits.float().softmax(dim=1) * valid
    onehot = torch.nn.functional.one_hot(target.clamp(max=num_classes - 1).long(), num_classes)
    onehot = onehot.permute(0, 3, 1, 2).to(probs.dtype) * valid
    dims = (0, 2, 3)
    inter = (probs * onehot).sum(dims)
    sets = probs.sum(dims) + onehot.sum(dims)
    return 1.0 - ((2 * inter + eps) / (sets + eps)).mean()


def confusion_table(cm: torch.Tensor, class_names: list[str]) -> dict[str, list]:
    """The confusion matrix as table columns (`Tracker.log_table`): a row per true class, a count column
    per predicted class. The UI renders it where a nested JSON list was a wall of numbers."""
    counts = cm.long().tolist()
    return {
        "true class": list(class_names),
        **{name: [row[j] for row in counts] for j, name in enumerate(class_names)},
    }
