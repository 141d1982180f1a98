"""Wilcoxon signed-rank machinery, vectorised over rows: Walsh averages, Hodges-Lehmann, intervals.

Every function takes a 2-D array ``d`` of shape (experiments, pairs) so simulations run many
experiments at once; a single experiment is a 1-row array. Rows must hold no NaNs.

Choices (documented for the report):
- p-values come from :func:`scipy.stats.wilcoxon` (zeros dropped, no continuity correction;
  exact null distribution for n <= 50 without ties or zeros, normal approximation otherwise).
- The confidence interval for the shift is the set of shifts the same test does not reject:
  ``[W_(k), W_(M+1-k)]`` over the M = n(n+1)/2 sorted Walsh averages, with k from the exact
  null distribution for n <= 50 and from the normal approximation above (the exact dual of
  scipy's test when there are no ties).
- Order statistics of Walsh averages are found by partitioning the materialised averages while
  a row has at most ``MATERIALISE_MAX`` pairs (O(n^2) memory); above that, by exact selection:
  bisection on the value with an O(n log n) count of averages below it, then snapping to the
  largest Walsh average not above the bound. No subsampling, so results are exact.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import stats

from hugelab.stats._util import FloatArray

EXACT_MAX_N = 50
MATERIALISE_MAX = 2000
_CHUNK_ELEMENTS = 4_000_000


@lru_cache(maxsize=128)
def exact_cdf(n: int) -> FloatArray:
    """P(T+ <= t) for t = 0..n(n+1)/2 under H0, by the counting recursion (exact up to float)."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    top = 0
    for k in range(1, n + 1):
        counts[k : top + k + 1] += counts[: top + 1].copy()
        top += k
    cdf = np.cumsum(counts) / 2.0**n
    cdf.setflags(write=False)
    return cdf


def interval_rank(n: int, alpha: float) -> tuple[int, str]:
    """Rank k (1-based) so that [W_(k), W_(M+1-k)] is the 1-alpha interval; 0 = unbounded."""
    if n < 1:
        return 0, "none"
    m = n * (n + 1) // 2
    if n <= EXACT_MAX_N:
        cdf = exact_cdf(n)
        # largest k with P(T <= k-1) <= alpha/2
        k = int(np.searchsorted(cdf, alpha / 2.0, side="right"))
        return min(k, (m + 1) // 2), "exact"
    z = float(stats.norm.isf(alpha / 2.0))
    sd = np.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    k = int(np.ceil(m / 2.0 - z * sd))
    return max(0, min(k, (m + 1) // 2)), "normal"


def _walsh_partition(d: FloatArray, ranks: np.ndarray) -> FloatArray:
    n = d.shape[1]
    iu, ju = np.triu_indices(n)
    m = iu.size
    out = np.empty((d.shape[0], ranks.size))
    rows = max(1, _CHUNK_ELEMENTS // max(m, 1))
    kth = np.unique(ranks - 1)
    for start in range(0, d.shape[0], rows):
        block = d[start : start + rows]
        w = (block[:, iu] + block[:, ju]) * 0.5
        w.partition(kth, axis=1)
        out[start : start + rows] = w[:, ranks - 1]
    return out


def _count_at_most(xs: FloatArray, t: float) -> int:
    """Number of Walsh averages (x_i + x_j)/2, i <= j, that are <= t (xs sorted)."""
    idx = np.arange(xs.size)
    j = np.searchsorted(xs, 2.0 * t - xs, side="right")
    return int(np.clip(j - idx, 0, None).sum())


def _select_walsh(xs: FloatArray, rank: int) -> float:
    """Exact rank-th smallest Walsh average of sorted xs without materialising them."""
    lo, hi = float(xs[0]), float(xs[-1])
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if _count_at_most(xs, mid) >= rank:
            hi = mid
        else:
            lo = mid
    idx = np.arange(xs.size)
    j = np.searchsorted(xs, 2.0 * hi - xs, side="right") - 1
    ok = j >= idx
    return float(np.max((xs[ok] + xs[j[ok]]) * 0.5))


def walsh_order_stats(d: FloatArray, ranks: np.ndarray) -> FloatArray:
    """Order statistics (1-based ``ranks``) of each row's Walsh averages; shape (rows, ranks)."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    ranks = np.asarray(ranks, dtype=np.int64)
    if d.shape[1] <= MATERIALISE_MAX:
        return _walsh_partition(d, ranks)
    out = np.empty((d.shape[0], ranks.size))
    for r, row in enumerate(d):
        xs = np.sort(row)
        out[r] = [_select_walsh(xs, int(k)) for k in ranks]
    return out


def hodges_lehmann(d: FloatArray) -> FloatArray:
    """Median of Walsh averages for each row (the Hodges-Lehmann shift estimate)."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    m = d.shape[1] * (d.shape[1] + 1) // 2
    if m % 2:
        return walsh_order_stats(d, np.array([(m + 1) // 2]))[:, 0]
    both = walsh_order_stats(d, np.array([m // 2, m // 2 + 1]))
    return both.mean(axis=1)


def hl_and_interval(d: FloatArray, alpha: float) -> tuple[FloatArray, FloatArray, FloatArray, str]:
    """Hodges-Lehmann estimate and the signed-rank 1-alpha interval for each row."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    n = d.shape[1]
    m = n * (n + 1) // 2
    k, method = interval_rank(n, alpha)
    mids = [(m + 1) // 2] if m % 2 else [m // 2, m // 2 + 1]
    ranks = list(mids)
    if k >= 1:
        ranks += [k, m + 1 - k]
    stats_ = walsh_order_stats(d, np.array(ranks))
    hl = stats_[:, : len(mids)].mean(axis=1)
    if k >= 1:
        lo, hi = stats_[:, len(mids)], stats_[:, len(mids) + 1]
    else:
        lo = np.full(d.shape[0], -np.inf)
        hi = np.full(d.shape[0], np.inf)
    return hl, lo, hi, method


def pvalue(d: FloatArray, alternative: str = "two-sided") -> FloatArray:
    """Signed-rank p-value per row from scipy.stats.wilcoxon; rows of all zeros give p = 1."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    out = np.ones(d.shape[0])
    live = np.any(d != 0, axis=1)
    if np.any(live):
        with np.errstate(invalid="ignore", divide="ignore"):
            res = stats.wilcoxon(d[live], axis=1, alternative=alternative)
        out[live] = np.asarray(res.pvalue, dtype=float)
    return out


def z_statistic(d: FloatArray) -> FloatArray:
    """Normal-approximation signed-rank z per row (zeros dropped, tie-corrected); 0 if no data.

    Positive z means the differences lean positive. Computed by scipy.stats.wilcoxon
    (method="asymptotic", no continuity correction).
    """
    d = np.atleast_2d(np.asarray(d, dtype=float))
    out = np.zeros(d.shape[0])
    live = np.any(d != 0, axis=1)
    if np.any(live):
        with np.errstate(invalid="ignore", divide="ignore"):
            res = stats.wilcoxon(d[live], axis=1, alternative="greater", method="asymptotic")
        out[live] = np.nan_to_num(np.asarray(res.zstatistic, dtype=float))
    return out
