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
  a row has at most ``MATERIALISE_MAX`` pairs (O(n^2) memory); above that, by exact
  sample-and-bracket selection (:func:`select_walsh`): thresholds come from a uniform sample of
  the averages in the current bracket, exact O(n log n) counts decide which bracket holds each
  rank, and a bracket of at most ``SELECT_MATERIALISE`` averages is partitioned. All ranks a
  call needs (median, every interval) are selected together. The sample only steers the
  search, so results are exact (equal to sorting every average computed as (x_i + x_j) / 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

from hugelab.stats import signflip
from hugelab.stats._util import FloatArray

EXACT_MAX_N = 50
MATERIALISE_MAX = 2000
_CHUNK_ELEMENTS = 4_000_000
SELECT_MATERIALISE = 1_000_000
SAMPLE_SIZE = 1 << 18
SAMPLE_SD = 4.0


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


def min_pairs(alpha: float) -> int:
    """The fewest pairs whose signed-rank distribution allows a 1-alpha interval: the smallest
    n with :func:`interval_rank` >= 1 (exact: 2 / 2^n <= alpha; 6 at 0.05, 15 at 0.0001)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    n = 1
    while interval_rank(n, alpha)[0] < 1:
        n += 1
    return n


def min_pairs_one_sided(alpha: float) -> int:
    """The fewest pairs whose signed-rank test can reject one-sided at `alpha`: the smallest n
    with 1 / 2^n <= alpha (an equivalence's two one-sided tests; one fewer than min_pairs:
    5 at 0.05, 7 at 0.01, 14 at 0.0001)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    n = 1
    while 0.5 ** n > alpha:
        n += 1
    return n


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


class _Walsh:
    """Walsh averages w_ij = (xs[i] + xs[j]) * 0.5 of ascending ``xs``, never materialised.

    For a threshold t, ``prefix(t)[i]`` is the number of j (any j) with w_ij <= t: a prefix,
    because w_ij is non-decreasing in j (rounded addition is monotone). It starts from a
    searchsorted on ascending keys and is then corrected against the rounded sums themselves,
    so counts agree exactly with averages computed as ``(x_i + x_j) / 2``.
    """

    def __init__(self, xs: FloatArray) -> None:
        self.xs = xs
        self.n = xs.size
        self.idx = np.arange(self.n)
        self.total = self.n * (self.n + 1) // 2

    def prefix(self, t: float) -> np.ndarray:
        xs, n = self.xs, self.n
        if t == np.inf:
            return np.full(n, n, dtype=np.int64)
        if t == -np.inf:
            return np.zeros(n, dtype=np.int64)
        j = np.searchsorted(xs, 2.0 * t - xs[::-1], side="right")[::-1].astype(np.int64)
        for _ in range(n + 1):  # a few rounds at most: each step skips a run of tied values
            down = (j > 0) & ((xs + xs[np.maximum(j - 1, 0)]) * 0.5 > t)
            up = (j < n) & ((xs + xs[np.minimum(j, n - 1)]) * 0.5 <= t)
            if not (down.any() or up.any()):
                break
            j[down] = np.searchsorted(xs, xs[j[down] - 1], side="left")
            j[up] = np.searchsorted(xs, xs[j[up]], side="right")
        return j

    def count(self, prefix: np.ndarray) -> int:
        """Walsh averages (i <= j) inside a prefix array."""
        return int(np.maximum(prefix - self.idx, 0).sum())

    def _spans(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = np.maximum(lo, self.idx)
        return start, np.maximum(hi, self.idx) - start

    def between(self, lo: np.ndarray, hi: np.ndarray) -> FloatArray:
        """Every Walsh average w with lo-threshold < w <= hi-threshold (given their prefixes)."""
        start, size = self._spans(lo, hi)
        rows = np.repeat(self.idx, size)
        first = np.cumsum(size) - size
        cols = np.arange(rows.size) - np.repeat(first - start, size)
        out: FloatArray = (self.xs[rows] + self.xs[cols]) * 0.5
        return out

    def sample(self, lo: np.ndarray, hi: np.ndarray, k: int, rng: np.random.Generator) -> FloatArray:
        """k draws (with replacement), uniform over the Walsh averages between two prefixes."""
        start, size = self._spans(lo, hi)
        ends = np.cumsum(size)
        flat = np.sort(rng.integers(0, int(ends[-1]), size=k))  # sorted keys search faster
        rows = np.searchsorted(ends, flat, side="right")
        cols = start[rows] + flat - (ends[rows] - size[rows])
        out: FloatArray = (self.xs[rows] + self.xs[cols]) * 0.5
        return out


@dataclass
class _Bound:
    value: float
    prefix: np.ndarray
    count: int


def _probes(sample: FloatArray, fractions: FloatArray, top: float) -> FloatArray:
    """Sample order statistics a few standard errors either side of each target fraction.

    ``sample`` is sorted. A probe value that is tied in the sample, or that equals the
    bracket's top, also brings the next float below it, so that a rank inside a run of tied
    averages is pinned by count(< v) < rank <= count(<= v) and every round makes progress.
    """
    k = sample.size
    sd = np.sqrt(k * fractions * (1.0 - fractions)) + 1.0
    pos = fractions * k
    idx = np.concatenate([np.floor(pos - SAMPLE_SD * sd), np.ceil(pos + SAMPLE_SD * sd)])
    vals = sample[np.unique(np.clip(idx, 0, k - 1).astype(np.int64))]
    tied = np.searchsorted(sample, vals, side="right") - np.searchsorted(sample, vals) > 1
    below = np.nextafter(vals[tied | (vals >= top)], -np.inf)
    return np.unique(np.concatenate([vals, below]))


def _select(w: _Walsh, lo: _Bound, hi: _Bound, ranks: np.ndarray, out: dict[int, float],
            rng: np.random.Generator) -> None:
    """Fill ``out[r]`` for ranks with lo.count < r <= hi.count (all Walsh averages in (lo, hi])."""
    size = hi.count - lo.count
    if hi.value < np.inf and lo.value == np.nextafter(hi.value, -np.inf):
        out.update(dict.fromkeys(ranks.tolist(), hi.value))  # one tied value fills the bracket
        return
    if size <= SELECT_MATERIALISE:
        vals = w.between(lo.prefix, hi.prefix)
        kth = ranks - lo.count - 1
        vals.partition(kth)
        out.update(zip(ranks.tolist(), vals[kth].tolist(), strict=True))
        return
    sample = w.sample(lo.prefix, hi.prefix, min(SAMPLE_SIZE, size), rng)
    sample.sort()
    bounds = [lo]
    for t in _probes(sample, (ranks - lo.count) / size, hi.value):
        if lo.value < t < hi.value:
            p = w.prefix(float(t))
            bounds.append(_Bound(float(t), p, w.count(p)))
    bounds.append(hi)
    counts = np.array([b.count for b in bounds])
    slot = np.searchsorted(counts, ranks, side="left")  # first bound holding the rank
    for s in np.unique(slot):
        _select(w, bounds[s - 1], bounds[s], ranks[slot == s], out, rng)


def select_walsh(xs: FloatArray, ranks: np.ndarray, seed: int = 0) -> FloatArray:
    """Exact order statistics (1-based ``ranks``) of the Walsh averages of ascending ``xs``.

    Sample-and-bracket selection: draw Walsh averages uniformly from the current bracket,
    take sample order statistics a few standard errors either side of each wanted rank as
    new thresholds, count exactly (O(n log n)) how many averages lie at or below each, and
    recurse into the bracket that holds the rank; a bracket of at most ``SELECT_MATERIALISE``
    averages is materialised and partitioned. Counts decide every step, so the result is
    exact whatever the sample (the seed changes only the time taken).
    """
    ranks = np.asarray(ranks, dtype=np.int64)
    w = _Walsh(np.asarray(xs, dtype=float))
    if ranks.size and (ranks.min() < 1 or ranks.max() > w.total):
        raise ValueError(f"ranks must lie in 1..{w.total}")
    lo = _Bound(-np.inf, w.prefix(-np.inf), 0)
    hi = _Bound(np.inf, w.prefix(np.inf), w.total)
    out: dict[int, float] = {}
    uniq = np.unique(ranks)
    if uniq.size:
        _select(w, lo, hi, uniq, out, np.random.default_rng(seed))
    return np.array([out[int(r)] for r in ranks], dtype=float)


def walsh_order_stats(d: FloatArray, ranks: np.ndarray) -> FloatArray:
    """Order statistics (1-based ``ranks``) of each row's Walsh averages; shape (rows, ranks)."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    ranks = np.asarray(ranks, dtype=np.int64)
    if d.shape[1] <= MATERIALISE_MAX:
        return _walsh_partition(d, ranks)
    out = np.empty((d.shape[0], ranks.size))
    for r, row in enumerate(d):
        out[r] = select_walsh(np.sort(row), ranks)
    return out


def hodges_lehmann(d: FloatArray) -> FloatArray:
    """Median of Walsh averages for each row (the Hodges-Lehmann shift estimate)."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    m = d.shape[1] * (d.shape[1] + 1) // 2
    if m % 2:
        return walsh_order_stats(d, np.array([(m + 1) // 2]))[:, 0]
    both = walsh_order_stats(d, np.array([m // 2, m // 2 + 1]))
    return both.mean(axis=1)


def hl_and_intervals(
    d: FloatArray, alphas: tuple[float, ...]
) -> tuple[FloatArray, list[tuple[FloatArray, FloatArray]], str]:
    """Hodges-Lehmann estimate and the signed-rank 1-alpha interval for each alpha, per row.

    Every order statistic needed (the median and each interval's two ranks) is selected in
    one pass over each row, so the intervals share the row's sort and selection work.
    """
    d = np.atleast_2d(np.asarray(d, dtype=float))
    n = d.shape[1]
    m = n * (n + 1) // 2
    mids = [(m + 1) // 2] if m % 2 else [m // 2, m // 2 + 1]
    found = [interval_rank(n, a) for a in alphas]
    wanted = mids + [r for k, _ in found if k >= 1 for r in (k, m + 1 - k)]
    uniq, where = np.unique(np.array(wanted, dtype=np.int64), return_inverse=True)
    picked = walsh_order_stats(d, uniq)[:, where]
    hl = picked[:, : len(mids)].mean(axis=1)
    intervals = []
    col = len(mids)
    for k, _ in found:
        if k >= 1:
            intervals.append((picked[:, col], picked[:, col + 1]))
            col += 2
        else:
            intervals.append((np.full(d.shape[0], -np.inf), np.full(d.shape[0], np.inf)))
    method = found[0][1] if found else "none"
    return hl, intervals, method


def hl_and_interval(d: FloatArray, alpha: float) -> tuple[FloatArray, FloatArray, FloatArray, str]:
    """Hodges-Lehmann estimate and the signed-rank 1-alpha interval for each row."""
    hl, ((lo, hi),), method = hl_and_intervals(d, (alpha,))
    return hl, lo, hi, method


def pvalue(d: FloatArray, alternative: str = "two-sided") -> FloatArray:
    """Signed-rank p-value per row, scipy.stats.wilcoxon's; rows of all zeros give p = 1.
    Where scipy would run its permutation test (n <= 13 with ties or zeros) the same test is
    computed by hugelab.stats.signflip, the same numbers a thousand times faster."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    out = np.ones(d.shape[0])
    live = np.any(d != 0, axis=1)
    if np.any(live):
        if signflip.applies(d[live]):
            out[live] = signflip.pvalue(d[live], alternative)
            return out
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
