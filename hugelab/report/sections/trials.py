"""Trials per arm (ok, flagged, failed and why), and each arm's evidence and monitors."""

from __future__ import annotations

from hugelab.report.model.result import Result
from hugelab.report.model.series import Series
from hugelab.report.sections.labels import series_label
from hugelab.report.table import Table


def _why(s: Series) -> str:
    why = [f"{r.count}x {r.reason}" for r in s.flag_reasons[:3]]
    why += [f"{r.count}x failed: {r.reason}" for r in s.error_reasons[:3]]
    why += [f"{r.count}x retried after: {r.reason}" for r in s.retry_reasons[:3]]
    return "; ".join(why) or "-"


def trials(result: Result) -> Table:
    t = Table("trials", "Trials per arm (only ok trials count)",
              ["arm", "ok", "flagged", "failed", "why flagged / failed"], [], right={1, 2, 3})
    for s in result.series:
        k = s.counts
        t.rows.append([series_label(result, s.name), f"{k.ok:,}", f"{k.flagged:,}",
                       f"{k.failed:,}", _why(s)])
    if t.rows and all(r[2] == r[3] == "0" and r[4] == "-" for r in t.rows):
        ok = sorted({s.counts.ok for s in result.series})
        each = f"{ok[0]:,} per arm" if len(ok) == 1 else f"{ok[0]:,} to {ok[-1]:,} per arm"
        t.notes.append(f"every trial ok, none flagged, failed or retried ({each})")
        t.rows = []
    return t


def evidence(result: Result) -> Table:
    t = Table("evidence", "Evidence and monitors (sampled ok trials)",
              ["arm", "mapping evidence", "THP faults (host-wide vmstat)", "sampled"], [],
              right={3})
    for s in result.series:
        t.rows.append([series_label(result, s.name), s.evidence.reading, s.monitors.reading,
                       str(s.details_sampled)])
    return t
