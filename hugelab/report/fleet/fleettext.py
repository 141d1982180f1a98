"""The fleet report as plain text: tables that fit the width, or stacked, never cut."""

from __future__ import annotations

import textwrap

from hugelab.report.fleet.fleettables import all_tables, header
from hugelab.report.fleet.pooling import FleetReport
from hugelab.report.table import Table


def _widths(t: Table) -> list[int]:
    return [max([len(t.headers[i]), *(len(row[i]) for row in t.rows)])
            for i in range(len(t.headers))]


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False) or [indent]


def _text_table(t: Table, width: int) -> list[str]:
    out = _wrap(t.title, width)
    w = _widths(t)
    if sum(w) + 2 * (len(w) - 1) > width:  # too wide: one block per row, a line per cell
        for row in t.rows:
            out.append(" " + row[0])
            out += [f"   {t.headers[i]}: {row[i]}" for i in range(1, len(row))]
    else:
        def line(cells: list[str]) -> str:
            return "  ".join(c.rjust(w[i]) if i in t.right else c.ljust(w[i])
                             for i, c in enumerate(cells)).rstrip()
        out += [line(t.headers), line(["-" * x for x in w]), *(line(r) for r in t.rows)]
    for n in dict.fromkeys(t.notes):
        out += _wrap(n, width, "  ")
    return out


def render_text(report: FleetReport, width: int = 100) -> str:
    """The report as plain text; a table wider than `width` is stacked (a line per cell), never
    cut, and notes are wrapped at `width`."""
    out = _wrap(header(report), width)
    for w in report.warnings:
        out += _wrap(f"WARNING: {w}", width)
    for t in all_tables(report):
        out += ["", *_text_table(t, width)]
    if report.notes:
        out += ["", "Notes"]
        for n in report.notes:
            out += _wrap(n, width, "  ")
    return "\n".join(out) + "\n"
