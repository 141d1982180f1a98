"""The report as Markdown. Every store string is HTML-escaped (Markdown passes HTML through)
and has its pipes and backticks escaped, so a name like `<script>` stays text."""

from __future__ import annotations

import html
import re

from hugelab.report import lead, runtables
from hugelab.report.model.headline import Lead
from hugelab.report.model.result import Result
from hugelab.report.sections.context import context_lines
from hugelab.report.sections.labels import header
from hugelab.report.table import Table


def esc(s: object) -> str:
    """Safe inside a Markdown paragraph or table cell."""
    text = re.sub(r"([\\`*_\[\]|#])", r"\\\1", str(s))
    return html.escape(text, quote=False).replace("\n", " ")


def _table(t: Table) -> list[str]:
    out = [f"### {esc(t.title)}", ""]
    if not t.rows:
        return [*out, *(f"- {esc(n)}" for n in t.notes), ""]
    out.append("| " + " | ".join(esc(h) for h in t.headers) + " |")
    out.append("|" + "|".join("---:" if i in t.right else "---" for i in range(len(t.headers)))
               + "|")
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in t.rows]
    if t.notes:
        out.append("")
        out += [f"- {esc(n)}" for n in t.notes]
    out.append("")
    return out


def _lead(ld: Lead) -> list[str]:
    out = [f"> **WARNING:** {esc(w)}\n" for w in ld.loud]
    out += [f"## {esc(ld.heading)}", ""] + [f"- {esc(a.text)}" for a in ld.answers] + [""]
    if ld.recommendations:
        out += ["**Recommendation**", ""] + [f"- {esc(r)}" for r in ld.recommendations] + [""]
    for w in ld.notes:
        out += [f"> **WARNING:** {esc(w)}", ""]
    return out


def render(result: Result) -> str:
    """The whole report as one Markdown document, answer first (`lead`), details after."""
    out = [f"# hugelab report: {esc(result.run.name)}", "", esc(header(result)), ""]
    out += _lead(lead.of(result))
    grids, rest = runtables.lead_split(runtables.all_tables(result))
    for t in grids:
        out += _table(t)
    out += ["## Details", ""]
    for t in rest:
        out += _table(t)
    lines = context_lines(result)
    if lines:
        out += ["### Context", ""] + [f"- {esc(x)}" for x in lines] + [""]
    return "\n".join(out)
