"""The paired verdicts of the comparisons, and of each latency percentile."""

from __future__ import annotations

from hugelab.report.model.result import Result
from hugelab.report.sections.labels import (
    SAID_AS_WARNING,
    comparison_label,
    effect,
    folded,
    no_interval_note,
    verdict_text,
)
from hugelab.report.table import Table, pval


def verdicts(result: Result) -> Table:
    o = result.options
    conf = 100 * (1 - o.alpha)
    family = f"{o.holm_family} claims" if result.factorial else \
        f"{o.holm_family} comparison(s)"
    t = Table("verdicts", f"Paired verdicts (by block; Holm across {family}, "
              f"alpha {o.alpha:g}, equivalence margin ±{100 * o.margin:g}%)",
              ["comparison", "verdict", f"effect [{conf:g}% CI]", "p", "TOST p", "n"], [],
              right={2, 3, 4, 5}, full=bool(result.factorial))
    per: list[tuple[str, str]] = []
    for c in result.comparisons:
        name = comparison_label(result, c)
        t.rows.append([name, verdict_text(c), effect(c), pval(c.p_adjusted),
                       pval(c.tost_p_adjusted), f"{c.n_units:,} {c.unit}s"])
        if c.blocks_dropped:
            per.append((name, f"{c.blocks_dropped} block(s) dropped (an arm missing)"))
        # too few pairs is one of the report's warnings: say it once
        per += [(name, n) for n in c.notes if SAID_AS_WARNING not in n]
    t.notes += folded(per, len(result.comparisons))
    t.notes += no_interval_note(result.comparisons)
    t.notes.append("p and TOST p are Holm-adjusted across the comparisons of this report")
    if not result.comparisons:
        t.notes.append("no comparisons: the run has a single arm or no baseline arm")
    t.notes.append("effect: Hodges-Lehmann shift of the paired log-ratios, candidate vs "
                   "baseline (negative = smaller values)")
    return t


def tail_latency(result: Result) -> list[Table]:
    """Per-percentile latency verdicts (report/latency.py), when the workload reports them."""
    tl = result.tail_latency
    if not tl or not tl.entries:
        return []
    conf = 100 * (1 - result.options.alpha)
    t = Table("tail_latency", f"Tail latency (lower is better; Holm across "
              f"{tl.holm_family} percentiles)",
              ["comparison", "percentile", "verdict", f"effect [{conf:g}% CI]", "p", "n"], [],
              right={3, 4, 5})
    for e in tl.entries:
        t.rows.append([e.comparison, e.metric, verdict_text(e), effect(e),
                       pval(e.p_adjusted), f"{e.n_units:,}"])
    t.notes.append("each percentile of each trial (from the workload's own per-request "
                   "latencies) paired by block like the primary metric; 'faster' = a lower "
                   "latency")
    t.notes += no_interval_note(tl.entries)
    return [t]
