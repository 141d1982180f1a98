"""The classic per-arm table (as in the Red Hat huge-page study): mean, N, SD, t margin, tails.

Shown because readers know it; its t-based margin assumes near-normal data, which the
normality reading checks. The robust paired interval (paired.compare) is the primary result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from hugelab.stats._util import StatsInputError, finite_1d, jsonable

SHAPIRO_MAX_N = 5000


@dataclass(frozen=True)
class Normality:
    """A normality test and what it means for the t-based margin."""

    test: str
    statistic: float
    p_value: float
    reading: str


@dataclass(frozen=True)
class ClassicTable:
    """One arm's classic summary."""

    mean: float
    n: int
    stddev: float
    min: float
    max: float
    confidence: float
    margin_of_error: float
    beyond_3sigma_high: int
    beyond_3sigma_low: int
    beyond_6sigma_high: int
    beyond_6sigma_low: int
    expected_beyond_3sigma: float
    max_sigma: float
    normality: Normality

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out


def margin_of_error(values: ArrayLike, confidence: float = 0.9999) -> float:
    """Half-width of the t-based confidence interval for the mean (NaN if n < 2)."""
    if not 0.0 < confidence < 1.0:
        raise StatsInputError(f"confidence must lie in (0, 1), got {confidence}")
    x = finite_1d(values, "values")
    if x.size < 2:
        return float("nan")
    t = stats.t.isf((1.0 - confidence) / 2.0, x.size - 1)
    return float(t * np.std(x, ddof=1) / np.sqrt(x.size))


def _normality_reading(p: float) -> str:
    if p < 0.001:
        return (
            "the data are far from normal: t-based margins are unreliable; use the robust interval"
        )
    if p < 0.05:
        return (
            "the data depart from normal: treat t-based margins with caution; "
            "prefer the robust interval"
        )
    return "no evidence against normality at this sample size: t-based margins are reasonable"


def normality(values: ArrayLike) -> Normality:
    """Shapiro-Wilk for n <= 5000, D'Agostino-Pearson K^2 above; plain-language reading."""
    x = finite_1d(values, "values")
    if x.size < 3:
        return Normality("none", float("nan"), float("nan"), "too few values to judge normality")
    if np.ptp(x) == 0:
        return Normality("none", float("nan"), float("nan"), "all values identical")
    if x.size <= SHAPIRO_MAX_N:
        res = stats.shapiro(x)
        name = "shapiro-wilk"
    else:
        res = stats.normaltest(x)
        name = "dagostino-k2"
    p = float(res.pvalue)
    return Normality(name, float(res.statistic), p, _normality_reading(p))


def classic_table(values: ArrayLike, *, confidence: float = 0.9999) -> ClassicTable:
    """Red Hat-style table for one arm (NaNs ignored; needs at least one value)."""
    x = finite_1d(values, "values")
    mean = float(np.mean(x))
    sd = float(np.std(x, ddof=1)) if x.size > 1 else float("nan")
    z = (x - mean) / sd if sd > 0 else np.zeros_like(x)
    return ClassicTable(
        mean=mean,
        n=int(x.size),
        stddev=sd,
        min=float(x.min()),
        max=float(x.max()),
        confidence=confidence,
        margin_of_error=margin_of_error(x, confidence),
        beyond_3sigma_high=int(np.sum(z > 3)),
        beyond_3sigma_low=int(np.sum(z < -3)),
        beyond_6sigma_high=int(np.sum(z > 6)),
        beyond_6sigma_low=int(np.sum(z < -6)),
        expected_beyond_3sigma=float(x.size * 2 * stats.norm.sf(3.0)),
        max_sigma=float(np.max(np.abs(z))),
        normality=normality(x),
    )
