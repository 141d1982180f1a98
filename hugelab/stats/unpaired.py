"""Unpaired comparison of two samples of one arm (two runs made at different times): the
Hodges-Lehmann two-sample shift of log values with its distribution-free (Moses) interval, and
the Mann-Whitney test.

Much weaker than a paired comparison: its interval sees only the trial-to-trial noise inside
each sample, not what changed between the runs (drift, reboots, updates, other load).

- Estimate: the median of the m*n differences log(b_j) - log(a_i), reported as
  ``100*(exp(hl)-1)`` percent of B against A.
- Interval: the k-th smallest and k-th largest of those differences, k from the exact null
  distribution of the Mann-Whitney U (no ties) when m*n <= EXACT_MAX, else from its normal
  approximation; k = 0 (too few values for that confidence) leaves it unbounded.
- Test: two-sided Mann-Whitney p (scipy.stats.mannwhitneyu).
- Verdict: p < alpha and a non-zero shift -> "B faster" / "B slower" (with ``better``), or
  "B higher" / "B lower" without it; else "inconclusive".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

EXACT_MAX = 2500  # m*n up to which the interval's rank comes from the exact distribution of U


def u_null_cdf(m: int, n: int) -> NDArray[np.float64]:
    """Exact CDF of the Mann-Whitney U statistic (no ties) for samples of m and n: P(U <= u)."""
    prev = [np.ones(1) for _ in range(n + 1)]  # i = 0: U is 0
    for i in range(1, m + 1):
        cur = [np.ones(1)]
        for j in range(1, n + 1):
            p = np.zeros(i * j + 1)
            p[j:j + prev[j].size] += i / (i + j) * prev[j]
            p[:cur[j - 1].size] += j / (i + j) * cur[j - 1]
            cur.append(p)
        prev = cur
    return np.asarray(np.cumsum(prev[n]), dtype=np.float64)


def interval_rank(m: int, n: int, alpha: float) -> tuple[int, str]:
    """Rank k of the lower interval end among the m*n sorted differences (0: unbounded), and
    how it was found ("exact" or "normal")."""
    if m * n <= EXACT_MAX:
        cdf = u_null_cdf(m, n)
        ok = np.nonzero(cdf <= alpha / 2 + 1e-12)[0]
        return (int(ok[-1]) + 1 if ok.size else 0), "exact"
    z = float(stats.norm.isf(alpha / 2))
    sd = math.sqrt(m * n * (m + n + 1) / 12.0)
    return max(0, math.floor(m * n / 2.0 - z * sd - 0.5) + 1), "normal"


def two_sample_shift(a: ArrayLike, b: ArrayLike, alpha: float) -> dict[str, Any]:
    """Hodges-Lehmann shift of log(b) - log(a) with its Moses interval; Mann-Whitney p."""
    la = np.log(np.asarray(a, dtype=float))
    lb = np.log(np.asarray(b, dtype=float))
    diffs = np.sort((lb[None, :] - la[:, None]).ravel())
    hl = float(np.median(diffs))
    k, method = interval_rank(la.size, lb.size, alpha)
    if k == 0:
        lo, hi = -math.inf, math.inf
    else:
        lo, hi = float(diffs[k - 1]), float(diffs[diffs.size - k])
    p = float(stats.mannwhitneyu(lb, la, alternative="two-sided").pvalue)
    return {"hl": hl, "lo": lo, "hi": hi, "method": method, "p": p}


@dataclass(frozen=True)
class Unpaired:
    """One arm of run B against the same arm of run A (percent: B relative to A)."""

    arm: str
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    unit: str | None
    better: str | None
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    ci_method: str
    confidence: float
    p_value: float
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


def _verdict(p: float, hl: float, alpha: float, better: str | None) -> str:
    if not p < alpha or hl == 0:
        return "inconclusive"
    if better not in ("lower", "higher"):
        return "B higher" if hl > 0 else "B lower"
    b_better = (hl > 0) == (better == "higher")
    return "B faster" if b_better else "B slower"


def compare_unpaired(arm: str, a: list[float], b: list[float], *, confidence: float,
                     unit: str | None, better: str | None) -> Unpaired:
    """Unpaired comparison of run B's values of one arm against run A's (percent: B vs A)."""
    alpha = 1.0 - confidence
    r = two_sample_shift(a, b, alpha)
    def pct(x: float) -> float:  # an unbounded interval end stays unbounded (nan -> None)
        return 100.0 * math.expm1(x) if math.isfinite(x) else math.nan

    return Unpaired(arm, len(a), len(b), float(np.median(a)), float(np.median(b)), unit, better,
                    pct(r["hl"]), pct(r["lo"]), pct(r["hi"]), r["method"], confidence, r["p"],
                    _verdict(r["p"], r["hl"], alpha, better))
