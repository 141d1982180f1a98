"""Step-down correction across the comparisons of one report: Holm's, counting what can be
true together (Shaffer's method S1).

Every comparison makes two claims: a difference (null: no effect) and an equivalence (null:
an effect at least the margin). The two nulls of one comparison cannot both be true, so the
family is both claims of every comparison, and at each step of Holm's step-down the
multiplier is the most nulls that can still be true together: the number of comparisons with
a claim left, not the number of claims (Shaffer, JASA 1986). Adjusting the two kinds as two
separate Holm families instead lets one comparison's false difference and another's false
equivalence each use all of alpha: 0.084 family-wise at alpha 0.05 for one arm with no effect
beside one at the margin, 30 blocks of 1.5% noise (this: 0.044; tests/test_stats_exclusive.py). Each Comparison's verdict is then
re-derived from its adjusted p-values.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from hugelab.stats._util import FloatArray, StatsInputError, as_1d
from hugelab.stats.paired import Better, Comparison, compare


def holm(pvalues: ArrayLike) -> FloatArray:
    """Holm-adjusted p-values (monotone, capped at 1), in the input order.

    NaN p-values stay NaN but still count towards the number of tests (conservative).
    """
    p = as_1d(pvalues, "pvalues")
    if np.any((p < 0) | (p > 1)):
        raise StatsInputError("p-values must lie in [0, 1]")
    m = p.size
    if m == 0:
        return p.copy()
    filled = np.where(np.isnan(p), 1.0, p)
    order = np.argsort(filled, kind="stable")
    scaled = (m - np.arange(m)) * filled[order]
    adjusted_sorted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    out = np.empty(m)
    out[order] = adjusted_sorted
    out[np.isnan(p)] = np.nan
    return out


def exclusive(pvalues: ArrayLike, tost: ArrayLike,
              claims_equivalence: ArrayLike | None = None) -> tuple[FloatArray, FloatArray]:
    """Adjusted difference and equivalence p-values of k comparisons (the last axis; any
    leading axes are independent families, as simulations need): one step-down over all
    claims, each step's multiplier the number of comparisons with a claim at or after it.
    NaN stays NaN and counts (a claim that could be true), as in `holm`.

    `claims_equivalence` (booleans, one per comparison; all True when None): a comparison
    marked False makes a difference claim only (a figure without a margin); its `tost` entry
    is ignored, comes back NaN, and it counts only while its difference is left."""
    p, t = np.asarray(pvalues, dtype=float), np.asarray(tost, dtype=float)
    if p.shape != t.shape:
        raise StatsInputError("one equivalence p-value per difference p-value")
    try:
        has_t = np.ones(p.shape, dtype=bool) if claims_equivalence is None else \
            np.broadcast_to(np.asarray(claims_equivalence, dtype=bool), p.shape)
    except ValueError as exc:
        raise StatsInputError("one equivalence flag per comparison") from exc
    both = np.concatenate([p, np.where(has_t, t, 0.5)], axis=-1)
    if np.any((both < 0) | (both > 1)):
        raise StatsInputError("p-values must lie in [0, 1]")
    k = p.shape[-1]
    if k == 0:
        return p.copy(), t.copy()
    filled = np.where(np.isnan(both), 1.0, both)
    real = np.concatenate([np.ones(p.shape, dtype=bool), has_t], axis=-1)
    filled = np.where(real, filled, 2.0)  # no claim: after every real one, never counted
    order = np.argsort(filled, axis=-1, kind="stable")
    place = np.empty_like(order)
    np.put_along_axis(place, order, np.broadcast_to(np.arange(2 * k), order.shape), axis=-1)
    last = np.where(has_t, np.maximum(place[..., :k], place[..., k:]),
                    place[..., :k])  # each comparison's last real claim's step
    left = (last[..., :, None] >= np.arange(2 * k)).sum(axis=-2)  # comparisons left, by step
    scaled = left * np.take_along_axis(filled, order, axis=-1)
    adj_sorted = np.minimum(np.maximum.accumulate(scaled, axis=-1), 1.0)
    out = np.empty_like(adj_sorted)
    np.put_along_axis(out, order, adj_sorted, axis=-1)
    out[np.isnan(both) | ~real] = np.nan
    return out[..., :k], out[..., k:]


def undecided_by_adjustment(p: float | None, p_adjusted: float | None, alpha: float,
                            low: float | None, high: float | None) -> bool:
    """Whether a claim's own test decides at `alpha` and its adjusted p does not, while its
    own interval [low, high] excludes zero: the report then says the adjustment did it."""
    return p is not None and p_adjusted is not None and p < alpha <= p_adjusted and \
        low is not None and high is not None and (low > 0 or high < 0)


def adjust(comparisons: Mapping[str, Comparison]) -> dict[str, Comparison]:
    """Adjust a set of comparisons' claims together (`exclusive`) and re-derive verdicts."""
    names = list(comparisons)
    p, t = exclusive([comparisons[k].p_value for k in names],
                     [comparisons[k].tost_p for k in names])
    return {k: comparisons[k].with_adjusted(float(p[i]), float(t[i])) for i, k in enumerate(names)}


def compare_many(
    pairs: Mapping[str, tuple[ArrayLike, ArrayLike]],
    *,
    better: Better = "lower",
    alpha: float = 0.05,
    margin: float = 0.01,
    blocks: ArrayLike | None = None,
) -> dict[str, Comparison]:
    """Compare each (baseline, candidate) pair under one family-wise alpha (`exclusive`).

    ``pairs`` maps a comparison name to its paired (baseline, candidate) observations;
    ``blocks`` (if given) labels the pairs of every comparison alike.
    """
    results = {
        name: compare(b, c, better=better, alpha=alpha, margin=margin, blocks=blocks)
        for name, (b, c) in pairs.items()
    }
    return adjust(results)
