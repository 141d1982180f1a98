"""Replication in the report: the effect across a run's repeats, and regimes within a run.

A run of several repeats (`hugelab run --repeats R`) gets, per comparison, each repeat's own
effect and interval and the effect across repeats with the repeat as a random effect
(:mod:`hugelab.stats.repeats`: Paule-Mandel tau, HKSJ interval): the JSON key `replication`
and the "Replication" table. Every comparison with enough blocks is also checked for two
regimes among its per-block effects (:mod:`hugelab.stats.regimes`): its `regimes` entry, and a
table and a warning when the blocks split. Pure: Paired comparisons in, JSON-able dicts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from hugelab.report.table import Table, pct, pval
from hugelab.stats import regimes
from hugelab.stats import repeats as stats_repeats
from hugelab.stats._util import StatsInputError

REGIME_ALPHA = 0.01  # a warning: conservative


class PairedLike(Protocol):
    name: str
    baseline: str
    candidate: str
    blocks: NDArray[np.int64]
    better: str

    @property
    def log_ratio(self) -> NDArray[np.float64]: ...


def run_repeats(run: dict[str, Any]) -> tuple[int, int]:
    """(repeats, blocks per repeat) of a stored run; (1, blocks) for a run of one."""
    exp = run.get("experiment") or {}
    return int(exp.get("repeats") or 1), int(exp.get("blocks") or 0)


def replication(ps: Sequence[PairedLike], run: dict[str, Any], *, alpha: float,
                margin: float) -> list[dict[str, Any]] | None:
    """Per comparison: its repeats combined (None when the run has a single repeat)."""
    reps, per = run_repeats(run)
    if reps < 2 or per < 1:
        return None
    out = []
    for p in ps:
        which = p.blocks // per
        groups = [p.log_ratio[which == r] for r in range(reps)]
        head = {"name": p.name, "baseline": p.baseline, "candidate": p.candidate,
                "repeats_planned": reps}
        try:
            rep = stats_repeats.combine(groups, better=p.better, alpha=alpha, margin=margin)
        except StatsInputError as exc:
            out.append({**head, "error": exc.message})
            continue
        out.append({**head, **rep.to_dict()})
    return out


def regimes_of(p: PairedLike) -> dict[str, Any] | None:
    """Two regimes among the comparison's per-block effects, in block order (None: too few)."""
    d = p.log_ratio
    if np.sum(np.isfinite(d)) < regimes.MIN_BLOCKS:
        return None
    out: dict[str, Any] = regimes.detect(d[np.argsort(p.blocks)], alpha=REGIME_ALPHA).to_dict()
    return out


def warnings(comps: list[dict[str, Any]], rep: list[dict[str, Any]] | None) -> list[str]:
    out = [f"{r['name']}: {r['reading']}" for r in rep or [] if r.get("disagree")]
    out += [f"{c['name']}: {c['regimes']['reading']}" for c in comps
            if (c.get("regimes") or {}).get("split")]
    return out


def _effect(e: dict[str, Any]) -> str:
    return f"{pct(e.get('effect_pct'), 1)} [{pct(e.get('ci_low_pct'), 1)}, " \
        f"{pct(e.get('ci_high_pct'), 1)}]"


def replication_table(result: dict[str, Any]) -> Table | None:
    rep = result.get("replication")
    if not rep:
        return None
    conf = 100 * (1 - result["options"]["alpha"])
    t = Table("replication", "Replication: the effect across repeats (repeat as a random "
              "effect: Paule-Mandel tau, HKSJ interval)",
              ["comparison", "repeat", f"effect [{conf:g}% CI]", "blocks", "reading"], [],
              right={2, 3})
    for r in rep:
        if r.get("error"):
            t.rows.append([r["name"], "-", "-", "-", r["error"]])
            continue
        for e in r["repeats"]:
            t.rows.append([r["name"], str(e["repeat"] + 1), _effect(e), str(e["n"]),
                           "own interval"])
        p = r["pooled"]
        tau = "-" if r["tau_pct"] is None else f"{r['tau_pct']:.1f}%"
        t.rows.append([r["name"], f"across {p['k']}", _effect(p), "-",
                       f"{r['verdict']}; tau {tau}; Q p {pval(p['q_p'])}"])
        t.notes.append(f"{r['name']}: {r['reading']}")
        t.notes += [f"{r['name']}: {n}" for n in r["notes"]]
    t.notes.append("each repeat's interval describes that repeat's minutes; the across-repeat "
                   "interval is the machine's, and with few repeats it is wide by right "
                   "(t with repeats - 1 degrees of freedom)")
    return t


def regimes_table(result: dict[str, Any]) -> Table | None:
    split = [c for c in result["comparisons"] if (c.get("regimes") or {}).get("split")]
    if not split:
        return None
    t = Table("regimes", f"Regimes: per-block effects that split in two (alpha {REGIME_ALPHA:g})",
              ["comparison", "low regime", "high regime", "switches", "p"], [],
              right={1, 2, 3, 4})
    for c in split:
        g = c["regimes"]
        t.rows.append([c["name"],
                       f"{pct(g['low']['effect_pct'], 1)} in {g['low']['blocks']} "
                       f"({100 * g['low']['share']:.0f}%)",
                       f"{pct(g['high']['effect_pct'], 1)} in {g['high']['blocks']} "
                       f"({100 * g['high']['share']:.0f}%)", str(g["switches"]),
                       pval(g["p_value"])])
    t.notes.append("the two-means split of the blocks' effects, each regime >= 20% of the "
                   "blocks, against Gaussian blocks; a run that saw two regimes has one interval "
                   "over a mixture, and another run may see other shares: repeat it (--repeats)")
    return t


def tables(result: dict[str, Any]) -> list[Table]:
    return [t for t in (replication_table(result), regimes_table(result)) if t is not None]
