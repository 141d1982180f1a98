"""Trials weighted by their own standard errors: a sequential look's statistic for paired
log-ratios whose trials each carry an SE (issue 39).

A request-level trial measures its effect from thousands of windows, so it knows its own
standard error s_i; under a hypervisor's steal those differ by up to seven times within a run,
and they predict how far a trial strays (bench/aa_floor.py: squared deviation on s^2, slope
0.94-0.99 for PostgreSQL). Equal weights, which the signed-rank test gives every trial, waste
that. Here each trial weighs

    w_i = 1 / (tau^2 + s_i^2),

tau^2 the spread between trials beyond their SEs (server instances), estimated by
DerSimonian-Laird from the trials so far. It is shift-invariant, so the weights do not depend
on the centre a test puts the effect at. A centre theta is tested by

    z(theta) = sum w_i (x_i - theta) / sqrt(sum w_i^2 (x_i - theta)^2),

the normal approximation of the sign-flip distribution of the weighted sum when the x_i -
theta are symmetric about 0 (the self-normalised sum: a t statistic whose variance is the
sandwich one under the tested centre, not the fitted one). Such sums have lighter tails than
the normal under symmetry (Efron, JASA 1969), and |z| <= sqrt(a^2 / A) (a = sum w,
A = sum w^2: the effective number of trials), so a few heavy trials cannot cross a boundary.
The estimate is the weighted mean (z = 0) and the interval at bound e is the set of centres
with |z(theta)| < e: the roots of a quadratic in theta. The Knapp-Hartung t of the same
random-effects mean exceeded alpha under the looks (bench/weights_sim.py); this one held it
(docs/benchmarks.md, "Trials weighted by their own SE").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from hugelab.stats._util import FloatArray, StatsInputError


def tau2(x: FloatArray, s2: FloatArray) -> FloatArray:
    """Per row: the DerSimonian-Laird between-trial variance (0 when the SEs explain all)."""
    n = x.shape[1]
    w0 = 1.0 / s2
    m0 = (w0 * x).sum(1) / w0.sum(1)
    q = (w0 * (x - m0[:, None]) ** 2).sum(1)
    c = w0.sum(1) - (w0 ** 2).sum(1) / w0.sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = np.where(c > 0, (q - (n - 1)) / c, 0.0)
    out: FloatArray = np.maximum(0.0, t2)
    return out


def weights(x: FloatArray, s2: FloatArray) -> FloatArray:
    """Per row: each trial's weight 1 / (tau^2 + s^2)."""
    out: FloatArray = 1.0 / (tau2(x, s2)[:, None] + s2)
    return out


def z_at(x: FloatArray, w: FloatArray, centre: float) -> FloatArray:
    """Per row: the self-normalised weighted z of the centre (0 where every x equals it)."""
    y = x - centre
    num = (w * y).sum(1)
    den = np.sqrt((w * w * y * y).sum(1))
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return out


def tests(x: FloatArray, s2: FloatArray, delta: float, bound: float
          ) -> tuple[FloatArray, np.ndarray]:
    """Per row: z against 0, and whether both one-sided tests against -/+delta pass at `bound`
    (TOST: the effect above -delta and below +delta)."""
    w = weights(x, s2)
    return z_at(x, w, 0.0), (z_at(x, w, -delta) >= bound) & (z_at(x, w, delta) <= -bound)


@dataclass(frozen=True)
class Weighted:
    """One comparison's weighted reading: log scale."""

    estimate: float  # the weighted mean
    lo: float  # the interval at the bound asked for (-inf/inf: unbounded)
    hi: float
    tau: float  # between-trial SD beyond the trials' SEs
    effective_n: float  # (sum w)^2 / sum w^2
    unit_sd: float  # per-trial SD of the weighted mean: sqrt(n) x its sandwich SE


def as_rows(d: ArrayLike, se: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """One comparison's log-ratios and their SEs as 1 x n rows; NaN pairs dropped; an SE that
    is not positive is an error."""
    x, s = np.asarray(d, dtype=float).ravel(), np.asarray(se, dtype=float).ravel()
    if x.shape != s.shape:
        raise StatsInputError(f"{x.size} log-ratios but {s.size} standard errors")
    keep = ~(np.isnan(x) | np.isnan(s))
    x, s = x[keep], s[keep]
    if np.any(s <= 0) or not np.all(np.isfinite(s)):
        raise StatsInputError("every trial's standard error must be positive and finite")
    return x[None, :], (s * s)[None, :]


def reading(d: ArrayLike, se: ArrayLike, bound: float) -> Weighted:
    """The weighted mean of one comparison's log-ratios and the centres whose |z| stays
    below `bound` (the roots of (b - a t)^2 = e^2 (C - 2 B t + A t^2))."""
    x, s2 = as_rows(d, se)
    if x.shape[1] < 2:
        raise StatsInputError("a weighted reading needs 2 or more trials")
    w = weights(x, s2)[0]
    v = x[0]
    a, b = float(w.sum()), float((w * v).sum())
    big_a, big_b, big_c = float((w * w).sum()), float((w * w * v).sum()), \
        float((w * w * v * v).sum())
    m = b / a
    sandwich = math.sqrt(float((w * w * (v - m) ** 2).sum())) / a
    e2 = bound * bound
    qa, qb, qc = a * a - e2 * big_a, -2.0 * (a * b - e2 * big_b), b * b - e2 * big_c
    disc = qb * qb - 4.0 * qa * qc
    if qa <= 0 or disc < 0:
        lo, hi = -math.inf, math.inf
    else:
        r = math.sqrt(disc)
        lo, hi = sorted(((-qb - r) / (2 * qa), (-qb + r) / (2 * qa)))
    return Weighted(estimate=m, lo=lo, hi=hi, tau=math.sqrt(float(tau2(x, s2)[0])),
                    effective_n=a * a / big_a, unit_sd=sandwich * math.sqrt(v.size))
