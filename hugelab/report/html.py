"""The report as one self-contained HTML file: inline CSS, figures as base64 PNG data URIs,
no scripts and no external resources. Every string goes through `html.escape`."""

from __future__ import annotations

import base64
import html
import json

from hugelab.report import lead as lead_mod
from hugelab.report import runtables
from hugelab.report.model.headline import Lead
from hugelab.report.model.result import Result
from hugelab.report.sections.context import context_lines
from hugelab.report.sections.labels import header
from hugelab.report.table import Table

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1150px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; vertical-align: top; }
th { background: #f0f0f0; } td.r { text-align: right; font-variant-numeric: tabular-nums; }
.warn { background: #fff3cd; border: 1px solid #e0b000; padding: .5em 1em; margin: .4em 0; }
.tcg { background: #c62828; color: #fff; font-weight: bold; font-size: 1.1em;
       border: 3px solid #7f0000; padding: .8em 1em; margin: .6em 0; }
.faster { color: #1b5e20; font-weight: bold; } .slower { color: #b71c1c; font-weight: bold; }
.equivalent { color: #006064; font-weight: bold; } .inconclusive { color: #8d6e00; font-weight: bold; }
ul.notes { color: #555; font-size: .85em; margin-top: .2em; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { color: #555; font-size: .85em; } pre { font-size: .75em; overflow-x: auto; }
#answer { border-left: 4px solid #4c72b0; padding: .1em 1em; background: #f7f9fc; }
#answer ul { margin: .3em 0; padding-left: 1.2em; } #answer li { margin: .2em 0; }
#answer h2 { margin-top: .4em; } .rec { font-weight: 600; }
details.section > summary { font-size: 1.05em; font-weight: bold; margin-top: 1em;
                            cursor: pointer; }
details.section > summary span { font-weight: normal; color: #555; font-size: .85em; }
"""
OPEN_ROWS = 12  # a table with more rows starts folded (its summary line says how many)


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _table(t: Table) -> str:
    body = _rows(t) if t.rows else []
    if t.notes:
        body.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in t.notes)
                    + "</ul>")
    if t.rows and (t.full or len(t.rows) > OPEN_ROWS):
        return (f'<details class="section" id="{esc(t.key)}"><summary>{esc(t.title)} '
                f"<span>({len(t.rows)} rows)</span></summary>" + "\n".join(body)
                + "</details>")
    return "\n".join([f'<h2 id="{esc(t.key)}">{esc(t.title)}</h2>', *body])


def _rows(t: Table) -> list[str]:
    out = ["<table>", "<tr>"]
    out += [f"<th>{esc(h)}</th>" for h in t.headers]
    out.append("</tr>")
    for row in t.rows:
        cells = []
        for i, c in enumerate(row):
            cls = ' class="r"' if i in t.right else ""
            if t.key == "verdicts" and i == 1:
                cls = f' class="{esc(c.split(" ")[0])}"'
            cells.append(f"<td{cls}>{esc(c)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return out


def _figure(caption: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{esc(caption)}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def _answer(ld: Lead, figures: list[tuple[str, bytes]],
            grids: list[Table]) -> list[str]:
    out = ['<section id="answer">', f"<h2>{esc(ld.heading)}</h2>", '<ul class="answer">']
    out += [f'<li class="{esc(a.verdict)}-answer">{esc(a.text)}</li>' for a in ld.answers]
    out.append("</ul>")
    if figures or grids:
        out.append('<div id="lead-figures">' + "".join(_figure(c, png) for c, png in figures)
                   + "".join(_table(t) for t in grids) + "</div>")
    if ld.recommendations:
        out.append('<p class="rec">Recommendation</p><ul id="recommendation">'
                   + "".join(f"<li>{esc(r)}</li>" for r in ld.recommendations) + "</ul>")
    out += [f'<div class="warn">WARNING: {esc(w)}</div>' for w in ld.notes]
    out.append("</section>")
    return out


def render(result: Result, figures: list[tuple[str, bytes]] | None = None, *,
           lead: list[tuple[str, bytes]] | None = None,
           figure_notes: list[str] | None = None) -> str:
    """The whole report, answer first: the lead block (`lead.build`) with the `lead` figures
    (caption, PNG) that answer the question, then the details: tables (long ones folded),
    context, the other `figures` (folded) with `figure_notes` saying what was left out, and
    the JSON."""
    name = result.run.name
    ld = lead_mod.of(result)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>hugelab report: {esc(name)}</title>", f"<style>{CSS}</style></head><body>",
           f"<h1>hugelab report: {esc(name)}</h1>", f"<p>{esc(header(result))}</p>"]
    out += [f'<div class="tcg">WARNING: {esc(w)}</div>' for w in ld.loud]
    grids, rest = runtables.lead_split(runtables.all_tables(result))
    out += _answer(ld, lead or [], grids)
    out.append('<h2 id="details">Details</h2>')
    out += [_table(t) for t in rest]
    lines = context_lines(result)
    if lines:
        out.append("<h2>Context</h2><ul>" + "".join(f"<li>{esc(x)}</li>" for x in lines)
                   + "</ul>")
    if figures or figure_notes:
        out.append(f'<details class="section" id="figures"><summary>Figures '
                   f"<span>({len(figures or [])})</span></summary>")
        out += [_figure(c, png) for c, png in figures or []]
        out.append("</details>")
        if figure_notes:
            out.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>"
                                                     for n in figure_notes) + "</ul>")
    out.append("<h2>All numbers</h2><details><summary>the report as JSON</summary><pre>"
               + esc(json.dumps(result.to_json(), indent=1, default=str)) + "</pre></details>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
