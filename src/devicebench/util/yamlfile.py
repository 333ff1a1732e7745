"""Reading a user's YAML file (a plan, a price table) within a size cap, every failure one line.

Both files come from users and are read before any run starts, so a bad one must cost a line naming
the file and where, never a traceback or a minute of parsing. The caller's loader sets what else is
refused (alias bombs, aliases at all); its refusals are YAMLErrors and are reported as such.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

# (where, message) -> the caller's one-line error, naming its file the caller's way
Err = Callable[[str, str], Exception]
MERGE_TAG = "tag:yaml.org,2002:merge"


class _Duplicate(Exception):
    """A mapping that writes one key twice: YAML keeps the last silently, so a plan's first `runs:`
    or a price table's first entry for a shape would vanish without a word."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where, self.message = where, message


def load_capped(
    path: Path, max_bytes: int, what: str, loader: type, refused: type[Exception], err: Err
) -> Any:
    """`path`'s document through `loader` (a SafeLoader: no tags run code), at most `max_bytes` long;
    `refused` is what the loader raises for what it will not read."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise err("file", f"{size:,} bytes; {what} is at most {max_bytes:,} bytes")
        text = path.read_text()
        return _load_unique(text, loader)
    except OSError as e:
        raise err("file", f"cannot be read ({e.strerror or e})") from None
    except _Duplicate as e:
        raise err(e.where, e.message) from None
    except refused as e:
        raise err("YAML", str(e)) from None
    except RecursionError:
        raise err("YAML", "nested too deeply") from None
    except yaml.reader.ReaderError as e:  # its own text is two lines, and it names no line
        line = text.count("\n", 0, max(e.position, 0)) + 1
        raise err(
            f"line {line}", f"not valid YAML (control character U+{e.character:04X} is not allowed)"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        why = " ".join(str(getattr(e, "problem", None) or e).split())
        raise err(where, f"not valid YAML ({why})") from None
    except UnicodeDecodeError:
        raise err("file", "not UTF-8 text") from None
    except (ValueError, OverflowError) as e:  # a scalar YAML resolves but cannot build: `2026-13-45`
        raise err("YAML", f"a value that is not valid ({e}); quote it if it is meant as text") from None


def _load_unique(text: str, loader_class: type) -> Any:
    """`text` through `loader_class`, refusing a key written twice in one mapping (a `<<` merge may
    still be overridden: that is what it is for)."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicates(node, loader)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _key_of(node: yaml.Node, loader: Any) -> Any:
    """A scalar key as YAML reads it (`1` and `01`, `true` and `yes` are one key); another node by id."""
    if not isinstance(node, yaml.ScalarNode):
        return ("node", id(node))
    try:
        return loader.construct_object(node)
    except (yaml.YAMLError, ValueError, OverflowError):  # reported when the document is built
        loader.recursive_objects.pop(node, None)  # left marked by the failed construction
        return (node.tag, node.value)


def _refuse_duplicates(root: yaml.Node, loader: Any) -> None:
    """Every mapping under `root` (each distinct node once, so aliases cost nothing more)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen or isinstance(node, yaml.ScalarNode):
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
            continue
        first: dict[Any, int] = {}
        for key, value in node.value:
            stack.extend((key, value))
            if key.tag == MERGE_TAG:
                continue
            k, line = _key_of(key, loader), key.start_mark.line + 1
            try:
                earlier = first.get(k)
                first.setdefault(k, line)
            except TypeError:  # an unhashable key: the constructor names it
                continue
            if earlier is not None:
                name = repr(key.value[:60]) if isinstance(key, yaml.ScalarNode) else "a key"
                raise _Duplicate(
                    f"line {line}", f"key {name} is written twice (first on line {earlier}); keep one"
                )
