"""Holm step-down correction across the comparisons of one report.

The difference p-values and the equivalence (TOST) p-values are adjusted as two separate
families; each Comparison's verdict is then re-derived from its adjusted p-values.
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


def adjust(comparisons: Mapping[str, Comparison]) -> dict[str, Comparison]:
    """Apply Holm to a set of comparisons and re-derive their verdicts."""
    names = list(comparisons)
    p = holm([comparisons[k].p_value for k in names])
    t = holm([comparisons[k].tost_p for k in names])
    return {k: comparisons[k].with_adjusted(float(p[i]), float(t[i])) for i, k in enumerate(names)}


def compare_many(
    pairs: Mapping[str, tuple[ArrayLike, ArrayLike]],
    *,
    better: Better = "lower",
    alpha: float = 0.05,
    margin: float = 0.01,
    blocks: ArrayLike | None = None,
) -> dict[str, Comparison]:
    """Compare each (baseline, candidate) pair under one family-wise alpha (Holm).

    ``pairs`` maps a comparison name to its paired (baseline, candidate) observations;
    ``blocks`` (if given) labels the pairs of every comparison alike.
    """
    results = {
        name: compare(b, c, better=better, alpha=alpha, margin=margin, blocks=blocks)
        for name, (b, c) in pairs.items()
    }
    return adjust(results)
