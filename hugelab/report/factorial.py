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
from hugelab.report.model.effects import Factorial
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


def claims(p: Plan, *, better: str, alpha: float, margin: float
           ) -> tuple[list[Claim], list[str]]:
    """Every main effect and interaction the report states, unadjusted; and the names of
    those no block could estimate (a cell with no ok trial): they stay out of the family."""
    out, empty = [], []
    for s in fx.effect_specs(p.layout):
        d = fx.contrasts(p.logy, p.layout, s)
        if not np.any(np.isfinite(d)):
            empty.append(label(p, s))
            continue
        c = fx.judge(d, better=better, alpha=alpha, margin=margin)
        out.append(Claim(s, label(p, s), _scope(p, s.where), c, d))
    return out, empty


def _entry(p: Plan, c: Claim, comp: Comparison) -> dict[str, Any]:
    s = c.spec
    d = comp.to_dict()
    out = {"name": c.name, "kind": s.kind, "scope": c.scope,
           "factor": p.layout.factors[s.factor], "level": p.layout.levels[s.factor][s.level],
           "base_level": p.layout.levels[s.factor][0], **d,
           "blocks_used": int(np.sum(np.isfinite(c.contrast)))}
    if s.kind == "interaction":
        assert s.by is not None and s.by_level is not None
        out.update(by=p.layout.factors[s.by], by_level=p.layout.levels[s.by][s.by_level],
                   by_base=p.layout.levels[s.by][0],
                   by_scenario=not p.layout.arm[s.by],
                   interaction_verdict=fx.interaction_verdict(comp))
    return out


def along(p: Plan, *, better: str, alpha: float, margin: float) -> list[dict[str, Any]]:
    """For each ordered scenario factor (workers 1, 4, 16): each arm factor level's effect at
    every level of it (over the other scenario factors), with unadjusted intervals: a
    description of how the effect changes, the interactions above carry the verdicts."""
    out: list[dict[str, Any]] = []
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
                    points.append({"level": f.levels[k], "x": x, "effect_pct": c.effect_pct,
                                   "ci_low_pct": c.ci_low_pct, "ci_high_pct": c.ci_high_pct,
                                   "n_units": c.n_units})
                out.append({"parameter": f.name, "factor": g.name, "level": g.levels[lv],
                            "base_level": g.levels[0], "points": points})
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:+.1f}%"


def _interval(e: dict[str, Any]) -> str:
    if e["n_units"] < MIN_UNITS:
        return f"{_pct(e['effect_pct'])} (only {e['n_units']} block(s): too few for an interval)"
    return f"{_pct(e['effect_pct'])} [{_pct(e['ci_low_pct'])}, {_pct(e['ci_high_pct'])}]"


def _how(e: dict[str, Any], margin: float) -> str:
    if e["verdict"] == "equivalent":
        return f"no difference beyond ±{100 * margin:g}% (equivalent)"
    if e["verdict"] == "inconclusive":
        return "inconclusive (no verdict after Holm)"
    return str(e["verdict"])


def _rank(levels: list[dict[str, Any]]) -> float:
    """A factor's weight: its largest effect with a verdict of difference, else its largest."""
    decided = [abs(e["effect_pct"]) for e in levels if e["verdict"] in ("faster", "slower")]
    return max(decided) + 1e6 if decided else max(abs(e["effect_pct"]) for e in levels)


def what_matters(main: list[dict[str, Any]], inter: list[dict[str, Any]],
                 family: int, margin: float) -> str:
    """One paragraph in the manner of mnstory's conclusions: factors ranked by effect (those
    with a verdict of difference first), every level's claim with its interval and verdict."""
    overall = [e for e in main if e["scope"] == "overall" and e["effect_pct"] is not None]
    if not overall:
        return "No factor has an estimate yet (too few complete blocks)."
    by: dict[str, list[dict[str, Any]]] = {}
    for e in overall:
        by.setdefault(e["factor"], []).append(e)
    parts = []
    for factor, levels in sorted(by.items(), key=lambda kv: -_rank(kv[1])):
        said = "; ".join(f"{e['level']} vs {e['base_level']} {_interval(e)}, {_how(e, margin)}"
                         for e in sorted(levels, key=lambda e: -abs(e["effect_pct"])))
        parts.append(f"{factor}: {said}")
    text = "By size of effect: " + ". ".join(parts) + "."
    top = [e for e in inter if e["scope"] == "overall"]
    found = [e for e in top if e.get("interaction_verdict") == "interaction"]
    if found:
        text += " Interactions: " + "; ".join(
            f"{e['factor']}={e['level']}'s effect changes by {_interval(e)} when {e['by']} is "
            f"{e['by_level']} instead of {e['by_base']}" for e in found) + "."
    elif top:
        eq = sum(1 for e in top if e.get("interaction_verdict") == "equivalent")
        big = max(top, key=lambda e: abs(e["effect_pct"] or 0.0))
        text += (f" No interaction detected among {len(top)} tested"
                 + (f" ({eq} shown equivalent within ±{100 * margin:g}%)" if eq else "")
                 + f"; the largest, {big['factor']} × {big['by']}: {_interval(big)}.")
    return text + f" Holm across all {family} claims of this report."


def two_way(p: Plan, medians: list[float | None]) -> list[dict[str, Any]]:
    """With exactly two arm factors (002's host x guest): per scenario, a table of cell
    medians, rows the first factor's levels, columns the second's."""
    arm = [i for i, a in enumerate(p.layout.arm) if a]
    if len(arm) != 2:
        return []
    f, g = arm
    scen = [i for i, a in enumerate(p.layout.arm) if not a]
    out: dict[tuple[int, ...], dict[str, Any]] = {}
    for col, cell in enumerate(p.layout.cells):
        key = tuple(cell[i] for i in scen)
        grid = out.setdefault(key, {
            "scope": ",".join(f"{p.layout.factors[i]}={p.layout.levels[i][cell[i]]}"
                              for i in scen) or "overall",
            "rows": p.layout.factors[f], "columns": p.layout.factors[g],
            "row_levels": list(p.layout.levels[f]), "column_levels": list(p.layout.levels[g]),
            "medians": [[None] * len(p.layout.levels[g]) for _ in p.layout.levels[f]]})
        grid["medians"][cell[f]][cell[g]] = medians[p.columns[col]]
    return list(out.values())


def view(p: Plan, cl: list[Claim], adjusted: dict[str, Comparison], *, better: str,
         alpha: float, margin: float, family: int, empty: list[str],
         medians: list[float | None]) -> Factorial:
    """The report's `factorial` section from the adjusted claims."""
    entries = [_entry(p, c, adjusted[c.name]) for c in cl]
    main = [e for e in entries if e["kind"] == "main"]
    inter = [e for e in entries if e["kind"] == "interaction"]
    return Factorial.from_json(clean({"factors": [{"name": f.name, "levels": list(f.levels), "scenario": f.scenario,
                         "ordered": f.ordered} for f in p.exp.factors],
            "cells": len(p.columns), "main_effects": main, "interactions": inter,
            "along": along(p, better=better, alpha=alpha, margin=margin),
            "summary": what_matters(main, inter, family, margin),
            "not_estimable": empty, "two_way": two_way(p, medians),
            "cell_levels": {a.name: dict(a.levels) for a in p.exp.arms}}))
