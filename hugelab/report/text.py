"""The report in the terminal: rich tables. Store strings are rich Text, never markup.

Readable at any width: numbers and their intervals never break across lines (their columns do
not wrap; text columns wrap at spaces), and a table whose numbers do not fit the terminal is
stacked instead (one block per row, one `header: value` line per cell). Each fact is said once:
a table note that repeats a warning is left out. The compact default leaves out the tables
marked `full` (tails, the classic table, drift unless the effect drifted); `full=True` shows all.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from hugelab.report import lead, runtables
from hugelab.report.model.headline import Lead
from hugelab.report.model.result import Result
from hugelab.report.sections.context import context_lines
from hugelab.report.sections.labels import header
from hugelab.report.table import Table

VERDICT_STYLE = {"faster": "bold green", "slower": "bold red", "equivalent": "bold cyan",
                 "inconclusive": "bold yellow"}
MIN_TEXT_COLUMN = 16  # a wrapping text column needs at least this much to stay readable
PAD = 2  # rich's space between two columns


def _keeps_whole(t: Table, i: int) -> bool:
    """Columns whose cells must never break: the first (names), numbers, verdicts."""
    return i == 0 or i in t.right or (t.key == "verdicts" and i == 1)


def _widths(t: Table) -> list[int]:
    return [max([len(t.headers[i]), *(len(r[i]) for r in t.rows)]) for i in range(len(t.headers))]


def needed_width(t: Table) -> int:
    """The narrowest terminal that shows `t` as a table without breaking a number: what rich
    itself measures for the table (its columns' minimum widths, the padding between them and
    the box's edges), so the choice between table and stacked rows never misses by a gap."""
    con = Console(width=10_000, color_system=None)
    return con.measure(_rich(t)).minimum


def _styled(t: Table, row: list[str], i: int) -> Text:
    cell = Text(row[i])
    if t.key == "verdicts" and i == 1:
        cell.stylize(VERDICT_STYLE.get(row[1].split(" ")[0], ""))
    return cell


def _rich(t: Table) -> RichTable:
    rt = RichTable(title=Text(t.title, style="bold"), title_justify="left", box=box.SIMPLE_HEAD,
                   pad_edge=False)
    for i, (h, w) in enumerate(zip(t.headers, _widths(t), strict=True)):
        whole = _keeps_whole(t, i)
        rt.add_column(Text(h), justify="right" if i in t.right else "left", no_wrap=whole,
                      min_width=w if whole else min(w, MIN_TEXT_COLUMN))
    for row in t.rows:
        rt.add_row(*(_styled(t, row, i) for i in range(len(row))))
    return rt


def _stacked(t: Table, con: Console) -> None:
    con.print(Text(t.title, style="bold"))
    for row in t.rows:
        con.print(Text(" " + row[0], style="bold"))
        for i in range(1, len(row)):
            if not row[i].strip():  # an empty cell (a baseline's effect): no bare 'header:'
                continue
            line = Text(f"   {t.headers[i]}: ")
            line.append_text(_styled(t, row, i))
            con.print(line)


def print_table(t: Table, con: Console) -> None:
    """`t` as a table when its numbers fit `con`, else stacked (one block per row); its title
    alone when it has no rows. Notes are the caller's."""
    if not t.rows:
        con.print(Text(t.title, style="bold"))
    elif needed_width(t) > con.width:
        _stacked(t, con)
    else:
        con.print(_rich(t))


def bullets(items: list[Text]) -> RichTable:
    """Items under '  • ', continuation lines indented under the text."""
    g = RichTable.grid(padding=(0, 1))
    g.add_column(no_wrap=True)
    g.add_column()
    for item in items:
        g.add_row(" •", item)
    return g


def lead_lines(ld: Lead, con: Console) -> None:
    """The answer block: what matters, the recommendation, warnings each once."""
    for w in ld.loud:
        con.print(Text("WARNING: " + w, style="bold white on red"))
    con.print(Text(ld.heading, style="bold"))
    con.print(bullets([Text(a.text, style=VERDICT_STYLE.get(a.verdict, ""))
                       for a in ld.answers]))
    if ld.recommendations:
        con.print(Text("Recommendation", style="bold"))
        con.print(bullets([Text(r) for r in ld.recommendations]))
    for w in ld.notes:
        con.print(Text("WARNING: " + w, style="bold yellow"))


def render(result: Result, console: Console | None = None, *, full: bool = False) -> None:
    """Print the report to `console` (stdout by default), answer first (`lead`): then
    compact tables, or every table with `full`."""
    con = console or Console()
    con.print(Text(header(result), style="bold"))
    ld = lead.of(result)
    lead_lines(ld, con)
    said = set(ld.notes)
    grids, rest = runtables.lead_split(runtables.all_tables(result, full=full))
    for t in grids:
        print_table(t, con)
    con.print()
    for t in rest:
        print_table(t, con)
        for n in dict.fromkeys(t.notes):
            if n not in said:
                con.print(Text("  " + n, style="dim"))
                said.add(n)
    if not full:
        con.print(Text("(tails, the classic table and drift: hugelab report --full)", style="dim"))
    for line in context_lines(result):
        con.print(Text(line))
