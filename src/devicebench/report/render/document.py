"""The report as a document, and its two writers: headings, paragraphs, tables, lists and images, in
order.

content.py builds one `Doc`; `to_markdown` writes it as `report.md` (what a terminal, a diff or a pull
request shows) and `to_html` as one self-contained `report.html`, so the two formats cannot say
different things. The HTML embeds the charts as base64 PNG: one file that opens from the MLflow UI's
artifact view or an e-mail, with nothing next to it to lose. That view is an iframe about 625 px wide,
so the page is laid out for it first (CSS below): small margins and type, cells that wrap between
words but never inside a figure (`12.3 s`, `bs 32`), and a table that still cannot fit scrolls inside
its own box rather than widening the page.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass
from pathlib import Path

MAX_ROWS = 500  # per table in md/html; the CSV always has every run


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    note: str = ""  # said under the table: what was cut


@dataclass(frozen=True)
class Bullets:
    """A list of items, each a lead line and the lines said under it (a pair and its verdicts)."""

    items: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Image:
    name: str  # a file beside the report
    alt: str


Block = Heading | Paragraph | Table | Bullets | Image


@dataclass(frozen=True)
class Doc:
    """Headings, paragraphs, tables and images, in order: built whole from the blocks the content's
    sections made (content.py), then only written."""

    blocks: tuple[Block, ...] = ()


# The sections' block makers: each appends one block to the list a section is building.


def heading(blocks: list[Block], level: int, text: str) -> None:
    blocks.append(Heading(level, text))


def paragraph(blocks: list[Block], text: str) -> None:
    blocks.append(Paragraph(text))


def table(blocks: list[Block], headers: list[str], rows: list[list[str]]) -> None:
    """A table cut at MAX_ROWS (the CSV has every run), saying so under it."""
    note = f"{len(rows) - MAX_ROWS} more rows in runs.csv" if len(rows) > MAX_ROWS else ""
    blocks.append(Table(headers, rows[:MAX_ROWS], note))


def bullets(blocks: list[Block], items: list[tuple[str, tuple[str, ...]]]) -> None:
    """A list (nothing where there is no item): each lead with its lines under it."""
    if items:
        blocks.append(Bullets(tuple(items)))


def image(blocks: list[Block], name: str, alt: str) -> None:
    blocks.append(Image(name, alt))


# --------------------------------------------------------------------------------------------- Markdown


# what makes run data live Markdown: a link or an image (`![x](http://...)`, `[a](javascript:...)`) needs
# brackets, raw HTML angle brackets; the report's own Markdown uses none of them outside its images
_MD_LIVE = str.maketrans({"\\": "\\\\", "[": "\\[", "]": "\\]", "<": "&lt;", ">": "&gt;"})


def _md_text(text: str) -> str:
    return str(text).translate(_MD_LIVE)


def _md_cell(text: str) -> str:
    return _md_text(text).replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> list[str]:
    out = ["| " + " | ".join(map(_md_cell, t.headers)) + " |", "|" + "---|" * len(t.headers)]
    out.extend("| " + " | ".join(map(_md_cell, r)) + " |" for r in t.rows)
    if t.note:
        out.append(f"\n_{t.note}_")
    return out


def _md_bullets(b: Bullets) -> list[str]:
    out = []
    for lead, lines in b.items:
        out.append(f"- {_md_cell(lead)}")
        out.extend(f"  - {_md_cell(line)}" for line in lines)
    return out


def to_markdown(doc: Doc) -> str:
    out: list[str] = []
    for block in doc.blocks:
        match block:
            case Heading(level, text):
                out.append("#" * level + " " + _md_text(text))
            case Paragraph(text):
                out.append(_md_text(text))
            case Table():
                out.extend(_md_table(block))
            case Bullets():
                out.extend(_md_bullets(block))
            case Image(name, alt):
                out.append(f"![{alt}]({name})")
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222;font-size:15px;line-height:1.4}
h1{font-size:1.6em} h2{font-size:1.3em;margin-top:1.6em} h3{font-size:1.1em}
.t{max-width:100%;overflow-x:auto;margin:.5em 0 1.5em}
table{border-collapse:collapse;font-size:13px;line-height:1.3}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3;font-weight:600} img{max-width:100%;margin:1em 0;display:block}
p,ul{max-width:70em} ul{padding-left:1.2em;font-size:14px} li{margin:.2em 0}
li ul{padding-left:1em;color:#444}
@media (max-width:800px){body{margin:.6em .5em;font-size:14px} table{font-size:12px}
th,td{padding:2px 4px} ul{font-size:13px}}
"""

# a space inside a figure or a short label (`12.3 s`, `1.5 GiB`, `bs 32`, `n=3`) that a line must not
# break at: a cell wraps between its words, never inside one of them
_KEEP = re.compile(r"(?<=[\d×%]) (?=(?:s|ms|µs|ns|[KMGT]i?B)\b)|\b(?=[a-z]{1,7} [\d$])([a-z]+) ")


def _cell(text: str) -> str:
    return html.escape(_KEEP.sub(lambda m: (m.group(1) or "") + "\u00a0", str(text)))


def _html_table(t: Table) -> list[str]:
    out = ["<div class='t'><table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.headers) + "</tr>"]
    out.extend("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in r) + "</tr>" for r in t.rows)
    out.append("</table></div>")
    if t.note:
        out.append(f"<p><em>{html.escape(t.note)}</em></p>")
    return out


def _html_bullets(b: Bullets) -> list[str]:
    out = ["<ul>"]
    for lead, lines in b.items:
        under = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
        out.append(
            f"<li><strong>{html.escape(lead)}</strong>" + (f"<ul>{under}</ul>" if under else "") + "</li>"
        )
    out.append("</ul>")
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
                out.extend(_html_table(block))
            case Bullets():
                out.extend(_html_bullets(block))
            case Image(name, alt):
                data = base64.b64encode((image_dir / name).read_bytes()).decode()
                out.append(f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>")
    out.append("</body></html>")
    return "\n".join(out)
