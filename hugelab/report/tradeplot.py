"""The trade as a figure for the HTML report: each arm's median speed (the primary metric)
against its median memory footprint (the cost record's `footprint_kb`), one point per arm, so
an arm that buys its speed with memory stands apart from one that gets it free."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from hugelab.report import answer
from hugelab.report.analysis import Report
from hugelab.report.figure import label, png
from hugelab.report.trade import MEMORY


def points(report: Report) -> list[tuple[str, float, float]]:
    """(arm, median primary value, median footprint in MiB) of every arm with both (pure)."""
    c = report.result.costs
    if c is None:
        return []
    by = {s.series: s.medians.get(MEMORY) for s in c.series}
    out = []
    for s in report.result.series:
        mem = by.get(s.name)
        if s.median is not None and mem is not None:
            out.append((s.name, float(s.median), float(mem) / 1024))
    return out


def speed_memory(report: Report) -> bytes | None:
    """The scatter of speed against memory per arm; None when fewer than two arms have both."""
    pts = points(report)
    if len(pts) < 2:
        return None
    names = answer.Names.of(report.result.factorial)
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    x = np.array([p[1] for p in pts])
    y = np.array([p[2] for p in pts])
    ax.scatter(x, y, color="tab:blue")
    for name, xi, yi in pts:
        ax.annotate(label(names.short(name)), (xi, yi), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    unit = next((f"{s.metric} ({s.unit})" for s in report.result.series if s.unit), "value")
    better = next((s.better for s in report.result.series if s.better), None)
    ax.set_xlabel(label(f"median {unit}" + (f", {better} is better" if better else "")))
    ax.set_ylabel("median footprint (MiB)")
    ax.set_title("Speed against memory, per arm", fontsize=10)
    return png(fig)
