"""Tails: the candidate's high percentiles and outliers against the baseline's."""

from __future__ import annotations

from hugelab.report.model.comparison import Tails
from hugelab.report.model.result import Result
from hugelab.report.sections.labels import comparison_label, folded
from hugelab.report.table import Table, pct, ratio

TITLE = "Tails (candidate / baseline; intervals: bootstrap, or order statistics above 20,000 values)"
LEGEND = ("p95/p99 ratio: the candidate's percentile over the baseline's [interval]; outl. "
          "base/cand: share of each arm's values that are outliers (robust z beyond the fence), "
          "outl. diff: candidate minus baseline [interval]")


def _pct100(v: float | None) -> str:
    return pct(None if v is None else 100 * v)


def _row(name: str, tl: Tails) -> list[str]:
    qs = {round(q.q, 4): q for q in tl.quantiles}
    cells = [f"{ratio(q.ratio)} [{ratio(q.low)}, {ratio(q.high)}]"
             if (q := qs.get(k)) else "no estimate" for k in (0.95, 0.99)]
    o = tl.outliers
    return [name, *cells, f"{100 * o.baseline_rate:.2f}%", f"{100 * o.candidate_rate:.2f}%",
            f"{_pct100(o.difference)} [{_pct100(o.low)}, {_pct100(o.high)}]"]


def tails(result: Result) -> Table:
    t = Table("tails", TITLE, ["comparison", "p95 ratio", "p99 ratio", "outl. base",
                               "outl. cand", "outl. diff"], [], right={1, 2, 3, 4, 5},
              full=True)
    t.notes.append(LEGEND)
    per: list[tuple[str, str]] = []
    for c in result.comparisons:
        name = comparison_label(result, c)
        if not c.tails:
            per.append((name, "fewer than 10 pairs, no tail estimates"))
            continue
        t.rows.append(_row(name, c.tails))
        per += [(name, n) for n in c.tails.notes]
    if not t.rows:
        t.notes = []  # the legend explains nothing when no row is shown
    t.notes += folded(per, len(result.comparisons))
    return t
