"""Tails reported on their own: p95/p99 ratios and outlier-rate differences between arms.

A robust shift estimate deliberately ignores rare stalls (THP compaction, khugepaged); these
numbers show them. Quantile ratios get a percentile-bootstrap interval at modest confidence
(default 90%; resampling pairs when the arms are paired, else each arm on its own) while both
arms hold at most ``BOOT_MAX_VALUES`` values. Longer arms, where n_boot x n resampled values
would cost tens of seconds, get a distribution-free interval instead, O(n log n) and with
coverage guaranteed whatever the data: each arm's quantile gets the binomial order-statistic
interval [X_(l), X_(u)] at confidence 1 - (1 - confidence)/2, and the ratio interval is
[low_c / high_b, high_c / low_b]; by Bonferroni both arm intervals hold together with
probability >= confidence, whatever the dependence between arms (so it is conservative, and
NaN unless both arms' bounds are positive). The notes say which interval was used. Outliers
are values more than 3 robust SDs (MAD x 1.4826 around the median) from the arm's median;
the rate difference gets Newcombe's hybrid-score interval (independent-proportions form).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from hugelab.stats._util import FloatArray, StatsInputError, finite_1d, jsonable

MAD_TO_SD = 1.4826
OUTLIER_Z = 3.0
BOOT_MAX_VALUES = 20_000


@dataclass(frozen=True)
class QuantileRatio:
    """candidate quantile / baseline quantile with a bootstrap interval."""

    q: float
    baseline: float
    candidate: float
    ratio: float
    low: float
    high: float


@dataclass(frozen=True)
class OutlierRates:
    """Share of observations beyond 3 robust SDs, per arm, and their difference."""

    baseline_rate: float
    candidate_rate: float
    difference: float
    low: float
    high: float
    baseline_bad_side_rate: float
    candidate_bad_side_rate: float


@dataclass(frozen=True)
class TailComparison:
    """Tail summary of candidate vs baseline."""

    confidence: float
    paired: bool
    quantiles: tuple[QuantileRatio, ...]
    outliers: OutlierRates
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out


def robust_z(x: FloatArray) -> FloatArray:
    """(x - median) / (1.4826 * MAD); zeros when the MAD is 0."""
    med = np.median(x)
    scale = MAD_TO_SD * np.median(np.abs(x - med))
    if scale == 0:
        return np.zeros_like(x)
    return (x - med) / scale


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_difference(k1: int, n1: int, k2: int, n2: int, confidence: float) -> tuple[float, float]:
    """Newcombe hybrid-score interval for p2 - p1."""
    z = float(stats.norm.isf((1 - confidence) / 2))
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = _wilson(k1, n1, z)
    l2, u2 = _wilson(k2, n2, z)
    diff = p2 - p1
    low = diff - np.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = diff + np.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return float(low), float(high)


def _boot_quantiles(
    b: FloatArray, c: FloatArray, qs: FloatArray, paired: bool, n_boot: int, seed: int
) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    qb = np.empty((qs.size, n_boot))
    qc = np.empty((qs.size, n_boot))
    step = max(1, 2_000_000 // max(b.size, c.size))  # bound memory for long runs
    for start in range(0, n_boot, step):
        m = min(step, n_boot - start)
        ib = rng.integers(0, b.size, size=(m, b.size))
        ic = ib if paired else rng.integers(0, c.size, size=(m, c.size))
        qb[:, start : start + m] = np.quantile(b[ib], qs, axis=1)
        qc[:, start : start + m] = np.quantile(c[ic], qs, axis=1)
    return qb, qc


def order_stat_interval(sorted_x: FloatArray, q: float, confidence: float) -> tuple[float, float]:
    """Distribution-free interval for the q-quantile: [X_(l), X_(u)] from Binomial(n, q).

    With a = 1 - confidence, l = binom.ppf(a/2) gives P(Bin < l) < a/2 and
    u = binom.ppf(1 - a/2) + 1 gives P(Bin >= u) <= a/2, so coverage is at least
    ``confidence`` for any continuous distribution; an order statistic outside 1..n gives an
    infinite bound.
    """
    n = sorted_x.size
    a = 1.0 - confidence
    lo = int(stats.binom.ppf(a / 2.0, n, q))
    hi = int(stats.binom.ppf(1.0 - a / 2.0, n, q)) + 1
    low = float(sorted_x[lo - 1]) if lo >= 1 else -np.inf
    high = float(sorted_x[hi - 1]) if hi <= n else np.inf
    return low, high


def _order_stat_ratios(
    b: FloatArray, c: FloatArray, qs: FloatArray, confidence: float
) -> list[tuple[float, float]]:
    arm_conf = 1.0 - (1.0 - confidence) / 2.0  # Bonferroni over the two arms
    sb, sc = np.sort(b), np.sort(c)
    out = []
    for q in qs:
        lb, hb = order_stat_interval(sb, float(q), arm_conf)
        lc, hc = order_stat_interval(sc, float(q), arm_conf)
        if min(lb, lc) > 0:
            out.append((lc / hb, hc / lb))
        else:
            out.append((float("nan"), float("nan")))
    return out


def _intervals(
    b: FloatArray, c: FloatArray, qs: FloatArray, paired: bool, n_boot: int, seed: int,
    confidence: float,
) -> tuple[list[tuple[float, float]], str]:
    """Ratio interval per quantile and a note saying how it was made."""
    n = max(b.size, c.size)
    if n > BOOT_MAX_VALUES:
        note = (f"quantile-ratio intervals: distribution-free order-statistic intervals per arm "
                f"(binomial, O(n log n)) combined conservatively for the ratio, since {n:,} "
                f"values exceed the bootstrap limit of {BOOT_MAX_VALUES:,}")
        return _order_stat_ratios(b, c, qs, confidence), note
    qb, qc = _boot_quantiles(b, c, qs, paired, n_boot, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = qc / qb
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    out = [(float(np.nanquantile(r, lo_q)), float(np.nanquantile(r, hi_q))) for r in ratios]
    return out, ""


def _outliers(b: np.ndarray, c: np.ndarray, better: str, confidence: float) -> OutlierRates:
    """Each arm's share of robust outliers (|z| > OUTLIER_Z), their difference with its
    interval, and the share on the bad side."""
    zb, zc = robust_z(b), robust_z(c)
    kb, kc = int(np.sum(np.abs(zb) > OUTLIER_Z)), int(np.sum(np.abs(zc) > OUTLIER_Z))
    sign = 1.0 if better == "lower" else -1.0
    low, high = rate_difference(kb, b.size, kc, c.size, confidence)
    return OutlierRates(
        baseline_rate=kb / b.size,
        candidate_rate=kc / c.size,
        difference=kc / c.size - kb / b.size,
        low=low,
        high=high,
        baseline_bad_side_rate=float(np.mean(sign * zb > OUTLIER_Z)),
        candidate_bad_side_rate=float(np.mean(sign * zc > OUTLIER_Z)),
    )


def compare_tails(
    baseline: ArrayLike,
    candidate: ArrayLike,
    *,
    quantiles: tuple[float, ...] = (0.95, 0.99),
    confidence: float = 0.90,
    better: str = "lower",
    n_boot: int = 2000,
    seed: int = 0,
) -> TailComparison:
    """Quantile ratios (candidate/baseline) and outlier rates. NaNs are ignored.

    Equal-length arms are treated as paired (pairs resampled together); needs 10+ values.
    Arms longer than ``BOOT_MAX_VALUES`` get order-statistic intervals instead of the
    bootstrap (see the module docstring; ``n_boot`` and ``seed`` are then unused).
    """
    if not 0.5 <= confidence < 1.0:
        raise StatsInputError(f"confidence must lie in [0.5, 1), got {confidence}")
    b_raw, c_raw = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    paired = b_raw.shape == c_raw.shape
    if paired:
        keep = ~(np.isnan(b_raw) | np.isnan(c_raw))
        b_raw, c_raw = b_raw[keep], c_raw[keep]
    b = finite_1d(b_raw, "baseline", min_n=10)
    c = finite_1d(c_raw, "candidate", min_n=10)
    qs = np.asarray(quantiles, dtype=float)
    intervals, method_note = _intervals(b, c, qs, paired, n_boot, seed, confidence)
    rows = []
    notes = [method_note] if method_note else []
    for i, q in enumerate(qs):
        pb, pc = float(np.quantile(b, q)), float(np.quantile(c, q))
        rows.append(
            QuantileRatio(
                q=float(q),
                baseline=pb,
                candidate=pc,
                ratio=pc / pb if pb else float("nan"),
                low=intervals[i][0],
                high=intervals[i][1],
            )
        )
        if min(b.size, c.size) * (1 - q) < 5:
            notes.append(
                f"p{100 * q:g} rests on fewer than 5 tail values per arm: treat it as indicative"
            )
    outliers = _outliers(b, c, better, confidence)
    return TailComparison(
        confidence=confidence,
        paired=paired,
        quantiles=tuple(rows),
        outliers=outliers,
        notes=tuple(notes),
    )
