"""The effect across a run's repeats (table "Replication"), and regimes among one run's
blocks (table "Regimes") with the machine's load in each regime's blocks."""

from __future__ import annotations

import math
from typing import Protocol

from hugelab.report.model.result import Result
from hugelab.report.repeats import REGIME_ALPHA
from hugelab.report.table import Table, ci_column, confidence, pct, pval
from hugelab.stats.repeats import pairs_for_interval
from hugelab.trial.load import LABELS


class HasInterval(Protocol):
    effect_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None


def _effect(e: HasInterval) -> str:
    return f"{pct(e.effect_pct, 1)} [{pct(e.ci_low_pct, 1)}, {pct(e.ci_high_pct, 1)}]"


class RepeatEffect(HasInterval, Protocol):
    n: int


def _own(e: RepeatEffect, conf: float, alpha: float) -> list[str]:
    """A repeat's effect, blocks and reading; without an interval, why (too few pairs)."""
    if e.ci_low_pct is not None and math.isfinite(e.ci_low_pct):
        return [_effect(e), str(e.n), "own interval"]
    need = pairs_for_interval(alpha)
    return [f"{pct(e.effect_pct, 1)} [needs {need} pairs, has {e.n}]", str(e.n),
            f"too few blocks for a {conf:g}% interval of its own"]


def replication_table(result: Result) -> Table | None:
    rep = result.replication
    if not rep:
        return None
    conf = confidence(result.options.alpha)
    t = Table("replication", "Replication: the effect across repeats (repeat as a random "
              "effect: Paule-Mandel tau, HKSJ interval)",
              ["comparison", "repeat", ci_column(result.options.alpha), "blocks", "reading"], [],
              right={2, 3})
    for r in rep:
        if r.error or r.pooled is None:
            t.rows.append([r.name, "-", "-", "-", str(r.error)])
            continue
        for e in r.repeats or []:
            t.rows.append([r.name, str(e.repeat + 1), *_own(e, conf, result.options.alpha)])
        p = r.pooled
        tau = "-" if r.tau_pct is None else f"{r.tau_pct:.1f}%"
        t.rows.append([r.name, f"across {p.k}", _effect(p), "-",
                       f"{r.verdict}; tau {tau}; Q p {pval(p.q_p)}"])
        t.notes.append(f"{r.name}: {r.reading}")
        t.notes += [f"{r.name}: {n}" for n in r.notes or []]
    t.notes.append("each repeat's interval describes that repeat's minutes; the across-repeat "
                   "interval is the machine's, and with few repeats it is wide by right "
                   "(t with repeats - 1 degrees of freedom)")
    return t


def regimes_table(result: Result) -> Table | None:
    split = [c for c in result.comparisons if c.regimes is not None and c.regimes.split]
    if not split:
        return None
    t = Table("regimes", f"Regimes: per-block effects that split in two (alpha {REGIME_ALPHA:g})",
              ["comparison", "low regime", "high regime", "switches", "p"], [],
              right={1, 2, 3, 4})
    for c in split:
        g = c.regimes
        assert g is not None and g.low is not None and g.high is not None
        t.rows.append([c.name,
                       f"{pct(g.low.effect_pct, 1)} in {g.low.blocks} "
                       f"({100 * g.low.share:.0f}%)",
                       f"{pct(g.high.effect_pct, 1)} in {g.high.blocks} "
                       f"({100 * g.high.share:.0f}%)", str(g.switches), pval(g.p_value)])
        load = c.load_effect
        if load is not None and load.low_regime_median:
            lo, hi = load.low_regime_median, load.high_regime_median or {}
            t.notes.append(f"{c.name}: median load in the low / high regime's blocks: "
                           + ", ".join(f"{LABELS[k]} {100 * lo[k]:.0f}% / {100 * hi[k]:.0f}%"
                                       for k in lo if k in hi))
    t.notes.append("the two-means split of the blocks' effects, each regime >= 20% of the "
                   "blocks, against Gaussian blocks; a run that saw two regimes has one interval "
                   "over a mixture, and another run may see other shares: repeat it (--repeats)")
    return t


def replication_tables(result: Result) -> list[Table]:
    """The replication and regimes tables, where the run has them."""
    return [t for t in (replication_table(result), regimes_table(result)) if t is not None]
