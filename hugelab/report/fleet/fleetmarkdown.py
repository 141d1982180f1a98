"""The fleet report as Markdown, every store string escaped (`markdown.esc`)."""

from __future__ import annotations

from hugelab.report import markdown as md_report
from hugelab.report.fleet.fleettables import all_tables, header, title
from hugelab.report.fleet.pooling import FleetReport
from hugelab.report.table import Table


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
    out = [f"# {title(report)}: {esc(report.experiment)}", "", esc(header(report)), ""]
    for w in report.warnings:
        out += [f"> **WARNING:** {esc(w)}", ""]
    for t in all_tables(report):
        out += _md_table(t)
    if report.notes:
        out += ["### Notes", "", *(f"- {esc(n)}" for n in report.notes), ""]
    return "\n".join(out)
