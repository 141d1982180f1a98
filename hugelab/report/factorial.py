"""The report's answers about factors: main effects, two-way interactions, effects along an
ordered workload parameter, and a "what matters" paragraph. Pure over a loaded run.

The estimators are `hugelab.stats.factorial` (within-block contrasts of log values, robust
paired analysis per contrast); this module maps a run's cells onto their layout, names every
claim readably and returns raw comparisons, so `analysis` can Holm-adjust them together with
the cell comparisons: one family for every claim in the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hugelab.experiment import Experiment
from hugelab.report.model.base import clean
from hugelab.report.model.effects import (
    AlongLine,
    AlongPoint,
    Effect,
    Factorial,
    FactorInfo,
    TwoWay,
)
from hugelab.stats import factorial as fx
from hugelab.stats.paired import MIN_UNITS, Comparison

MAX_ALONG = 24  # lines drawn along an ordered parameter (factor levels x parameters)


@dataclass
class Claim:
    """One main effect or interaction: its spec, label, and (raw, later adjusted) comparison."""

    spec: fx.EffectSpec
    name: str
    scope: str
    comparison: Comparison
    contrast: NDArray[np.float64]


@dataclass
class Plan:
    """A run's cells as a factorial layout: the data columns and the model."""

    exp: Experiment
    layout: fx.Layout
    columns: list[int]  # first series index per layout column
    logy: NDArray[np.float64]  # blocks x cells


def plan(run: dict[str, Any], series_arm: list[str], values: NDArray[np.float64]
         ) -> Plan | None:
    """The layout of a run with factors (None for a flat run, or one factor with one level).
    `values`: the report's blocks x series matrix (NaN = no usable value). A cell that ran in
    several guests at once is the mean of their log values in each block."""
    d = run.get("experiment") or {}
    if not d.get("factors"):
        return None
    exp = Experiment.from_dict(d)
    factors = exp.factors
    if not any(not f.scenario and len(f.levels) > 1 for f in factors):
        return None
    cells, columns = [], []
    for arm in exp.arms:
        idx = [i for i, a in enumerate(series_arm) if a == arm.name]
        if not idx:
            continue  # skipped or never ran
        lv = dict(arm.levels)
        cells.append(tuple(f.levels.index(lv[f.name]) for f in factors))
        columns.append(idx)
    if not cells:
        return None
    layout = fx.Layout(tuple(f.name for f in factors), tuple(f.levels for f in factors),
                       tuple(not f.scenario for f in factors), tuple(cells))
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(values)
        logy = np.full((values.shape[0], len(columns)), np.nan)
        for j, idx in enumerate(columns):
            sub = logs[:, idx]
            n = np.sum(np.isfinite(sub), axis=1)
            total = np.nansum(sub, axis=1)
            logy[:, j] = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    return Plan(exp, layout, [c[0] for c in columns], logy)


def _scope(p: Plan, where: tuple[tuple[int, int], ...]) -> str:
    return ",".join(f"{p.layout.factors[f]}={p.layout.levels[f][lv]}" for f, lv in where) \
        if where else "overall"


def _level(p: Plan, f: int, lv: int) -> str:
    return f"{p.layout.levels[f][lv]} vs {p.layout.levels[f][0]}"


def label(p: Plan, s: fx.EffectSpec) -> str:
    """'qemu: hugetlbfs vs anon', 'host × guest: (thp vs never) × (always vs never)', with
    ' [workers=4]' for a claim restricted to one scenario."""
    names = p.layout.factors
    if s.kind == "main":
        text = f"{names[s.factor]}: {_level(p, s.factor, s.level)}"
    else:
        assert s.by is not None and s.by_level is not None
        text = (f"{names[s.factor]} × {names[s.by]}: ({_level(p, s.factor, s.level)}) × "
                f"({_level(p, s.by, s.by_level)})")
    return text + (f" [{_scope(p, s.where)}]" if s.where else "")


def conditions(p: Plan) -> list[int]:
    """The layout's host conditions (`Experiment.condition_factors`): factor indices."""
    names = {f.name for f in p.exp.condition_factors}
    return [i for i, f in enumerate(p.layout.factors) if f in names]


def _per_condition(p: Plan, mains: list[fx.EffectSpec]) -> list[fx.EffectSpec]:
    """Every other arm factor's main effects within each level of each host condition: the
    effect a user gets on a host in that state (THP's gain depends on contiguity)."""
    out = []
    for c in conditions(p):
        for lv in range(len(p.layout.levels[c])):
            out += [fx.EffectSpec("main", m.factor, m.level, where=((c, lv),))
                    for m in mains if m.factor != c and not m.where]
    return out


def claims(p: Plan, *, better: str, alpha: float, margin: float
           ) -> tuple[list[Claim], list[str]]:
    """Every main effect and interaction the report states, unadjusted; and the names of
    those no block could estimate (a cell with no ok trial): they stay out of the family."""
    out, empty = [], []
    specs = fx.effect_specs(p.layout)
    specs += _per_condition(p, [s for s in specs if s.kind == "main"])
    for s in specs:
        d = fx.contrasts(p.logy, p.layout, s)
        if not np.any(np.isfinite(d)):
            empty.append(label(p, s))
            continue
        c = fx.judge(d, better=better, alpha=alpha, margin=margin)
        out.append(Claim(s, label(p, s), _scope(p, s.where), c, d))
    return out, empty


def _entry(p: Plan, c: Claim, comp: Comparison) -> Effect:
    s = c.spec
    e = Effect(c.name, s.kind, c.scope, p.layout.factors[s.factor],
               p.layout.levels[s.factor][s.level], p.layout.levels[s.factor][0],
               **comp.to_dict(), blocks_used=int(np.sum(np.isfinite(c.contrast))))
    if s.kind == "interaction":
        assert s.by is not None and s.by_level is not None
        e.by, e.by_level = p.layout.factors[s.by], p.layout.levels[s.by][s.by_level]
        e.by_base, e.by_scenario = p.layout.levels[s.by][0], not p.layout.arm[s.by]
        e.interaction_verdict = fx.interaction_verdict(comp)
    return e


def _point(level: str, x: float, c: Comparison) -> AlongPoint:
    return AlongPoint(level, clean(x), clean(c.effect_pct), clean(c.ci_low_pct),
                      clean(c.ci_high_pct), c.n_units)


def along(p: Plan, *, better: str, alpha: float, margin: float) -> list[AlongLine]:
    """For each ordered scenario factor (workers 1, 4, 16): each arm factor level's effect at
    every level of it (over the other scenario factors), with unadjusted intervals: a
    description of how the effect changes, the interactions above carry the verdicts."""
    out: list[AlongLine] = []
    for i, f in enumerate(p.exp.factors):
        if not (f.scenario and f.ordered):
            continue
        for j, g in enumerate(p.exp.factors):
            if g.scenario:
                continue
            for lv in range(1, len(g.levels)):
                if len(out) >= MAX_ALONG:
                    return out
                points = []
                for k, x in enumerate(f.positions):
                    d = fx.main_contrasts(p.logy, p.layout, j, lv, where={i: k})
                    c = fx.judge(d, better=better, alpha=alpha, margin=margin)
                    points.append(_point(f.levels[k], x, c))
                out.append(AlongLine(f.name, g.name, g.levels[lv], g.levels[0], points))
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:+.1f}%"


def _interval(e: Effect) -> str:
    if e.n_units < MIN_UNITS:
        return f"{_pct(e.effect_pct)} (only {e.n_units} block(s): too few for an interval)"
    return f"{_pct(e.effect_pct)} [{_pct(e.ci_low_pct)}, {_pct(e.ci_high_pct)}]"


def _how(e: Effect, margin: float) -> str:
    if e.verdict == "equivalent":
        return f"no difference beyond ±{100 * margin:g}% (equivalent)"
    if e.verdict == "inconclusive":
        return "inconclusive (no verdict after Holm)"
    return str(e.verdict)


def _size(e: Effect) -> float:
    return abs(e.effect_pct or 0.0)


def _rank(levels: list[Effect]) -> float:
    """A factor's weight: its largest effect with a verdict of difference, else its largest."""
    decided = [_size(e) for e in levels if e.verdict in ("faster", "slower")]
    return max(decided) + 1e6 if decided else max(_size(e) for e in levels)


def _interactions(top: list[Effect], margin: float) -> str:
    found = [e for e in top if e.interaction_verdict == "interaction"]
    if found:
        return " Interactions: " + "; ".join(
            f"{e.factor}={e.level}'s effect changes by {_interval(e)} when {e.by} is "
            f"{e.by_level} instead of {e.by_base}" for e in found) + "."
    if not top:
        return ""
    eq = sum(1 for e in top if e.interaction_verdict == "equivalent")
    big = max(top, key=_size)
    return (f" No interaction detected among {len(top)} tested"
            + (f" ({eq} shown equivalent within ±{100 * margin:g}%)" if eq else "")
            + f"; the largest, {big.factor} × {big.by}: {_interval(big)}.")


def what_matters(main: list[Effect], inter: list[Effect], family: int, margin: float) -> str:
    """One paragraph in the manner of mnstory's conclusions: factors ranked by effect (those
    with a verdict of difference first), every level's claim with its interval and verdict."""
    overall = [e for e in main if e.scope == "overall" and e.effect_pct is not None]
    if not overall:
        return "No factor has an estimate yet (too few complete blocks)."
    by: dict[str, list[Effect]] = {}
    for e in overall:
        by.setdefault(e.factor, []).append(e)
    parts = []
    for factor, levels in sorted(by.items(), key=lambda kv: -_rank(kv[1])):
        said = "; ".join(f"{e.level} vs {e.base_level} {_interval(e)}, {_how(e, margin)}"
                         for e in sorted(levels, key=lambda e: -_size(e)))
        parts.append(f"{factor}: {said}")
    text = "By size of effect: " + ". ".join(parts) + "."
    text += _interactions([e for e in inter if e.scope == "overall"], margin)
    return text + f" Holm across all {family} claims of this report."


def two_way(p: Plan, medians: list[float | None]) -> list[TwoWay]:
    """With exactly two arm factors (002's host x guest): per scenario, a table of cell
    medians, rows the first factor's levels, columns the second's."""
    arm = [i for i, a in enumerate(p.layout.arm) if a]
    if len(arm) != 2:
        return []
    f, g = arm
    scen = [i for i, a in enumerate(p.layout.arm) if not a]
    out: dict[tuple[int, ...], TwoWay] = {}
    for col, cell in enumerate(p.layout.cells):
        key = tuple(cell[i] for i in scen)
        grid = out.setdefault(key, TwoWay(
            ",".join(f"{p.layout.factors[i]}={p.layout.levels[i][cell[i]]}"
                     for i in scen) or "overall",
            p.layout.factors[f], p.layout.factors[g], list(p.layout.levels[f]),
            list(p.layout.levels[g]),
            [[None] * len(p.layout.levels[g]) for _ in p.layout.levels[f]]))
        grid.medians[cell[f]][cell[g]] = medians[p.columns[col]]
    return list(out.values())


def measured(p: Plan, unusable: dict[tuple[int, int], float], series_arm: list[str]
             ) -> dict[str, dict[str, float]]:
    """Per host condition, per level: the median measured unusable free index of its trials
    (the cost record's `host_unusable`, from /proc/buddyinfo)."""
    out: dict[str, dict[str, float]] = {}
    levels = {a.name: dict(a.levels) for a in p.exp.arms}
    for f in p.exp.condition_factors:
        got: dict[str, list[float]] = {}
        for (_block, series), v in unusable.items():
            lv = levels.get(series_arm[series], {}).get(f.name)
            if lv is not None and np.isfinite(v):
                got.setdefault(lv, []).append(v)
        out[f.name] = {lv: round(float(np.median(v)), 3) for lv, v in got.items()}
    return out


def _info(p: Plan, measured: dict[str, dict[str, float]]) -> list[FactorInfo]:
    cond = {f.name for f in p.exp.condition_factors}
    return [FactorInfo(f.name, list(f.levels), f.scenario, f.ordered,
                       True if f.name in cond else None, measured.get(f.name) or None)
            for f in p.exp.factors]


def view(p: Plan, cl: list[Claim], adjusted: dict[str, Comparison], *, better: str,
         alpha: float, margin: float, family: int, empty: list[str],
         medians: list[float | None],
         measured: dict[str, dict[str, float]] | None = None) -> Factorial:
    """The report's `factorial` section from the adjusted claims."""
    entries = [_entry(p, c, adjusted[c.name]) for c in cl]
    main = [e for e in entries if e.kind == "main"]
    inter = [e for e in entries if e.kind == "interaction"]
    return Factorial(
        _info(p, measured or {}),
        len(p.columns), main, inter, along(p, better=better, alpha=alpha, margin=margin),
        what_matters(main, inter, family, margin), list(empty), two_way(p, medians),
        {a.name: dict(a.levels) for a in p.exp.arms})
