"""metrics.py on hand-computed cases: the figures every report quotes must be right by construction.

The segmentation case is small enough to check on paper: an ignored pixel that would change class 0's
counts if it were not ignored, a class present only in the prediction (IoU 0, counted), and a class absent
from both (NaN, left out of the mean).
"""

from __future__ import annotations

import math

import pytest
import torch

from devicebench.data import IGNORE_INDEX
from devicebench.train.metrics import (
    accuracy,
    confusion_matrix,
    dice_per_class,
    iou_per_class,
    metric_name,
    nanmean,
    per_class_accuracy,
    soft_dice_loss,
)
from devicebench.workloads.unet import segmentation_loss

V = IGNORE_INDEX
# 2×4 masks; (0, 3) is void in truth and predicted 0. Five classes: 3 is predicted only, 4 is absent.
TRUTH = torch.tensor([[[0, 0, 1, V], [2, 2, 1, 1]]])
PRED = torch.tensor([[[0, 1, 1, 0], [2, 0, 1, 3]]])


def seg_cm() -> torch.Tensor:
    return confusion_matrix(PRED, TRUTH, 5)


# ----------------------------------------------------------------------------------------- classification


def test_confusion_matrix_counts_true_rows_predicted_columns() -> None:
    target = torch.tensor([0, 1, 2, 1, 1])
    pred = torch.tensor([0, 1, 2, 2, 1])
    cm = confusion_matrix(pred, target, 3)
    assert cm.tolist() == [[1, 0, 0], [0, 2, 1], [0, 0, 1]]
    assert cm.dtype == torch.long


def test_per_class_accuracy_is_recall_and_nan_without_samples() -> None:
    target = torch.tensor([0, 1, 2, 1, 1])
    pred = torch.tensor([0, 1, 2, 2, 1])
    acc = per_class_accuracy(confusion_matrix(pred, target, 4))
    assert acc[:3] == pytest.approx([1.0, 2 / 3, 1.0])
    assert math.isnan(acc[3])  # class 3 has no samples: no accuracy, not 0
    assert accuracy(confusion_matrix(pred, target, 4)) == pytest.approx(4 / 5)


def test_accuracy_of_an_empty_matrix_is_nan() -> None:
    assert math.isnan(accuracy(torch.zeros(3, 3, dtype=torch.long)))


def test_confusion_matrix_ignores_the_void_label_and_a_custom_one() -> None:
    target = torch.tensor([0, V, 1, 1])
    pred = torch.tensor([1, 1, 1, 0])
    assert confusion_matrix(pred, target, 2).tolist() == [[0, 1], [1, 1]]
    assert confusion_matrix(pred, target, 256, ignore_index=0).sum() == 3  # only label 0 dropped


def _reference_cm(pred: torch.Tensor, target: torch.Tensor, n: int) -> torch.Tensor:
    """The obvious formula (mask, then bincount), to hold the sync-free version to it."""
    keep = target.reshape(-1) != V
    idx = target.reshape(-1)[keep] * n + pred.reshape(-1)[keep]
    return torch.bincount(idx, minlength=n * n).reshape(n, n)


def test_confusion_matrix_equals_the_masked_bincount_on_random_masks() -> None:
    g = torch.Generator().manual_seed(3)
    target = torch.randint(0, 21, (4, 17, 19), generator=g)
    target[torch.rand(target.shape, generator=g) < 0.2] = V
    pred = torch.randint(0, 21, (4, 17, 19), generator=g)
    cm = confusion_matrix(pred, target, 21)
    assert cm.dtype == torch.long
    assert torch.equal(cm, _reference_cm(pred, target, 21))


def test_confusion_matrix_has_no_data_dependent_shape() -> None:
    """On the meta device an op whose output size depends on the values (boolean-mask indexing →
    `nonzero`, `bincount`) cannot run at all; on a GPU each such op is a host sync per batch."""
    pred = torch.zeros(2, 8, 8, dtype=torch.long, device="meta")
    target = torch.zeros(2, 8, 8, dtype=torch.uint8, device="meta")
    assert confusion_matrix(pred, target, 21).shape == (21, 21)


@pytest.mark.gpu
def test_confusion_matrix_on_cuda_never_syncs_and_matches_the_cpu() -> None:
    g = torch.Generator().manual_seed(5)
    target = torch.randint(0, 21, (8, 64, 64), generator=g)
    target[torch.rand(target.shape, generator=g) < 0.1] = V
    pred = torch.randint(0, 21, (8, 64, 64), generator=g)
    tc, pc = target.cuda(), pred.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        cm = confusion_matrix(pc, tc, 21)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(cm.cpu(), confusion_matrix(pred, target, 21))


# ----------------------------------------------------------------------------------------- segmentation


def test_confusion_matrix_on_masks() -> None:
    cm = seg_cm()
    assert cm.sum() == 7  # 8 pixels, one void
    assert cm[0].tolist() == [1, 1, 0, 0, 0]
    assert cm[1].tolist() == [0, 2, 0, 1, 0]
    assert cm[2].tolist() == [1, 0, 1, 0, 0]
    assert cm[3:].sum() == 0


def test_iou_per_class_by_hand() -> None:
    iou = iou_per_class(seg_cm())
    # class 0: TP 1, union 2 + 2 - 1 = 3; class 1: 2 / (3 + 3 - 2); class 2: 1 / (2 + 1 - 1)
    assert iou[:4] == pytest.approx([1 / 3, 0.5, 0.5, 0.0])  # class 3 only predicted: 0, and it counts
    assert math.isnan(iou[4])  # class 4 absent from both: undefined, not 0 or 1
    assert nanmean(iou) == pytest.approx((1 / 3 + 0.5 + 0.5 + 0.0) / 4)


def test_dice_per_class_by_hand() -> None:
    dice = dice_per_class(seg_cm())
    assert dice[:4] == pytest.approx([2 / 4, 4 / 6, 2 / 3, 0.0])
    assert math.isnan(dice[4])
    assert nanmean(dice) == pytest.approx((0.5 + 4 / 6 + 2 / 3) / 4)


def test_pixel_accuracy_skips_void_pixels() -> None:
    assert accuracy(seg_cm()) == pytest.approx(4 / 7)


def test_a_void_pixel_changes_nothing_whatever_is_predicted_there() -> None:
    other = PRED.clone()
    other[0, 0, 3] = 4  # a prediction of the absent class on the void pixel
    assert torch.equal(confusion_matrix(other, TRUTH, 5), seg_cm())
    assert math.isnan(iou_per_class(confusion_matrix(other, TRUTH, 5))[4])


def test_perfect_prediction_scores_one_on_present_classes_only() -> None:
    target = torch.tensor([[0, 0, V], [2, 2, 0]])
    cm = confusion_matrix(torch.tensor([[0, 0, 1], [2, 2, 0]]), target, 4)
    iou = iou_per_class(cm)
    assert iou[0] == iou[2] == 1.0
    assert math.isnan(iou[1]) and math.isnan(iou[3])  # predicted 1 only on the void pixel
    assert nanmean(iou) == 1.0 and nanmean(dice_per_class(cm)) == 1.0


def test_nanmean() -> None:
    assert nanmean([1.0, math.nan, 0.0]) == 0.5
    assert math.isnan(nanmean([math.nan]))
    assert math.isnan(nanmean([]))


def test_metric_name() -> None:
    assert metric_name("potted plant") == "potted_plant"
    assert metric_name(" TV/Monitor ") == "tv_monitor"
    assert metric_name("diningtable") == "diningtable"


# ----------------------------------------------------------------------------------------- losses


def _logits_for(mask: torch.Tensor, classes: int, scale: float = 30.0) -> torch.Tensor:
    onehot = torch.nn.functional.one_hot(mask.clamp(max=classes - 1), classes).permute(0, 3, 1, 2)
    return onehot.float() * scale


def test_soft_dice_is_zero_for_a_confident_perfect_prediction() -> None:
    target = torch.tensor([[[0, 1], [2, V]]])
    assert soft_dice_loss(_logits_for(target, 3), target).item() == pytest.approx(0.0, abs=1e-6)
    wrong = _logits_for((target + 1) % 3, 3)
    assert soft_dice_loss(wrong, target).item() > 0.5


def test_soft_dice_ignores_logits_at_void_pixels() -> None:
    target = torch.tensor([[[0, 1], [2, V]]])
    a = torch.randn(1, 3, 2, 2)
    b = a.clone()
    b[0, :, 1, 1] = torch.tensor([100.0, -100.0, 5.0])
    assert soft_dice_loss(a, target).item() == pytest.approx(soft_dice_loss(b, target).item())


@pytest.mark.parametrize("all_void", [False, True])
def test_dice_plus_ce_gradient_is_finite_with_void_pixels(all_void: bool) -> None:
    torch.manual_seed(0)
    target = torch.randint(0, 21, (2, 16, 16))
    target[:, :, :3] = V  # a void band, as VOC draws along object outlines
    if all_void:
        target[:] = V
    logits = torch.randn(2, 21, 16, 16, requires_grad=True)
    loss = segmentation_loss(logits, target)
    loss.backward()
    assert torch.isfinite(loss)
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    # void pixels get no gradient from either term
    assert logits.grad[:, :, :, :3].abs().max() == 0
    if not all_void:
        assert logits.grad.abs().sum() > 0


def test_soft_dice_gradient_is_finite_in_bf16_autocast() -> None:
    target = torch.randint(0, 5, (1, 8, 8))
    target[0, 0] = V
    logits = torch.randn(1, 5, 8, 8, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = soft_dice_loss(logits.bfloat16(), target)
    loss.backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
