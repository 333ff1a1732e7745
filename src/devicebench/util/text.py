"""Text read from a tracking store, made safe to show anywhere: in a terminal, a spreadsheet, Markdown
or HTML. Anyone who can log a run can set its name, params and tags: an ESC sequence in a tag retitled
the user's terminal and cleared its screen, a right-to-left override turned `gnp.exe` into `exe.png` on
screen, and a carriage return or newline broke a report's table rows or made a line of its own in a
run's description. Such characters are written out as visible escapes, once, as the report reads a run.
"""

from __future__ import annotations

import re

# C0 and C1 controls (newline, tab and carriage return included: a value stays on its line) and the
# invisible bidirectional marks and overrides
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`GPU\\x1b]0;owned\\x07` as those characters, not as a terminal command; `ab\\u202ecd` likewise."""
    return _HIDDEN.sub(_escape, text)
