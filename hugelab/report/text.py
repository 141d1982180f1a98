"""The report in the terminal: rich tables. Store strings are rich Text, never markup."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from hugelab.report import tables

VERDICT_STYLE = {"faster": "bold green", "slower": "bold red", "equivalent": "bold cyan",
                 "inconclusive": "bold yellow"}


def _rich(t: tables.Table) -> RichTable:
    rt = RichTable(title=Text(t.title, style="bold"), title_justify="left", box=box.SIMPLE_HEAD,
                   pad_edge=False)
    for i, h in enumerate(t.headers):
        rt.add_column(Text(h), justify="right" if i in t.right else "left",
                      overflow="fold", no_wrap=i == 0 or t.key == "verdicts")
    for row in t.rows:
        cells = [Text(c) for c in row]
        if t.key == "verdicts":
            cells[1].stylize(VERDICT_STYLE.get(row[1].split(" ")[0], ""))
        rt.add_row(*cells)
    return rt


def render(result: dict[str, Any], console: Console | None = None) -> None:
    """Print the whole report to `console` (stdout by default)."""
    con = console or Console()
    con.print(Text(tables.header(result), style="bold"))
    for w in result["warnings"]:
        style = "bold white on red" if w.startswith("TCG") else "bold yellow"
        con.print(Text("WARNING: " + w, style=style))
    for t in tables.all_tables(result):
        if t.rows:
            con.print(_rich(t))
        else:
            con.print(Text(t.title, style="bold"))
        for n in t.notes:
            con.print(Text("  " + n, style="dim"))
    for line in tables.context_lines(result):
        con.print(Text(line))
