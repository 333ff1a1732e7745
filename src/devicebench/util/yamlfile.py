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


def load_capped(
    path: Path, max_bytes: int, what: str, loader: type, refused: type[Exception], err: Err
) -> Any:
    """`path`'s document through `loader` (a SafeLoader: no tags run code), at most `max_bytes` long;
    `refused` is what the loader raises for what it will not read."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise err("file", f"{size:,} bytes; {what} is at most {max_bytes:,} bytes")
        return yaml.load(path.read_text(), Loader=loader)
    except OSError as e:
        raise err("file", f"cannot be read ({e.strerror or e})") from None
    except refused as e:
        raise err("YAML", str(e)) from None
    except RecursionError:
        raise err("YAML", "nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        raise err(where, f"not valid YAML ({getattr(e, 'problem', None) or e})") from None
    except UnicodeDecodeError:
        raise err("file", "not UTF-8 text") from None
    except (ValueError, OverflowError) as e:  # a scalar YAML resolves but cannot build: `2026-13-45`
        raise err("YAML", f"a value that is not valid ({e}); quote it if it is meant as text") from None
