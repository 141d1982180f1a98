"""One experiment run on many hosts (a fleet): per-host verdicts, pooled across hosts.

    report = FleetReport.from_store(store, name, opts)   # pooling.py (reads with hostload.py)
    render_text(report) -> str      render_markdown(report) -> str       # render.py
    to_json(report) -> dict         render_html(report) -> str   (forest plots: forestplot.py)

The tables every renderer shows are fleettables.py's.
"""

from hugelab.report.fleet.pooling import FleetReport, build
from hugelab.report.fleet.render import render_html, render_markdown, render_text, to_json

__all__ = ["FleetReport", "build", "render_html", "render_markdown", "render_text", "to_json"]
