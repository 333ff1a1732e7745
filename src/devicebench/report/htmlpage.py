"""A `Doc` as one self-contained HTML page (`report.html`).

The charts are embedded as base64 PNG: one file that opens from the MLflow UI's artifact view or an
e-mail, with nothing next to it to lose.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from devicebench.report.doc import Doc, Heading, Image, Paragraph, Table

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3} img{max-width:100%;margin:1em 0;display:block}
"""


def _table(t: Table) -> list[str]:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.headers) + "</tr>"]
    out.extend("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in t.rows)
    out.append("</table>")
    if t.note:
        out.append(f"<p><em>{html.escape(t.note)}</em></p>")
    return out


def to_html(doc: Doc, image_dir: Path) -> str:
    """One self-contained page: images read from `image_dir` and inlined as base64 PNG."""
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>devicebench compare</title>"]
    out.append(f"<style>{CSS}</style></head><body>")
    for block in doc.blocks:
        match block:
            case Heading(level, text):
                out.append(f"<h{level}>{html.escape(text)}</h{level}>")
            case Paragraph(text):
                out.append(f"<p>{html.escape(text)}</p>")
            case Table():
                out.extend(_table(block))
            case Image(name, alt):
                data = base64.b64encode((image_dir / name).read_bytes()).decode()
                out.append(f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>")
    out.append("</body></html>")
    return "\n".join(out)
