"""Rows for a terminal of any width: a table when it fits, else one block per row.

    columns = [Column("kind"), Column("lease id", whole=True), Column("holder", whole=True)]
    console.print(rows_view(console, columns, rows, title="live leases", head=2))

A `whole` column holds something a reader copies (a lease id, a holder): it is never broken
across lines; other values may wrap between words. When the table cannot show every whole
value, and every word of the others and of the headers, unbroken at the console's width (an
80-column terminal, or a pipe, which rich treats as 80 columns unless COLUMNS says otherwise),
each row becomes a block instead: its first `head` values on one line, then one indented
`name  value` line per other non-empty value.

    commit  21001664-112e-432d-bdcf-55f10323a351
      holder     ingest@worker-3:4242
      scope      dt=2024-06-20/hr=13
      time left  28.1s
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

__all__ = ["Column", "rows_view"]


@dataclass(frozen=True)
class Column:
    name: str
    whole: bool = False
    """Never wrapped: an id or a name that a reader copies."""


def _table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], title: str | None, header: bool
) -> Table:
    table = Table(title=title, show_header=header, box=box.SIMPLE_HEAD if header else None)
    for i, column in enumerate(columns):
        if column.whole:
            table.add_column(column.name, no_wrap=True, overflow="ellipsis")
        else:
            # as wide as its longest word, so words wrap whole while the width allows
            texts = [column.name if header else "", *(row[i] for row in rows)]
            longest = max((len(word) for text in texts for word in text.split()), default=1)
            table.add_column(column.name, overflow="fold", min_width=longest)
    for row in rows:
        table.add_row(*(Text(value) for value in row))
    return table


def _fits(
    console: Console, table: Table, columns: Sequence[Column], rows: Sequence[Sequence[str]]
) -> bool:
    """Every whole value, and every word of the other values and of the headers, shows
    unbroken on one line when `table` is printed at the console's width (a column squeezed to
    a letter per line is no table)."""
    probe = Console(width=console.width, file=io.StringIO(), color_system=None)
    probe.print(table)
    lines = probe.file.getvalue().splitlines()  # type: ignore[attr-defined]
    wanted = {row[i] for row in rows for i, c in enumerate(columns) if c.whole and row[i]}
    words = {c.name for c in columns} | {
        row[i] for row in rows for i, c in enumerate(columns) if not c.whole
    }
    wanted |= {word for text in words for word in text.split()}
    return all(any(value in line for line in lines) for value in wanted)


def _blocks(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], title: str | None, head: int
) -> Group:
    width = max((len(c.name) for c in columns[head:]), default=0)
    parts: list[RenderableType] = [Text(title, style="bold")] if title else []
    for row in rows:
        parts.append(Text("  ".join(value for value in row[:head] if value)))
        for column, value in zip(columns[head:], row[head:], strict=True):
            if value:
                parts.append(Text(f"  {column.name:<{width}}  {value}"))
    return Group(*parts)


def rows_view(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    header: bool = True,
    head: int = 1,
) -> RenderableType:
    """A table of `rows` if its whole columns fit unbroken at the console's width, else blocks
    (see the module docstring). Values are shown as text, never as rich markup."""
    table = _table(columns, rows, title, header)
    if not rows or _fits(console, table, columns, rows):
        return table
    return _blocks(columns, rows, title, head)
