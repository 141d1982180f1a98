"""The signed-rank p-value with ties or zeros at small n, by enumerating every sign flip at once.

scipy.stats.wilcoxon answers such samples (n <= 13 with a tie or a zero anywhere in the batch)
with a permutation test over all 2**n sign flips, but calls its statistic once per flip and
row: 1.2 s a row at n = 12, a minute for one report's cost figures (counts and shares are
often tied or zero). This module computes the same test, the same numbers, as one matrix
product: the statistic of a flip is the sum of the ranks (average ranks of |d| among the
non-zero differences; zeros dropped, Wilcoxon's way) of the differences that flip to positive,
and the p-value counts the flips at or beyond the observed statistic with scipy's tolerance
(100 float epsilons of it). `applies` says when scipy would take that path, so a caller keeps
scipy's answer, bit for bit, in every case (tests/test_stats_signflip.py compares them).
"""

from __future__ import annotations

import numpy as np

from hugelab.stats._util import FloatArray

MAX_N = 13  # scipy's own bound: 2**13 flips stay under its 9999 resamples, so it enumerates
_ROWS = 256  # rows per matrix product (2**13 x 256 doubles: 16 MiB)


def _has_ties(d: FloatArray) -> bool:
    """Any row with two equal non-zero |d|."""
    a = np.sort(np.abs(d), axis=1)
    same = (a[:, 1:] == a[:, :-1]) & (a[:, 1:] != 0)
    return bool(np.any(same))


def applies(d: FloatArray) -> bool:
    """Whether scipy.stats.wilcoxon (method "auto") answers this batch of rows by its
    permutation test: at most 13 columns, and a zero or a tie somewhere in the batch."""
    return d.shape[1] <= MAX_N and (bool(np.any(d == 0)) or _has_ties(d))


def _ranks(d: FloatArray) -> FloatArray:
    """Average ranks of |d| among each row's non-zero entries; 0 for the zeros."""
    a = np.abs(d)
    out = np.zeros_like(a)
    for i, row in enumerate(a):
        nz = row != 0
        vals = row[nz]
        less = (vals[:, None] > vals[None, :]).sum(axis=1)
        equal = (vals[:, None] == vals[None, :]).sum(axis=1)
        out[i, nz] = less + (equal + 1) / 2.0
    return out


def pvalue(d: FloatArray, alternative: str = "two-sided") -> FloatArray:
    """Exact sign-flip signed-rank p per row of `d` (n <= 13), as scipy's permutation test."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    n = d.shape[1]
    if n > MAX_N:
        raise ValueError(f"sign-flip enumeration is for n <= {MAX_N}, got {n}")
    flips = ((np.arange(1 << n)[:, None] >> np.arange(n)[None, :]) & 1).astype(float)
    ranks = _ranks(d)
    out = np.empty(d.shape[0])
    eps = np.finfo(float).eps * 100
    for start in range(0, d.shape[0], _ROWS):
        r = ranks[start:start + _ROWS]
        pos = (d[start:start + _ROWS] > 0).astype(float)
        observed = (pos * r).sum(axis=1)
        # a flip's positives: each entry keeps its sign (bit 0) or changes it (bit 1)
        up = flips[:, None, :] * (1.0 - pos)[None, :, :] + (1.0 - flips[:, None, :]) * pos
        null = (up * r[None, :, :]).sum(axis=2)
        gamma = np.abs(eps * observed)
        total = float(1 << n)
        less = np.count_nonzero(null <= observed + gamma, axis=0) / total
        greater = np.count_nonzero(null >= observed - gamma, axis=0) / total
        p = {"less": less, "greater": greater,
             "two-sided": np.minimum(less, greater) * 2}[alternative]
        out[start:start + _ROWS] = np.clip(p, 0.0, 1.0)
    return out
