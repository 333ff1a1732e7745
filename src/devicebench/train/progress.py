"""A loop's progress bar: tqdm where a terminal shows one, nothing elsewhere (CI logs stay readable)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tqdm import tqdm


@dataclass(frozen=True)
class ProgressBar:
    """A loop's tqdm bar where a terminal shows one: whether it is shown, its label and its length."""

    shown: bool = False
    desc: str = "train"
    total: int | None = None


def progress(iterable: Iterable, bar: ProgressBar) -> Iterable:
    if not bar.shown:
        return iterable
    return tqdm(iterable, desc=bar.desc, total=bar.total, leave=False, dynamic_ncols=True)
