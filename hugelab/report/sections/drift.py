"""The effect in the first and last segment of the run, and whether it changed."""

from __future__ import annotations

from hugelab.report.model.comparison import Drift
from hugelab.report.model.result import Result
from hugelab.report.sections.labels import comparison_label, folded
from hugelab.report.table import Table, num, pct, pval
from hugelab.stats.drift import part_name


def _cell(dr: Drift) -> str:
    if not dr.checked:
        return "not checked"
    return "CHANGED" if dr.drifting else "none detected"


def _note(part: str) -> str:
    return (f"segments: Hodges-Lehmann effect of the first and last {part} of the pairs in "
            "block order; p: Spearman trend with block order and Mann-Whitney first vs last, "
            "Bonferroni over the two. Pairing cancels drift common to both arms; this checks "
            "drift of the effect itself")


def drift(result: Result) -> Table:
    """The effect in the first and last segment of the run, and whether it changed."""
    comps = [(c, c.drift) for c in result.comparisons if c.drift]
    segments, alpha = (comps[0][1].segments, comps[0][1].alpha) if comps else (3, 0.01)
    part = part_name(segments)
    t = Table("drift", f"Drift of the effect over the run (alpha {alpha:g})",
              ["comparison", f"first {part}", f"last {part}", "trend ρ", "p", "change"], [],
              right={1, 2, 3, 4}, full=not any(dr.drifting for _, dr in comps))
    per: list[tuple[str, str]] = []
    for c, dr in comps:
        if dr.checked:
            t.rows.append([comparison_label(result, c), pct(dr.first_pct, 1),
                           pct(dr.last_pct, 1), num(dr.rho, "+.2f"), pval(dr.p_value),
                           _cell(dr)])
        if dr.drifting or not dr.checked:
            per.append((comparison_label(result, c), dr.reading))
    t.notes += folded(per, len(comps))
    if comps and not t.rows:
        return t  # nothing checked: one line, no table of dashes
    if comps:
        t.notes.append(_note(part))
    return t
