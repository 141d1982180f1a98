"""One experiment run on many hosts (a fleet): per-host verdicts, pooled across hosts."""

from hugelab.report.fleet.analysis import (
    FleetComparison,
    FleetReport,
    forest,
    from_rows,
    host_facts,
    host_label,
    render_html,
    render_markdown,
    render_text,
    to_json,
)

__all__ = ["FleetComparison", "FleetReport", "forest", "from_rows", "host_facts", "host_label",
           "render_html", "render_markdown", "render_text", "to_json"]
