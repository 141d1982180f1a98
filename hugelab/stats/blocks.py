"""Block-level (cluster) analysis: one-way random-effects variance components.

Observations nested in blocks (pairs in VM boots, trials in blocks) are not independent when
blocks differ. The between-block share of variance (ICC) turns into a design effect
``1 + (m - 1) * ICC`` (m = mean block size): the factor by which treating every observation
as independent understates the variance of a mean (Kalibera & Jones, ISMM 2013).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from hugelab.stats._util import FloatArray, StatsInputError, jsonable, labelled

HETEROGENEITY_ALPHA = 0.05
DESIGN_EFFECT_WARN = 1.1


@dataclass(frozen=True)
class VarianceComponents:
    """Between- vs within-block variance, design effect and whether pooling misleads."""

    n: int
    n_blocks: int
    mean_block_size: float
    var_between: float
    var_within: float
    icc: float
    design_effect: float
    effective_n: float
    f_stat: float
    f_p: float
    kruskal_p: float
    pooling_warning: bool
    reading: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out


def _reading(pooling: bool, deff: float, icc: float, n_blocks: int) -> str:
    if pooling:
        return (
            f"blocks differ (ICC {icc:.2f}, design effect {deff:.2f}): treating trials as "
            f"independent would overstate confidence; analyse the {n_blocks} blocks as the "
            "units and add blocks rather than trials per block"
        )
    return (
        f"no material difference between blocks detected (design effect {deff:.2f}); "
        "pooling trials is unlikely to overstate confidence"
    )


def kruskal_p(x: FloatArray, inv: np.ndarray, sizes: FloatArray) -> float:
    """Kruskal-Wallis p-value (tie-corrected, chi-square approximation) for groups ``inv``.

    The statistic of :func:`scipy.stats.kruskal`, computed from one ranking and per-group
    rank sums (``np.bincount``) in O(n log n) however many groups; 1.0 when all values tie.
    """
    n = x.size
    ranks = stats.rankdata(x)
    rank_sums = np.bincount(inv, weights=ranks, minlength=sizes.size)
    h = 12.0 / (n * (n + 1.0)) * float(np.sum(rank_sums**2 / sizes)) - 3.0 * (n + 1.0)
    _, ties = np.unique(x, return_counts=True)
    correction = 1.0 - float(np.sum(ties.astype(float) ** 3 - ties)) / (float(n) ** 3 - n)
    if correction <= 0.0:  # all values identical
        return 1.0
    p = float(stats.chi2.sf(h / correction, sizes.size - 1))
    return 1.0 if np.isnan(p) else p


def variance_components(values: ArrayLike, blocks: ArrayLike) -> VarianceComponents:
    """One-way random-effects ANOVA of ``values`` grouped by ``blocks`` labels.

    NaN values are ignored. Needs at least two blocks and one block with two values.
    The pooling warning fires when between-block heterogeneity is significant (ANOVA F or
    the rank-based Kruskal-Wallis test, p < 0.05) and the design effect exceeds 1.1.
    """
    x, labels = labelled(values, blocks, "values", "blocks")
    uniq, inv = np.unique(labels, return_inverse=True)
    k, n = uniq.size, x.size
    if k < 2 or n - k < 1:
        raise StatsInputError(
            f"need at least 2 blocks and one repeated block, got {k} blocks for {n} values"
        )
    sizes = np.bincount(inv, minlength=k).astype(float)
    means = np.bincount(inv, weights=x, minlength=k) / sizes
    ss_between = float(np.sum(sizes * (means - x.mean()) ** 2))
    ss_within = float(np.sum((x - means[inv]) ** 2))
    ms_b = ss_between / (k - 1)
    ms_w = ss_within / (n - k)
    n0 = (n - np.sum(sizes**2) / n) / (k - 1)
    var_b = max(0.0, (ms_b - ms_w) / n0)
    total = var_b + ms_w
    icc = var_b / total if total > 0 else 0.0
    m = n / k
    deff = 1.0 + (m - 1.0) * icc
    if ms_w > 0:
        f_stat = ms_b / ms_w
        f_p = float(stats.f.sf(f_stat, k - 1, n - k))
    else:
        f_stat, f_p = (float("inf"), 0.0) if ms_b > 0 else (float("nan"), 1.0)
    kw_p = kruskal_p(x, inv, sizes)
    pooling = min(f_p, kw_p) < HETEROGENEITY_ALPHA and deff > DESIGN_EFFECT_WARN
    return VarianceComponents(
        n=n,
        n_blocks=k,
        mean_block_size=m,
        var_between=var_b,
        var_within=ms_w,
        icc=icc,
        design_effect=deff,
        effective_n=n / deff,
        f_stat=float(f_stat),
        f_p=f_p,
        kruskal_p=kw_p,
        pooling_warning=bool(pooling),
        reading=_reading(pooling, deff, icc, k),
    )


def pooling_warning(values: ArrayLike, blocks: ArrayLike) -> bool:
    """True when analysing ``values`` as independent would overstate confidence."""
    return variance_components(values, blocks).pooling_warning
