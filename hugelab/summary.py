"""Per-arm summary of a run against its baseline arm. Pure: values in, rows out."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any


def arm_summary(rows: list[tuple[int, int, str, str, str, float | None]], arms: list[str],
                baseline: str, better: str | None) -> list[dict[str, Any]]:
    """rows: (block, position, arm, target, status, value). Ratios are of medians; the paired
    per-block analysis with intervals and verdicts is `hugelab report`."""
    values: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"ok": 0, "flagged": 0, "failed": 0})
    for _b, _p, arm, _t, status, value in rows:
        counts[arm][status] += 1
        if status == "ok" and value is not None:
            values[arm].append(value)
    base = statistics.median(values[baseline]) if values.get(baseline) else None
    out = []
    for arm in arms:
        v = values.get(arm, [])
        med = statistics.median(v) if v else None
        row: dict[str, Any] = {"arm": arm, "n": len(v), **{k: counts[arm][k] for k in ("flagged", "failed")},
                               "median": med, "mean": statistics.fmean(v) if v else None,
                               "min": min(v) if v else None, "max": max(v) if v else None,
                               "baseline": arm == baseline}
        if med is not None and base:
            ratio = med / base
            row["ratio"] = ratio
            if better == "lower":
                row["speedup"] = base / med
            elif better == "higher":
                row["speedup"] = ratio
        out.append(row)
    return out
