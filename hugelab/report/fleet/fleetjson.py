"""The fleet report as JSON-safe data (non-finite numbers become null)."""

from __future__ import annotations

from typing import Any

from hugelab.report.fleet.pooling import FleetComparison, FleetReport
from hugelab.report.model.base import clean


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
        "unit": report.unit,
        "options": {"alpha": report.options.alpha, "margin": report.options.margin,
                    "pairs": report.options.pairs},
        "hosts": [vars(h) for h in report.hosts],
        "comparisons": [comp(c) for c in report.comparisons],
        "groups": report.groups, "notes": report.notes, "warnings": report.warnings})
    return out
