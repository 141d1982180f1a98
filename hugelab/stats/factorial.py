"""Factorial experiments: main effects and two-way interactions from within-block contrasts.

Every block runs one trial of every *cell* (a combination of factor levels) in random order.
The data are log values ``logy`` of shape (..., blocks, cells); NaN marks a cell with no
usable value in that block. Leading dims are for vectorised simulation.

- Contrasts are formed *within* a block, so block effects and slow drift cancel:
  a main effect (factor f at level l vs its baseline level 0) is the mean, over every matched
  pair of cells (identical in every other factor), of ``y[f=l] - y[f=0]``; an interaction
  (f at lf vs 0, g at lg vs 0) is the mean, over every matched quadruple (cells identical in
  every factor other than f and g), of the double difference
  ``(y[f=lf, g=lg] - y[f=0, g=lg]) - (y[f=lf, g=0] - y[f=0, g=0])``. Pairs/quadruples with a
  NaN are skipped in that block; a block with none complete gives NaN. In a complete
  balanced factorial a main contrast equals the difference of the two levels' marginal means
  of log values in the block (the classical effect), an interaction the classical 2x2 one.
- The per-block contrasts are then one paired sample of log-ratios, analysed exactly like a
  paired comparison (:func:`hugelab.stats.paired.compare`): Hodges-Lehmann estimate and
  signed-rank interval, two-sided Wilcoxon signed-rank p for a difference, TOST for
  equivalence within the margin. The block is the unit, so the contrast's own noise (its
  SD grows with the number of cells it differences) is measured, never assumed.
- Factors are *arm* factors (their effect is estimated) or *scenario* factors (workload
  parameters: cells of different scenarios are different workloads and never compared
  directly, but an arm factor's effect may differ between them, an arm x scenario
  interaction). :func:`effect_specs` lists the claims a report states; the caller adjusts
  them all together (Holm's step-down, Shaffer's count: :func:`hugelab.stats.multiple.adjust`).
- :func:`design_power` estimates, by simulation, the adjusted power of each claim for
  given true effects, noise SD and number of blocks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from itertools import product

import numpy as np
from numpy.typing import ArrayLike, NDArray

from hugelab.stats import multiple, paired
from hugelab.stats._util import FloatArray, StatsInputError

IntArray = NDArray[np.intp]
KINDS = ("main", "interaction")
INTERACTION_VERDICTS = ("interaction", "equivalent", "no interaction detected")
BLOCK_SD = 0.02  # shared block effect in design_power's simulation (cancels in contrasts)
_POWER_MARGIN = 0.01  # TOST margin for design_power (does not affect difference verdicts)


@dataclass(frozen=True)
class Layout:
    """Which level of every factor each column (cell) of the data has.

    ``factors``: factor names (arm and scenario factors); ``levels``: level names per factor,
    index 0 being the baseline level; ``arm``: per factor, True for an arm factor (its
    effect is estimated), False for a scenario factor (a workload parameter); ``cells``: per
    data column, the level index of every factor.
    """

    factors: tuple[str, ...]
    levels: tuple[tuple[str, ...], ...]
    arm: tuple[bool, ...]
    cells: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        # accept any sequences, store tuples (the layout is hashable and caches matchings)
        object.__setattr__(self, "factors", tuple(str(f) for f in self.factors))
        object.__setattr__(self, "levels", tuple(tuple(str(v) for v in lv) for lv in self.levels))
        object.__setattr__(self, "arm", tuple(bool(x) for x in self.arm))
        object.__setattr__(self, "cells", tuple(tuple(int(v) for v in c) for c in self.cells))
        k = len(self.factors)
        if k < 1:
            raise StatsInputError("a layout needs at least one factor")
        if len(set(self.factors)) != k:
            raise StatsInputError(f"factor names must be distinct: {self.factors}")
        if len(self.levels) != k or len(self.arm) != k:
            raise StatsInputError(
                f"{k} factors but {len(self.levels)} level lists and {len(self.arm)} arm flags"
            )
        for name, lv in zip(self.factors, self.levels, strict=True):
            if len(lv) < 1:
                raise StatsInputError(f"factor {name!r} has no levels")
            if len(set(lv)) != len(lv):
                raise StatsInputError(f"factor {name!r} has repeated level names: {lv}")
        self._check_cells()

    def _check_cells(self) -> None:
        k = len(self.factors)
        if len(self.cells) < 1:
            raise StatsInputError("a layout needs at least one cell")
        for j, cell in enumerate(self.cells):
            if len(cell) != k:
                raise StatsInputError(f"cell {j} gives {len(cell)} level indices for {k} factors")
            for f, lev in enumerate(cell):
                if not 0 <= lev < len(self.levels[f]):
                    raise StatsInputError(
                        f"cell {j}: level index {lev} out of range for factor {self.factors[f]!r}"
                    )
        if len(set(self.cells)) != len(self.cells):
            raise StatsInputError("two cells have identical levels of every factor")


@dataclass(frozen=True)
class EffectSpec:
    """One claim of a factorial report.

    ``kind`` "main": effect of ``factor`` at ``level`` vs its baseline level. ``kind``
    "interaction": how much that effect changes when factor ``by`` goes from its baseline to
    ``by_level``. ``where``: ((factor, level), ...) restricting the cells used, () for all
    (stored sorted, so equal restrictions compare and hash equal).
    """

    kind: str
    factor: int
    level: int
    by: int | None = None
    by_level: int | None = None
    where: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise StatsInputError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == "interaction") != (self.by is not None and self.by_level is not None):
            raise StatsInputError("an interaction needs by and by_level; a main effect neither")
        if self.kind == "main" and (self.by is not None or self.by_level is not None):
            raise StatsInputError("a main effect takes no by/by_level")
        where = tuple(sorted((int(f), int(v)) for f, v in self.where))
        if len({f for f, _ in where}) != len(where):
            raise StatsInputError(f"where names a factor twice: {self.where}")
        object.__setattr__(self, "where", where)


def _check_factor_level(layout: Layout, factor: int, level: int) -> None:
    if not 0 <= factor < len(layout.factors):
        raise StatsInputError(f"factor index {factor} out of range")
    if not 1 <= level < len(layout.levels[factor]):
        raise StatsInputError(
            f"level {level} of factor {layout.factors[factor]!r}: an effect needs a "
            f"non-baseline level (1..{len(layout.levels[factor]) - 1})"
        )


def _check_where(layout: Layout, where: tuple[tuple[int, int], ...], used: tuple[int, ...]) -> None:
    seen: set[int] = set()
    for f, lev in where:
        if not 0 <= f < len(layout.factors):
            raise StatsInputError(f"where: factor index {f} out of range")
        if f in used:
            raise StatsInputError(
                f"where cannot restrict factor {layout.factors[f]!r}: the effect contrasts it"
            )
        if f in seen:
            raise StatsInputError(f"where names factor {layout.factors[f]!r} twice")
        seen.add(f)
        if not 0 <= lev < len(layout.levels[f]):
            raise StatsInputError(f"where: level {lev} out of range for {layout.factors[f]!r}")


def _where_key(where: Mapping[int, int] | None) -> tuple[tuple[int, int], ...]:
    if where is None:
        return ()
    return tuple(sorted((int(f), int(v)) for f, v in where.items()))


def _frozen(*arrays: list[int]) -> tuple[IntArray, ...]:
    out = []
    for a in arrays:
        arr = np.asarray(a, dtype=np.intp)
        arr.setflags(write=False)
        out.append(arr)
    return tuple(out)


@lru_cache(maxsize=1024)
def _pairs(
    layout: Layout, factor: int, level: int, where: tuple[tuple[int, int], ...]
) -> tuple[IntArray, ...]:
    """Column indices (a, b) of every matched pair: a at ``level``, b at baseline, else equal."""
    col = {cell: j for j, cell in enumerate(layout.cells)}
    a_idx: list[int] = []
    b_idx: list[int] = []
    for j, cell in enumerate(layout.cells):
        if cell[factor] != level or any(cell[f] != v for f, v in where):
            continue
        base = cell[:factor] + (0,) + cell[factor + 1 :]
        if base in col:
            a_idx.append(j)
            b_idx.append(col[base])
    return _frozen(a_idx, b_idx)


def _with(cell: tuple[int, ...], f: int, lf: int, g: int, lg: int) -> tuple[int, ...]:
    out = list(cell)
    out[f], out[g] = lf, lg
    return tuple(out)


@lru_cache(maxsize=1024)
def _quads(
    layout: Layout, f: int, lf: int, g: int, lg: int, where: tuple[tuple[int, int], ...]
) -> tuple[IntArray, ...]:
    """Columns (11, 01, 10, 00) of every matched quadruple (first digit f, second g)."""
    col = {cell: j for j, cell in enumerate(layout.cells)}
    found: list[list[int]] = [[], [], [], []]
    for cell in layout.cells:
        if cell[f] != 0 or cell[g] != 0 or any(cell[h] != v for h, v in where):
            continue
        wanted = (_with(cell, f, lf, g, lg), _with(cell, f, 0, g, lg), _with(cell, f, lf, g, 0))
        if all(w in col for w in wanted):
            for slot, w in zip(found, (*wanted, cell), strict=True):
                slot.append(col[w])
    return _frozen(*found)


def _as_logy(logy: ArrayLike, layout: Layout) -> FloatArray:
    y = np.asarray(logy, dtype=float)
    if y.ndim < 2 or y.shape[-1] != len(layout.cells):
        raise StatsInputError(
            f"logy must have shape (..., blocks, {len(layout.cells)}), got {y.shape}"
        )
    if np.isinf(y).any():
        raise StatsInputError("log values must be finite or NaN (found inf)")
    return y


def _mean_complete(parts: FloatArray) -> FloatArray:
    """Mean over the last axis of the non-NaN entries; NaN (no warning) where none are."""
    ok = ~np.isnan(parts)
    n = ok.sum(axis=-1)
    total = np.where(ok, parts, 0.0).sum(axis=-1)
    out = np.full(n.shape, np.nan)
    np.divide(total, n, out=out, where=n > 0)
    return out


def main_contrasts(
    logy: ArrayLike,
    layout: Layout,
    factor: int,
    level: int,
    where: Mapping[int, int] | None = None,
) -> FloatArray:
    """Per block (shape ``logy.shape[:-1]``): mean of ``y[a] - y[b]`` over matched pairs.

    a has ``factor`` at ``level``, b is identical to a except ``factor`` at level 0. Pairs with
    a NaN are skipped in that block; NaN where no pair is complete (or the layout has none).
    ``where`` = {factor: level} restricts to cells with those levels (one scenario, say).
    In a complete balanced factorial this is the difference of the two levels' marginal
    means of log values within the block.
    """
    y = _as_logy(logy, layout)
    key = _where_key(where)
    _check_factor_level(layout, factor, level)
    _check_where(layout, key, (factor,))
    a, b = _pairs(layout, factor, level, key)
    return _mean_complete(y[..., a] - y[..., b])


def interaction_contrasts(
    logy: ArrayLike,
    layout: Layout,
    f: int,
    lf: int,
    g: int,
    lg: int,
    where: Mapping[int, int] | None = None,
) -> FloatArray:
    """Per block: mean over matched quadruples of the double difference of log values.

    ``(y[f=lf, g=lg] - y[f=0, g=lg]) - (y[f=lf, g=0] - y[f=0, g=0])`` with the four cells
    equal in every factor other than f and g: how much f's effect (lf vs baseline) changes
    when g goes from its baseline to lg. NaN handling and ``where`` as in main_contrasts.
    """
    y = _as_logy(logy, layout)
    key = _where_key(where)
    _check_factor_level(layout, f, lf)
    _check_factor_level(layout, g, lg)
    if f == g:
        raise StatsInputError("an interaction needs two different factors")
    _check_where(layout, key, (f, g))
    c11, c01, c10, c00 = _quads(layout, f, lf, g, lg, key)
    return _mean_complete((y[..., c11] - y[..., c01]) - (y[..., c10] - y[..., c00]))


def _n_matched(layout: Layout, spec: EffectSpec) -> int:
    if spec.kind == "main":
        return int(_pairs(layout, spec.factor, spec.level, spec.where)[0].size)
    assert spec.by is not None and spec.by_level is not None
    return int(_quads(layout, spec.factor, spec.level, spec.by, spec.by_level, spec.where)[0].size)


def _scenarios(layout: Layout) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Scenario factor indices and the distinct scenarios present (sorted level tuples)."""
    idx = tuple(f for f, is_arm in enumerate(layout.arm) if not is_arm)
    present = sorted({tuple(cell[f] for f in idx) for cell in layout.cells})
    return idx, present


def effect_specs(layout: Layout, *, per_scenario: bool = True) -> list[EffectSpec]:
    """The effects a report states, in report order.

    1. Main effect of every non-baseline level of every arm factor, over every cell.
    2. With scenario factors, more than one scenario present and ``per_scenario``: the same
       main effects within each scenario (sorted by scenario levels).
    3. Two-way interactions over every cell, for each pair of factors (f before g, at least
       one an arm factor) and every non-baseline level pair; for arm x scenario the arm
       factor is ``factor`` and the scenario factor ``by``.

    Specs with no matched pair/quadruple in the layout (a subset design) are left out.
    """
    k = len(layout.factors)
    arms = [f for f in range(k) if layout.arm[f]]
    mains = [EffectSpec("main", f, lv) for f in arms for lv in range(1, len(layout.levels[f]))]
    specs = list(mains)
    scen_idx, scenarios = _scenarios(layout)
    if scen_idx and len(scenarios) > 1 and per_scenario:
        for scen in scenarios:
            where = tuple(zip(scen_idx, scen, strict=True))
            specs += [EffectSpec("main", m.factor, m.level, where=where) for m in mains]
    for f in range(k):
        for g in range(f + 1, k):
            if not (layout.arm[f] or layout.arm[g]):
                continue
            for lf, lg in product(range(1, len(layout.levels[f])), range(1, len(layout.levels[g]))):
                if layout.arm[f]:
                    specs.append(EffectSpec("interaction", f, lf, by=g, by_level=lg))
                else:
                    specs.append(EffectSpec("interaction", g, lg, by=f, by_level=lf))
    return [s for s in specs if _n_matched(layout, s) > 0]


def contrasts(logy: ArrayLike, layout: Layout, spec: EffectSpec) -> FloatArray:
    """Per-block contrasts of one spec (main_contrasts or interaction_contrasts)."""
    where = dict(spec.where)
    if spec.kind == "main":
        return main_contrasts(logy, layout, spec.factor, spec.level, where)
    assert spec.by is not None and spec.by_level is not None
    return interaction_contrasts(
        logy, layout, spec.factor, spec.level, spec.by, spec.by_level, where
    )


def _better(better: str) -> paired.Better:
    if better == "lower":
        return "lower"
    if better == "higher":
        return "higher"
    raise StatsInputError(f"better must be 'lower' or 'higher', got {better!r}")


def judge(
    contrast_1d: ArrayLike, *, better: str, alpha: float, margin: float
) -> paired.Comparison:
    """Unadjusted paired verdict for one effect from its per-block contrasts.

    :func:`hugelab.stats.paired.compare` with baseline ones and candidate exp(contrast): the
    Hodges-Lehmann estimate (``effect_pct`` = percent change of the effect's level, or for an
    interaction the ratio of ratios), signed-rank interval at 1-alpha, Wilcoxon p, TOST
    against the margin. NaN blocks are dropped (``n_dropped``). Apply Holm across the whole
    report afterwards (:func:`hugelab.stats.multiple.adjust`).
    """
    c = np.asarray(contrast_1d, dtype=float)
    if c.ndim != 1:
        raise StatsInputError(f"contrasts must be one-dimensional, got shape {c.shape}")
    return paired.compare(
        np.ones(c.shape), np.exp(c), better=_better(better), alpha=alpha, margin=margin
    )


def interaction_verdict(c: paired.Comparison) -> str:
    """Reading of an interaction's (adjusted) verdict.

    faster/slower -> "interaction" (the effect differs between the levels of ``by``);
    equivalent -> "equivalent" (the effect is the same within the margin);
    inconclusive -> "no interaction detected" (neither shown: not evidence of absence).
    """
    if c.verdict in ("faster", "slower"):
        return INTERACTION_VERDICTS[0]
    if c.verdict == "equivalent":
        return INTERACTION_VERDICTS[1]
    if c.verdict == "inconclusive":
        return INTERACTION_VERDICTS[2]
    raise StatsInputError(f"unknown verdict {c.verdict!r}")


def _centred(layout: Layout, factor: int, level: int) -> FloatArray:
    """Indicator of ``factor == level`` per cell minus 1/(number of levels of factor)."""
    hit = np.array([cell[factor] == level for cell in layout.cells], dtype=float)
    return hit - 1.0 / len(layout.levels[factor])


def _cell_means(layout: Layout, effects: Mapping[EffectSpec, float]) -> FloatArray:
    """Log mean per cell: sum of effect x product of centred level indicators (x where mask).

    Centring makes each given value exactly that spec's contrast in a complete factorial
    (a main term adds nothing to interactions, an interaction term nothing to main effects).
    """
    mu = np.zeros(len(layout.cells))
    for spec, size in effects.items():
        _check_spec(layout, spec)
        term = _centred(layout, spec.factor, spec.level)
        if spec.kind == "interaction":
            assert spec.by is not None and spec.by_level is not None
            term = term * _centred(layout, spec.by, spec.by_level)
        mask = np.array([all(cell[f] == v for f, v in spec.where) for cell in layout.cells])
        mu += float(size) * term * mask
    return mu


def _check_spec(layout: Layout, spec: EffectSpec) -> None:
    _check_factor_level(layout, spec.factor, spec.level)
    used: tuple[int, ...] = (spec.factor,)
    if spec.kind == "interaction":
        assert spec.by is not None and spec.by_level is not None
        _check_factor_level(layout, spec.by, spec.by_level)
        if spec.by == spec.factor:
            raise StatsInputError("an interaction needs two different factors")
        used = (spec.factor, spec.by)
    _check_where(layout, spec.where, used)


def design_power(
    layout: Layout,
    *,
    effects: Mapping[EffectSpec, float],
    sigma: float,
    n_blocks: int,
    alpha: float = 0.05,
    n_sim: int = 400,
    seed: int = 1,
) -> dict[EffectSpec, float]:
    """Monte-Carlo power of every claim of :func:`effect_specs` (adjusted all together).

    Simulated log values: per-cell means built additively from ``effects`` (true log-scale
    effects per spec, every other effect 0; products of centred level indicators, so in a
    complete factorial each given value is exactly its spec's true contrast), plus a shared
    N(0, 0.02) block effect and N(0, sigma) per-trial noise. Each spec's per-block contrasts
    are analysed as in :func:`judge` (vectorised with paired.analyse), p-values adjusted
    per simulated experiment as the report adjusts them (multiple.exclusive). Returns, per spec, the share of experiments whose adjusted
    verdict is a difference in the direction of the spec's true contrast (computed from the
    cell means); for a spec whose true contrast is 0, the share of (false) differences in
    either direction. Fewer than ``paired.MIN_UNITS`` blocks give 0.
    """
    if not 0.0 < alpha < 0.5:
        raise StatsInputError(f"alpha must lie in (0, 0.5), got {alpha}")
    if not (sigma >= 0.0 and math.isfinite(sigma)):
        raise StatsInputError(f"sigma must be finite and non-negative, got {sigma}")
    if n_blocks < 1 or n_sim < 1:
        raise StatsInputError("n_blocks and n_sim must be positive")
    specs = effect_specs(layout)
    mu = _cell_means(layout, effects)
    true = np.array([contrasts(mu[None, :], layout, s)[0] for s in specs])
    true = np.where(np.abs(true) < 1e-12, 0.0, true)
    if not specs:
        return {}
    if n_blocks < paired.MIN_UNITS:
        return dict.fromkeys(specs, 0.0)
    rng = np.random.default_rng(seed)
    shape = (n_sim, n_blocks, len(layout.cells))
    logy = mu + rng.normal(0.0, BLOCK_SD, (n_sim, n_blocks, 1)) + rng.normal(0.0, sigma, shape)
    p = np.empty((n_sim, len(specs)))
    tost = np.empty((n_sim, len(specs)))
    hl = np.empty((n_sim, len(specs)))
    for j, spec in enumerate(specs):
        r = paired.analyse(contrasts(logy, layout, spec), alpha=alpha, margin=_POWER_MARGIN)
        p[:, j], tost[:, j], hl[:, j] = r["p"], r["tost_p"], r["hl"]
    diff = multiple.exclusive(p, tost)[0] < alpha  # as the report adjusts them
    right = np.where(true == 0.0, hl != 0.0, np.sign(hl) == np.sign(true))
    power = np.mean(diff & right, axis=0)
    return {s: float(power[j]) for j, s in enumerate(specs)}
