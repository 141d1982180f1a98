"""What it costs: every comparison of the report repeated on the weighed figures of the trials'
cost records (`hugelab.trial.costs`: memory footprint, RSS, PSS, page tables, pool pages held
unused, QEMU's RSS, the share of THP faults that fell back, compaction stalls, khugepaged's and
kcompactd's CPU, the application's own figures), paired by block like the primary metric, and
all of them adjusted as one family of their own (`stats.multiple.exclusive`), beside the speed
and tail families.

A figure whose values are all positive and which `CATALOGUE` puts on the ratio scale (memory
amounts) gets the Hodges-Lehmann shift of its log-ratios as a percent of the baseline with a
TOST at the memory margin, and its shift in KiB; every other figure (counts, shares, CPU
seconds, which can be zero) gets the paired shift in its own unit (`stats.shift`). Every
figure recorded also gets its median per series, weighed or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hugelab.report.latency import by_block
from hugelab.report.model.costs import CostEntry, CostFigure, Costs, CostSeries
from hugelab.report.runload import Latencies, RunData
from hugelab.stats import multiple, paired
from hugelab.stats.paired import MIN_UNITS
from hugelab.stats.shift import compare_shift
from hugelab.trial.costs import CATALOGUE, describe

MEMORY_MARGIN = 0.02  # a memory cost beyond this share of the baseline's is stated
METHOD = ("per figure: paired by block; memory amounts: Hodges-Lehmann shift of the log-ratios "
          "with its signed-rank interval and TOST at the memory margin; counts, shares and CPU "
          "seconds: Hodges-Lehmann shift of the differences; Wilcoxon signed-rank p, "
          "adjusted across every figure of every comparison (Holm's step-down, a memory "
          "figure's two claims counted once)")


@dataclass
class _Raw:
    name: str
    key: str
    blocks: int
    b: np.ndarray
    c: np.ndarray
    ratio: paired.Comparison | None  # None: on the difference scale


def _order(keys: Sequence[str]) -> list[str]:
    known = [c.key for c in CATALOGUE]
    return sorted(keys, key=lambda k: (known.index(k) if k in known else len(known), k))


def _median(v: np.ndarray) -> float | None:
    return float(np.median(v)) if v.size else None


def _raw(costs: Latencies, comparisons: Sequence[Any], data: RunData, *, alpha: float,
         margin: float) -> list[_Raw]:
    out = []
    weighed = _order([k for k in costs if describe(k).weighed])
    for p in comparisons:
        i, j = data.index(p.baseline), data.index(p.candidate)
        for key in weighed:
            blocks, b, c = by_block(costs[key], p, i, j)
            if not blocks or not (np.any(b) or np.any(c)):
                continue  # nothing recorded, or zero on both sides: nothing to weigh
            ratio = None
            if describe(key).scale == "ratio" and np.all(b > 0) and np.all(c > 0):
                ratio = paired.compare(b, c, better="lower", alpha=alpha, margin=margin)
            out.append(_Raw(p.name, key, len(blocks), b, c, ratio))
    return out


def _verdict(r: _Raw, p_adj: float, tost_adj: float | None, effect: float | None,
             alpha: float) -> str:
    if r.blocks < MIN_UNITS:
        return "no verdict yet"
    if p_adj < alpha and effect:
        return "more" if effect > 0 else "less"
    if tost_adj is not None and tost_adj < alpha:
        return "same"
    return "inconclusive"


def _entry(r: _Raw, p_adj: float, tost_adj: float | None, *, alpha: float,
           margin: float) -> CostEntry:
    s = compare_shift(r.b, r.c, alpha=alpha)
    q = r.ratio
    effect = q.effect_pct if q is not None else s.effect
    beyond = describe(r.key).memory and q is not None and q.effect_pct > 100 * margin
    return CostEntry(
        r.name, r.key, r.blocks, _median(r.b), _median(r.c),
        q.effect_pct if q else None,
        q.ci_low_pct if q and q.n_units >= MIN_UNITS else None,
        q.ci_high_pct if q and q.n_units >= MIN_UNITS else None,
        s.effect, s.ci_low, s.ci_high, q.p_value if q else s.p_value, p_adj,
        _verdict(r, p_adj, tost_adj, effect, alpha), bool(beyond))


def _series(costs: Latencies, data: RunData) -> list[CostSeries]:
    out = []
    for i, name in enumerate(data.series):
        med = {}
        n = 0
        for key in _order(list(costs)):
            vals = [v for (_b, s), v in costs[key].items() if s == i]
            if vals:
                med[key] = float(np.median(vals))
                n = max(n, len(vals))
        if med:
            out.append(CostSeries(name, n, med))
    return out


def costs(rec: Latencies, comparisons: Sequence[Any], data: RunData, *, alpha: float,
          margin: float = MEMORY_MARGIN) -> Costs | None:
    """The report's `costs` section: every weighed figure of every comparison (`Paired`: name,
    baseline, candidate, blocks) as one Holm family, and every figure's median per series;
    None for runs whose trials recorded no costs."""
    if not rec:
        return None
    raw = _raw(rec, comparisons, data, alpha=alpha, margin=margin)
    ps = [r.ratio.p_value if r.ratio else compare_shift(r.b, r.c, alpha=alpha).p_value
          for r in raw]
    ratio_idx = [k for k, r in enumerate(raw) if r.ratio is not None]
    # a figure without a ratio (a shift) has no margin: a difference claim only
    p_adj, tost = multiple.exclusive(
        np.array([np.nan if p is None else p for p in ps], dtype=float),
        np.array([r.ratio.tost_p if r.ratio else np.nan for r in raw], dtype=float),
        np.array([r.ratio is not None for r in raw], dtype=bool))
    tost_of = {k: float(tost[k]) for k in ratio_idx}
    entries = [_entry(r, float(np.nan_to_num(p_adj[k], nan=1.0)), tost_of.get(k),
                      alpha=alpha, margin=margin) for k, r in enumerate(raw)]
    figures = [CostFigure(k, d.label, d.unit, d.scope, d.weighed)
               for k in _order(list(rec)) for d in [describe(k)]]
    return Costs(len(entries), margin, figures, entries, _series(rec, data), METHOD, alpha)
