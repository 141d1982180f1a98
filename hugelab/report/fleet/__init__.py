"""One experiment run on many hosts (a fleet): per-host verdicts, pooled across hosts.

    report = FleetReport.from_store(store, name, opts)   # pooling.py (reads with hostload.py)
    render_text(report) -> str          # fleettext.py
    render_markdown(report) -> str      # fleetmarkdown.py
    render_html(report) -> str          # fleethtml.py (forest plots: forestplot.py)
    to_json(report) -> dict             # fleetjson.py

The tables every renderer shows are fleettables.py's.
"""

from hugelab.report.fleet.fleethtml import render_html
from hugelab.report.fleet.fleetjson import to_json
from hugelab.report.fleet.fleetmarkdown import render_markdown
from hugelab.report.fleet.fleettext import render_text
from hugelab.report.fleet.pooling import FleetReport, build

__all__ = ["FleetReport", "build", "render_html", "render_markdown", "render_text", "to_json"]
