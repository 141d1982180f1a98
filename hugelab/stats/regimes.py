"""Do one run's per-block effects fall into two regimes?

On a shared VM the effect of a backing can switch between regimes over minutes (issue 20: the
4 KiB arm at ~165 or at ~210 ns per load, an effect of about -13% or about -22%). A run that
saw both has one interval over a mixture; a run that saw one regime describes that regime only.
Either way the report must say so rather than present one interval as the machine's.

Test: sort the per-block effects and take the split into a low and a high group, each holding
at least ``MIN_SHARE`` of the blocks, with the least within-group sum of squares W (the
two-means split); the statistic is its separation, the gap between the two groups' means in
units of the pooled within-group SD sqrt(W / n). It does not depend on the effects' location or
scale, so its null distribution for n Gaussian blocks is one simulation per n (``NULL_SIMS``
draws, cached; above ``NULL_MAX_N`` blocks the null of ``NULL_MAX_N`` is used, which is wider
and so conservative). The p-value is the share of null draws at or above the observed
separation. The minimum share keeps a few outliers (a stall) from counting as a regime: heavy
tails are the tails' business (hugelab.stats.tails). Two regimes also need a separation of at
least ``MIN_SEPARATION`` (3.5): with thousands of blocks any unimodal shape other than the
Gaussian beats the Gaussian null (at 5,000 blocks the best split of exponential blocks lies
3.35 within-SDs apart, uniform 3.48, gamma(2) 3.06, lognormal(0.5) 2.89, all p < 0.001), while
regimes 4 and 5 SDs apart give 4.2 and 5.1; a mixture 3 SDs apart (3.4) is not told from a
skewed spread and is not flagged. The separation had more power than the
split's R^2 against uneven regimes (30% / 70% of 30 blocks 5 SDs apart: 0.93 vs 0.85 at
alpha 0.01) and about as much against even ones.

Measured in tests/test_stats_regimes.py (2,000 null runs each): false positives 0.045 /
0.054 / 0.049 at alpha 0.05 and 0.005 / 0.012 / 0.009 at 0.01 for 10 / 30 / 200 Gaussian
blocks; 0.006 at 0.01 under t3 blocks (30; heavy tails inflate the within-group SD, so the
test is conservative there); power at alpha 0.01 (1,000 runs): 0.83 for two equal regimes 5
within-SDs apart over 20 blocks, 0.94 for 30% / 70% over 30 blocks, 0.99 for 30% / 70% 4 SDs
apart over 100 blocks. Ten blocks are the minimum, and have little power.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from hugelab.stats._util import FloatArray, StatsInputError, jsonable
from hugelab.stats.paired import pct

MIN_SHARE = 0.2  # each regime holds at least this share of the blocks
MIN_SEPARATION = 3.5  # and the regimes' means lie this many within-group SDs apart
MIN_BLOCKS = 10  # fewer blocks cannot show two groups of >= 20% against noise
NULL_SIMS = 4000
NULL_MAX_N = 2000
NULL_SEED = 20


def split_r2(x: ArrayLike, min_share: float = MIN_SHARE) -> tuple[FloatArray, np.ndarray]:
    """Per row: the largest R^2 of a two-group split of the sorted values with both groups
    holding >= min_share of them, and the size of the low group at that split."""
    s = np.sort(np.atleast_2d(np.asarray(x, dtype=float)), axis=1)
    n = s.shape[1]
    lo_k = max(1, int(np.ceil(min_share * n)))
    ks = np.arange(lo_k, n - lo_k + 1)
    if ks.size == 0:
        raise StatsInputError(f"{n} values cannot split into two groups of {min_share:.0%}")
    s = s - s.mean(axis=1, keepdims=True)
    c1, c2 = np.cumsum(s, axis=1), np.cumsum(s**2, axis=1)
    tot1, tot2 = c1[:, -1:], c2[:, -1:]
    left1, left2 = c1[:, ks - 1], c2[:, ks - 1]
    within = (left2 - left1**2 / ks) + ((tot2 - left2) - (tot1 - left1) ** 2 / (n - ks))
    total = tot2[:, 0] - tot1[:, 0] ** 2 / n
    best = np.argmin(within, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = np.where(total > 0, 1.0 - within[np.arange(s.shape[0]), best] / total, 0.0)
    return r2, ks[best]


def separation(r2: FloatArray, k: np.ndarray, n: int) -> FloatArray:
    """The gap between the split's two group means in units of the pooled within-group SD
    (sqrt(W / n)), from its R^2 and low-group size: sqrt(R^2 / (1 - R^2) * n^2 / (k (n - k)))."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.sqrt(r2 / np.maximum(1.0 - r2, 1e-300) * n * n / (k * (n - k)))
    return out


def _stat(x: ArrayLike, min_share: float) -> FloatArray:
    a = np.atleast_2d(np.asarray(x, dtype=float))
    r2, k = split_r2(a, min_share)
    return separation(r2, k, a.shape[1])


@lru_cache(maxsize=64)
def null_separation(n: int, min_share: float = MIN_SHARE) -> FloatArray:
    """Sorted separations of the best split for NULL_SIMS draws of n Gaussian values."""
    rng = np.random.default_rng(NULL_SEED + n)
    out: FloatArray = np.sort(_stat(rng.normal(size=(NULL_SIMS, min(n, NULL_MAX_N))),
                                    min_share))
    return out


def flags(x: ArrayLike, alpha: float = 0.01, min_share: float = MIN_SHARE) -> np.ndarray:
    """Vectorised decisions (for simulation): p < alpha and separation >= MIN_SEPARATION."""
    return np.asarray((pvalues(x, min_share) < alpha) & (_stat(x, min_share) >= MIN_SEPARATION))


def pvalues(x: ArrayLike, min_share: float = MIN_SHARE) -> FloatArray:
    """Vectorised p-values of rows of per-block effects (for simulation)."""
    sep = _stat(x, min_share)
    null = null_separation(np.atleast_2d(np.asarray(x)).shape[1], min_share)
    above = null.size - np.searchsorted(null, sep, side="left")
    out: FloatArray = np.asarray((above + 1.0) / (null.size + 1.0), dtype=float)
    return out


@dataclass(frozen=True)
class Regime:
    blocks: int
    share: float
    effect: float  # median log-ratio of the regime's blocks

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = jsonable({**asdict(self), "effect_pct": float(pct(self.effect))})
        return out


@dataclass(frozen=True)
class Regimes:
    """Whether a run's per-block effects split into two regimes, and the regimes if so."""

    n: int
    r2: float  # share of the variance the split explains
    separation: float  # gap between the groups' means / pooled within-group SD
    p_value: float
    alpha: float
    split: bool
    low: Regime
    high: Regime
    switches: int  # times consecutive blocks (in run order) change regime

    def reading(self) -> str:
        if not self.split:
            return (f"no sign of two regimes in {self.n} blocks' effects (p = "
                    f"{self.p_value:.2g})")
        lo, hi = self.low, self.high
        return (f"the blocks' effects fall into two regimes (p = {self.p_value:.2g}): "
                f"{pct(lo.effect):+.1f}% in {lo.blocks} blocks ({lo.share:.0%}) and "
                f"{pct(hi.effect):+.1f}% in {hi.blocks} ({hi.share:.0%}), switching "
                f"{self.switches} time(s) over the run: its interval spans a mixture, and "
                "another run may see other shares; repeat the run (--repeats)")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = jsonable({
            "n": self.n, "r2": self.r2, "separation": self.separation, "p_value": self.p_value, "alpha": self.alpha,
            "split": self.split, "low": self.low.to_dict(), "high": self.high.to_dict(),
            "switches": self.switches, "reading": self.reading()})
        return out


def detect(d: ArrayLike, *, alpha: float = 0.01, min_share: float = MIN_SHARE) -> Regimes:
    """Two regimes or not in one run's per-block log-ratios `d`, given in run order."""
    x = np.asarray(d, dtype=float)
    x = x[np.isfinite(x)]
    if x.ndim != 1 or x.size < MIN_BLOCKS:
        raise StatsInputError(f"regimes need at least {MIN_BLOCKS} blocks, got {x.size}")
    if not 0.0 < alpha < 0.5:
        raise StatsInputError(f"alpha must lie in (0, 0.5), got {alpha}")
    r2, k = split_r2(x[None, :], min_share)
    p = float(pvalues(x[None, :], min_share)[0])
    in_low = np.zeros(x.size, dtype=bool)
    in_low[np.argsort(x, kind="stable")[: int(k[0])]] = True
    n = int(x.size)
    low = Regime(int(in_low.sum()), float(in_low.mean()), float(np.median(x[in_low])))
    high = Regime(int((~in_low).sum()), float((~in_low).mean()), float(np.median(x[~in_low])))
    switches = int(np.sum(in_low[1:] != in_low[:-1]))
    sep = float(separation(r2, k, n)[0])
    return Regimes(n, float(r2[0]), sep, p, alpha, p < alpha and sep >= MIN_SEPARATION, low,
                   high, switches)
