"""The report as a document: headings, paragraphs, tables and images, in order. content.py writes one;
markdown.py and htmlpage.py render it, so the two formats cannot say different things."""

from __future__ import annotations

from dataclasses import dataclass, field

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
class Image:
    name: str  # a file beside the report
    alt: str


Block = Heading | Paragraph | Table | Image


@dataclass
class Doc:
    """Headings, paragraphs, tables and images, in order."""

    blocks: list[Block] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(Heading(level, text))

    def p(self, text: str) -> None:
        self.blocks.append(Paragraph(text))

    def table(self, headers: list[str], rows: list[list[str]]) -> None:
        note = ""
        if len(rows) > MAX_ROWS:
            note = f"{len(rows) - MAX_ROWS} more rows in runs.csv"
            rows = rows[:MAX_ROWS]
        self.blocks.append(Table(headers, rows, note))

    def img(self, name: str, alt: str) -> None:
        self.blocks.append(Image(name, alt))
