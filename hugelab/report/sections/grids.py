"""Host x guest medians, and guests as % of native, for runs with guest targets."""

from __future__ import annotations

from hugelab.report.model.result import GridTable, Result
from hugelab.report.table import Table


def _table(key: str, title: str, spec: str, gr: GridTable) -> Table:
    rows = [["host \\ guest", *gr.guests]]
    for host, vals in zip(gr.hosts, gr.values, strict=True):
        rows.append([host, *("-" if v is None else spec.format(v) for v in vals)])
    return Table(f"grid_{key}", title, rows[0], rows[1:], right=set(range(1, len(rows[0]))))


def grid_tables(result: Result) -> list[Table]:
    g = result.grid
    if not g:
        return []
    out = []
    for key, title, spec, gr in (
            ("medians", "Host x guest medians", "{:.4g}", g.medians),
            ("percent_of_native", "Guest as % of native (100 = as fast)", "{:.1f}%",
             g.percent_of_native)):
        if gr:
            out.append(_table(key, title, spec, gr))
    return out
