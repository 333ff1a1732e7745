"""torchvision's `ImageFolder` with a walk that stays where it was pointed and images that name
themselves when they do not decode.

torchvision walks each class folder with `os.walk(followlinks=True)`: a link `up -> ..` inside a class
folder is followed about 40 levels deep until the system says ELOOP, every image found on the way
labelled with that class, and the same link in two class folders never ends. Here a class folder is
walked as its own root: a folder link is followed only to a folder inside that class folder which is not
one of the link's own ancestors; one that leaves it (into another class: its images would be labelled
twice) or loops is refused, naming the link. A link to a file is followed wherever it points: a folder of
links to the files of a shared copy is how splits are often made. Each real folder is read once.

A file that does not decode (a truncated JPEG) is a `DataUnavailable` naming the file, raised in the
DataLoader worker that read it; `data.loader.one_line_data_errors` keeps its one line in the main process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS, default_loader

from devicebench.errors import DataUnavailable


def _link_error(link: Path, target: Path, why: str) -> DataUnavailable:
    return DataUnavailable(
        f"{link} is a link to {target}, {why}; the folder walk follows no such link: replace it with the "
        "files or folders themselves, or remove it",
        param="data_dir",
    )


def walk_files(top: Path) -> list[Path]:
    """Every file under `top` in torchvision's order (folders by their path's text, each one's files by
    name), following folder links only inside `top` and never to an ancestor of the link (a loop);
    either is a `DataUnavailable` naming the link."""
    root = top.resolve()
    seen = {root}
    todo = [(top, root)]  # (the path as reached, its real path)
    found: list[tuple[str, list[Path]]] = []
    while todo:
        folder, real = todo.pop()
        with os.scandir(folder) as scan:
            entries = sorted(scan, key=lambda e: e.name)
        files = []
        for entry in entries:
            path = Path(entry.path)
            if not entry.is_dir():  # follows a link: a link to a file is the file
                files.append(path)
                continue
            target = path.resolve()
            if entry.is_symlink():
                if target == real or target in real.parents:
                    raise _link_error(path, target, "one of its own parent folders (a loop)")
                if not target.is_relative_to(root):
                    raise _link_error(path, target, f"outside the class folder {top}")
            if target not in seen:
                seen.add(target)
                todo.append((path, target))
        found.append((str(folder), files))
    return [path for _, files in sorted(found, key=lambda f: f[0]) for path in files]


def class_samples(
    directory: str | Path, class_to_idx: dict[str, int], is_valid: Callable[[str], bool]
) -> list[tuple[str, int]]:
    """(path, class index) for every valid file of every class folder, each walked by `walk_files`."""
    folders = {name: Path(directory, name) for name in sorted(class_to_idx) if Path(directory, name).is_dir()}
    _apart(Path(directory), folders)
    samples = []
    for name, folder in folders.items():
        samples += [(str(p), class_to_idx[name]) for p in walk_files(folder) if is_valid(str(p))]
    return samples


def _apart(split: Path, folders: dict[str, Path]) -> None:
    """Class folders that are links must lead to folders of their own: not the split folder or above
    it, not into or around another class (whose images would carry two labels)."""
    top = split.resolve()
    real = sorted((folder.resolve().parts, folder) for folder in folders.values())
    for parts, folder in real:
        if Path(*parts) == top or Path(*parts) in top.parents:
            raise _link_error(folder, Path(*parts), "the split folder or one of its parents (a loop)")
    # sorted, a folder comes just before any folder inside it: neighbours are enough
    for (outer, first), (inner, second) in pairwise(real):
        if inner[: len(outer)] == outer:
            link = second if second.is_symlink() else first
            raise _link_error(link, link.resolve(), f"where another class folder of {split} is read too")


def decoded(path: str) -> Any:
    """The image at `path` as RGB (torchvision's loader); one that does not decode names itself."""
    try:
        return default_loader(path)
    except (OSError, ValueError, SyntaxError) as e:  # PIL: truncated, not an image, corrupt headers
        said = " ".join(str(e).split())[:200] or type(e).__name__
        raise DataUnavailable(f"{path} does not decode as an image ({said})", param="data_dir") from None


def _valid(path: str) -> bool:
    return path.lower().endswith(IMG_EXTENSIONS)


class WalkedImageFolder(ImageFolder):
    """`ImageFolder` with `class_samples`' walk and `decoded`'s loader; empty classes are refused as
    torchvision refuses them."""

    def __init__(self, root: str, transform: Any = None) -> None:
        super().__init__(root, transform=transform, loader=decoded)

    @staticmethod
    def make_dataset(
        directory: str | Path,
        class_to_idx: dict[str, int],
        extensions: tuple[str, ...] | None = None,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
    ) -> list[tuple[str, int]]:
        samples = class_samples(directory, class_to_idx, is_valid_file or _valid)
        empty = sorted(set(class_to_idx) - {Path(p).relative_to(directory).parts[0] for p, _ in samples})
        if empty and not allow_empty:
            raise FileNotFoundError(
                f"no image in the class folders {', '.join(empty)} (extensions: {', '.join(IMG_EXTENSIONS)})"
            )
        return samples
