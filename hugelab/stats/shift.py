"""Paired shift on the original scale: for quantities that can be zero (counts of compaction
stalls, a share of THP faults that fell back, CPU seconds of khugepaged, pool pages held
unused), where a log-ratio is undefined.

Pair i holds the baseline's and the candidate's value from the same block; d_i = candidate_i -
baseline_i. The estimate is the Hodges-Lehmann shift of d with the signed-rank 1-alpha
interval (`signedrank`), the test the two-sided Wilcoxon signed-rank p (all-zero differences:
p = 1, no difference to see). Fewer than `MIN_UNITS` pairs: an estimate without an interval.
Holm across a family is the caller's (`multiple.holm` on `p_value`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from hugelab.stats import signedrank
from hugelab.stats._util import StatsInputError
from hugelab.stats.paired import MIN_UNITS


@dataclass(frozen=True)
class Shift:
    """A paired shift in the values' own unit (candidate - baseline)."""

    n: int
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None


def compare_shift(baseline: ArrayLike, candidate: ArrayLike, *, alpha: float = 0.05) -> Shift:
    """The paired shift of `candidate` against `baseline` (complete pairs only)."""
    b = np.asarray(baseline, dtype=float).ravel()
    c = np.asarray(candidate, dtype=float).ravel()
    if b.shape != c.shape:
        raise StatsInputError(f"baseline and candidate differ in length: {b.size} vs {c.size}")
    d = (c - b)[np.isfinite(b) & np.isfinite(c)]
    n = int(d.size)
    if n == 0:
        return Shift(0, None, None, None, None)
    if not np.any(d):
        return Shift(n, 0.0, 0.0 if n >= MIN_UNITS else None,
                     0.0 if n >= MIN_UNITS else None, 1.0)
    hl, lo, hi, _method = signedrank.hl_and_interval(d[None, :], alpha)
    p = float(signedrank.pvalue(d[None, :])[0])
    if n < MIN_UNITS or not (np.isfinite(lo[0]) and np.isfinite(hi[0])):
        return Shift(n, float(hl[0]), None, None, p)
    return Shift(n, float(hl[0]), float(lo[0]), float(hi[0]), p)
