"""The fleet report as text, Markdown, self-contained HTML (forest plots embedded) or JSON."""

from __future__ import annotations

import base64
import json
import textwrap
from typing import Any

from hugelab.report import html as html_report
from hugelab.report import markdown as md_report
from hugelab.report.analysis import (
    clean,
)
from hugelab.report.fleet.fleettables import all_tables, header
from hugelab.report.fleet.forestplot import forest
from hugelab.report.fleet.pooling import FleetComparison, FleetReport
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


def _md_table(t: Table) -> list[str]:
    esc = md_report.esc
    out = [f"### {esc(t.title)}", ""]
    if t.rows:
        out.append("| " + " | ".join(esc(h) for h in t.headers) + " |")
        out.append("|" + "|".join("---:" if i in t.right else "---"
                                  for i in range(len(t.headers))) + "|")
        out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in t.rows]
        out.append("")
    out += [f"- {esc(n)}" for n in dict.fromkeys(t.notes)]
    return [*out, ""]


def render_markdown(report: FleetReport) -> str:
    esc = md_report.esc
    out = [f"# hugelab fleet report: {esc(report.experiment)}", "", esc(header(report)), ""]
    for w in report.warnings:
        out += [f"> **WARNING:** {esc(w)}", ""]
    for t in all_tables(report):
        out += _md_table(t)
    if report.notes:
        out += ["### Notes", "", *(f"- {esc(n)}" for n in report.notes), ""]
    return "\n".join(out)


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
           f"<title>hugelab fleet report: {name}</title>",
           f"<style>{html_report.CSS}</style></head><body>",
           f"<h1>hugelab fleet report: {name}</h1>", f"<p>{esc(header(report))}</p>"]
    for w in report.warnings:
        out.append(f'<div class="{"tcg" if "TCG" in w else "warn"}">WARNING: {esc(w)}</div>')
    out += [_html_table(t) for t in all_tables(report)]
    if report.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in report.notes)
                   + "</ul>")
    if figures and report.comparisons:
        out.append("<h2>Forest plots</h2>")
        out += [_figure(f"Per host and pooled: {c.name}", forest(c, report.options))
                for c in report.comparisons]
    out.append("<h2>All numbers</h2><details><summary>the report as JSON</summary><pre>"
               + esc(json.dumps(to_json(report), indent=1)) + "</pre></details>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def to_json(report: FleetReport) -> dict[str, Any]:
    """Everything in the report, JSON-safe (non-finite numbers become null)."""
    def comp(c: FleetComparison) -> dict[str, Any]:
        d = {k: getattr(c, k) for k in ("name", "baseline", "candidate", "better", "verdict",
                                         "effect_pct", "ci_low_pct", "ci_high_pct", "how",
                                         "p_adjusted", "tost_p_adjusted", "notes")}
        d["pooled"] = None if c.pooled is None else c.pooled.to_dict()
        d["hosts"] = [vars(e) for e in c.hosts]
        d["groups"] = [vars(g) for g in c.groups]
        return d
    out: dict[str, Any] = clean({
        "experiment": report.experiment,
        "options": {"alpha": report.options.alpha, "margin": report.options.margin,
                    "pairs": report.options.pairs},
        "hosts": [vars(h) for h in report.hosts],
        "comparisons": [comp(c) for c in report.comparisons],
        "groups": report.groups, "notes": report.notes, "warnings": report.warnings})
    return out
