"""The fleet report as one self-contained HTML page, forest plots embedded and every store
string escaped (`html.esc`)."""

from __future__ import annotations

import base64
import json

from hugelab.report import html as html_report
from hugelab.report.fleet.fleetjson import to_json
from hugelab.report.fleet.fleettables import all_tables, header, title
from hugelab.report.fleet.forestplot import forest
from hugelab.report.fleet.pooling import FleetReport
from hugelab.report.table import Table


def _html_table(t: Table) -> str:
    esc = html_report.esc
    out = [f'<h2 id="{esc(t.key)}">{esc(t.title)}</h2>']
    if t.rows:
        out.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in t.headers) + "</tr>")
        verdict_col = t.headers.index("verdict") if "verdict" in t.headers else -1
        for row in t.rows:
            cells = []
            for i, c in enumerate(row):
                cls = ' class="r"' if i in t.right else ""
                if i == verdict_col:
                    cls = f' class="{esc(c.split(" ")[0])}"'
                cells.append(f"<td{cls}>{esc(c)}</td>")
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</table>")
    if t.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>"
                                                  for n in dict.fromkeys(t.notes)) + "</ul>")
    return "\n".join(out)


def _figure(caption: str, png: bytes) -> str:
    esc = html_report.esc
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{esc(caption)}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def render_html(report: FleetReport, figures: bool = True) -> str:
    """One self-contained page: every store string escaped, forest plots inline."""
    esc = html_report.esc
    name = esc(report.experiment)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{title(report)}: {name}</title>",
           f"<style>{html_report.CSS}</style></head><body>",
           f"<h1>{title(report)}: {name}</h1>", f"<p>{esc(header(report))}</p>"]
    for w in report.warnings:
        out.append(f'<div class="{"tcg" if "TCG" in w else "warn"}">WARNING: {esc(w)}</div>')
    out += [_html_table(t) for t in all_tables(report)]
    if report.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in report.notes)
                   + "</ul>")
    if figures and report.comparisons:
        out.append("<h2>Forest plots</h2>")
        out += [_figure(f"Per {report.unit} and pooled: {c.name}",
                        forest(c, report.options, report.unit))
                for c in report.comparisons]
    out.append("<h2>All numbers</h2><details><summary>the report as JSON</summary><pre>"
               + esc(json.dumps(to_json(report), indent=1)) + "</pre></details>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
