"""The figures a training run logs beside its tables.

Drawn with matplotlib's `Figure` itself, not pyplot: no GUI backend is chosen, no figure is kept in a
global registry to be closed later, and the tracker saves it as it would any other (`savefig`).
"""

from __future__ import annotations

import torch
from matplotlib.figure import Figure


def confusion_figure(cm: torch.Tensor, class_names: list[str], title: str) -> Figure:
    """A row-normalised confusion matrix (recall per true class) as a matplotlib figure."""
    m = cm.double()
    norm = (m / m.sum(dim=1, keepdim=True).clamp(min=1)).numpy()
    n = len(class_names)
    size = max(5.0, 0.45 * n + 2)
    fig = Figure(figsize=(size, size))
    ax = fig.subplots()
    ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(n), class_names, rotation=90)
    ax.set_yticks(range(n), class_names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    if n <= 12:
        for i in range(n):
            for j in range(n):
                ax.text(
                    j,
                    i,
                    int(m[i, j]),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if norm[i, j] > 0.5 else "black",
                )
    fig.tight_layout()
    return fig
