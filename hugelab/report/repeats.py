"""Replication in the report: the effect across a run's repeats, and regimes within a run.

A run of several repeats (`hugelab run --repeats R`) gets, per comparison, each repeat's own
effect and interval and the effect across repeats with the repeat as a random effect
(:mod:`hugelab.stats.repeats`: Paule-Mandel tau, HKSJ interval): the JSON key `replication`
and the "Replication" table. Every comparison with enough blocks is also checked for two
regimes among its per-block effects (:mod:`hugelab.stats.regimes`): its `regimes` entry, and a
table and a warning when the blocks split. Pure: Paired comparisons in, JSON-able dicts out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from hugelab.report.load import RunData
from hugelab.report.table import Table, pct, pval
from hugelab.stats import regimes
from hugelab.stats import repeats as stats_repeats
from hugelab.stats._util import StatsInputError
from hugelab.trial.load import LABELS

REGIME_ALPHA = 0.01  # a warning: conservative
LOAD_KEYS = ("steal_share", "other_busy_share", "psi_cpu_some_share", "psi_memory_some_share")
LOAD_MIN_BLOCKS = 10


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


def block_load(data: RunData, series: Sequence[str]) -> dict[int, dict[str, float]]:
    """Per sampled block: each load reading (hugelab.trial.load) averaged over the trials of
    `series` in that block."""
    acc: dict[int, dict[str, list[float]]] = {}
    for name in series:
        d = data.details[data.index(name)]
        for block, mon in zip(d.blocks, d.monitors, strict=True):
            load = mon.get("load") or {}
            for k in LOAD_KEYS:
                if isinstance(load.get(k), int | float):
                    acc.setdefault(block, {}).setdefault(k, []).append(float(load[k]))
    return {b: {k: float(np.mean(v)) for k, v in ks.items()} for b, ks in acc.items()}


def load_effect(p: PairedLike, data: RunData, split: dict[str, Any] | None
                ) -> dict[str, Any] | None:
    """The comparison's per-block effect against the machine's load in that block: Spearman's
    rho per reading, and with two regimes each regime's median reading (None: no load data)."""
    per = block_load(data, (p.baseline, p.candidate))
    d = dict(zip(p.blocks.tolist(), p.log_ratio.tolist(), strict=True))
    common = [b for b in d if b in per]
    if len(common) < LOAD_MIN_BLOCKS:
        return None
    out: dict[str, Any] = {"blocks": len(common), "spearman": {}}
    for k in LOAD_KEYS:
        xs = [(per[b][k], d[b]) for b in common if k in per[b]]
        if len(xs) >= LOAD_MIN_BLOCKS and len({x for x, _ in xs}) > 1:
            rho, pv = stats.spearmanr([x for x, _ in xs], [y for _, y in xs])
            out["spearman"][k] = {"rho": float(rho), "p": float(pv), "blocks": len(xs)}
    if split and split.get("split"):
        cut = sorted(d.values())[split["low"]["blocks"] - 1]
        for name, pick in (("low", lambda v: v <= cut), ("high", lambda v: v > cut)):
            mine = [per[b] for b in common if pick(d[b])]
            out[f"{name}_regime_median"] = {k: float(np.median([m[k] for m in mine if k in m]))
                                            for k in LOAD_KEYS if any(k in m for m in mine)}
    strong = [f"{LABELS[k]} (rho {v['rho']:+.2f}, p {v['p']:.2g})"
              for k, v in out["spearman"].items() if v["p"] < REGIME_ALPHA]
    out["reading"] = ("the effect moved with the machine's load: " + ", ".join(strong)
                      if strong else "no link between the effect and the machine's load "
                      f"detected over {len(common)} blocks")
    return out


def warnings(comps: list[dict[str, Any]], rep: list[dict[str, Any]] | None) -> list[str]:
    out = [f"{r['name']}: {r['reading']}" for r in rep or [] if r.get("disagree")]
    out += [f"{c['name']}: {c['regimes']['reading']}" for c in comps
            if (c.get("regimes") or {}).get("split")]
    out += [f"{c['name']}: {c['load_effect']['reading']}" for c in comps
            if (c.get("load_effect") or {}).get("reading", "").startswith("the effect moved")]
    return out


def _effect(e: dict[str, Any]) -> str:
    return f"{pct(e.get('effect_pct'), 1)} [{pct(e.get('ci_low_pct'), 1)}, " \
        f"{pct(e.get('ci_high_pct'), 1)}]"


def _own(e: dict[str, Any], conf: float, result: dict[str, Any]) -> list[str]:
    """A repeat's effect, blocks and reading; without an interval, why (too few pairs)."""
    if e.get("ci_low_pct") is not None and math.isfinite(e["ci_low_pct"]):
        return [_effect(e), str(e["n"]), "own interval"]
    need = stats_repeats.pairs_for_interval(result["options"]["alpha"])
    return [f"{pct(e.get('effect_pct'), 1)} [needs {need} pairs, has {e['n']}]", str(e["n"]),
            f"too few blocks for a {conf:g}% interval of its own"]


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
            t.rows.append([r["name"], str(e["repeat"] + 1), *_own(e, conf, result)])
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
        load = c.get("load_effect") or {}
        if load.get("low_regime_median"):
            lo, hi = load["low_regime_median"], load.get("high_regime_median") or {}
            t.notes.append(f"{c['name']}: median load in the low / high regime's blocks: "
                           + ", ".join(f"{LABELS[k]} {100 * lo[k]:.0f}% / {100 * hi[k]:.0f}%"
                                       for k in lo if k in hi))
    t.notes.append("the two-means split of the blocks' effects, each regime >= 20% of the "
                   "blocks, against Gaussian blocks; a run that saw two regimes has one interval "
                   "over a mixture, and another run may see other shares: repeat it (--repeats)")
    return t


def tables(result: dict[str, Any]) -> list[Table]:
    return [t for t in (replication_table(result), regimes_table(result)) if t is not None]
