"""A `Doc` as Markdown (`report.md`): what a terminal, a diff or a pull request shows."""

from __future__ import annotations

from devicebench.report.doc import Doc, Heading, Image, Paragraph, Table


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(t: Table) -> list[str]:
    out = ["| " + " | ".join(map(_cell, t.headers)) + " |", "|" + "---|" * len(t.headers)]
    out.extend("| " + " | ".join(map(_cell, r)) + " |" for r in t.rows)
    if t.note:
        out.append(f"\n_{t.note}_")
    return out


def to_markdown(doc: Doc) -> str:
    out: list[str] = []
    for block in doc.blocks:
        match block:
            case Heading(level, text):
                out.append("#" * level + " " + text)
            case Paragraph(text):
                out.append(text)
            case Table():
                out.extend(_table(block))
            case Image(name, alt):
                out.append(f"![{alt}]({name})")
        out.append("")
    return "\n".join(out)
