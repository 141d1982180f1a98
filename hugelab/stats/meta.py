"""Random-effects pooling of per-host paired estimates (a fleet of hosts running one experiment).

Each host i contributes an estimate y_i of the effect on the log scale (log candidate/baseline)
and its variance v_i = SE_i^2. Hosts really differ (CPU, kernel, firmware), so the model is
y_i ~ N(mu + u_i, v_i) with u_i ~ N(0, tau^2): mu is the fleet's average effect and tau the
spread of true effects between hosts.

Choices (each checked by simulation in tests/test_meta.py):

- Per-host estimate (:func:`hl_estimates`): the Hodges-Lehmann shift of the host's paired
  block log-ratios, the same estimate as the host's own report, with
  SE = (U - L) / (2 z) from the width of its signed-rank interval [L, U] (Hettmansperger &
  McKean, *Robust Nonparametric Statistical Methods*: the interval-length estimate of the rank
  scale). The interval is the 68.3% one (+/-1 SE for a normal estimate) and z is taken at its
  exact achieved level: with few blocks the 95% interval is the whole range of the Walsh
  averages and overstated the SE by 36-47% at 6 blocks (median SE / true SD, normal and t3
  noise), the 68.3% one by 0-2% (0.82-1.02 with 1% 20-sigma stalls; 1.00 at 20 blocks). Robust
  to the heavy tails and stalls of hugelab's noise, where a mean and sd/sqrt(n) are thrown
  about by one stall (pooled intervals 5-15% narrower than the mean's at 20 blocks under t3
  or stalls, equal under normal noise).
- tau^2: Paule-Mandel by default (the generalised Q equals its expectation k - 1; solved by
  vectorised bisection), DerSimonian-Laird (one-step moments) on request. DL is known to
  underestimate tau^2 when it is large (Veroniki et al. 2016; Langan et al. 2019 recommend PM or
  REML), and the prediction interval rests directly on tau^2.
- Interval and test for mu: Hartung-Knapp-Sidik-Jonkman (HKSJ): SE^2 = q* / sum(w*) with
  q* = sum w*_i (y_i - mu)^2 / (k - 1), w*_i = 1 / (v_i + tau^2), and t with k - 1 degrees of
  freedom. The plain DL interval (normal, SE^2 = 1 / sum w*) undercovers badly with few hosts
  (IntHout et al. 2014). With ``modified=True`` (the default) q* is replaced by max(1, q*)
  (Roever et al. 2015; Jackson et al. 2017): when the hosts agree better than their own SEs
  say (q* < 1), plain HKSJ shrinks the interval below even the fixed-effect one and undercovers
  (measured in tests/test_meta.py). With PM and tau^2 > 0, q* = 1 exactly.
- Prediction interval for a new host's true effect (k >= 3): mu +/- t_{k-2} sqrt(tau^2 + SE^2)
  (Higgins, Thompson & Spiegelhalter 2009), with the HKSJ SE above. It covers 0.93 when tau is
  above the hosts' SEs (k = 5, 10), but only 0.86-0.90 when tau is close to them, where tau^2
  is often estimated as 0: read it as a lower bound on the spread a new host may show.

Measured in tests/test_meta.py (hosts' SEs 0.3-1.5%, alpha 0.05): coverage of the pooled
interval 0.943-0.999 for k = 3, 5, 10 and tau 0.5-2% (plain DL: 0.86 at k = 3); false
positives without an effect or heterogeneity 0-1.7% (conservative: the max(1, q*) guard costs
power at small k); power for a 2% effect with tau = 1%: 0.26 / 0.73 / 0.98 at 3 / 5 / 10 hosts.
- Heterogeneity: Cochran's Q (fixed-effect weights) with its chi^2_{k-1} p-value, and
  I^2 = max(0, (Q - (k - 1)) / Q) (Higgins & Thompson 2002).
- k = 1: no pooling is possible: the host's own estimate with a normal interval from its SE,
  tau^2, I^2, Q and the prediction interval undefined (NaN), and a note saying so. k = 2: the
  interval uses t_1 and is very wide: that is the honest answer for two hosts.
- v_i = 0 (a host whose blocks all gave the same ratio) is floored at ``V_FLOOR`` (an SE of
  0.0001% on the log scale) so weights stay finite; a note counts such hosts.
- Verdicts follow :mod:`hugelab.stats.paired`: a significant difference (p < alpha) gives
  faster/slower by the ``better`` direction, else equivalence by TOST against
  +/-log(1 + margin) (the same t distribution, one-sided tests at alpha) gives equivalent,
  else inconclusive (:func:`hugelab.stats.paired.decide`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from hugelab.stats import signedrank
from hugelab.stats._util import FloatArray, StatsInputError, jsonable
from hugelab.stats.paired import check_args, decide, pct, verdict_codes

Tau2Method = Literal["pm", "dl"]
TAU2_METHODS = ("pm", "dl")
V_FLOOR = 1e-12  # variance floor on the log scale: SE 1e-6, i.e. 0.0001%
SE_ALPHA = 0.31731050786291415  # per-host SE from the signed-rank 68.3% interval: 2*P(Z > 1)
PM_ITERATIONS = 100  # bisection steps for Paule-Mandel: the bracket shrinks by 2^-100


@dataclass(frozen=True)
class Pooled:
    """A random-effects pooled estimate; log-scale numbers with percent twins (``*_pct``)."""

    k: int
    estimate: float  # mu, log(candidate / baseline)
    se: float  # of mu: HKSJ (k >= 2) or the host's own SE (k = 1)
    ci_low: float
    ci_high: float
    p_value: float
    df: int | None  # t degrees of freedom (k - 1); None: normal (k = 1)
    alpha: float
    tau2: float
    tau: float
    i2: float
    q: float
    q_p: float
    q_star: float  # HKSJ scale before the max(1, q*) modification
    pred_low: float  # prediction interval for a new host's true effect (k >= 3), else NaN
    pred_high: float
    weights: tuple[float, ...]  # random-effects weights, summing to 1, in input order
    method: str  # tau^2 estimator: "pm" | "dl" | "none"
    interval: str  # "hksj" | "hksj-modified" | "normal (one host)"
    notes: tuple[str, ...] = ()

    @property
    def effect_pct(self) -> float:
        return float(pct(self.estimate))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict with the percent versions of the estimate, intervals and tau."""
        d: dict[str, Any] = asdict(self)
        d.update(effect_pct=self.effect_pct, ci_low_pct=float(pct(self.ci_low)),
                 ci_high_pct=float(pct(self.ci_high)), tau_pct=float(pct(self.tau)),
                 pred_low_pct=float(pct(self.pred_low)), pred_high_pct=float(pct(self.pred_high)))
        out: dict[str, Any] = jsonable(d)
        return out


# --- per-host estimates -------------------------------------------------------------------------

def _achieved_alpha(n: int, alpha: float) -> float:
    """The two-sided miss rate the signed-rank interval of n pairs really has (exact for n <= 50)."""
    k, method = signedrank.interval_rank(n, alpha)
    if method != "exact" or k < 1:
        return alpha
    return float(2.0 * signedrank.exact_cdf(n)[k - 1])


def hl_estimates(d: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Per row of paired log-ratios (hosts x blocks, no NaNs): the Hodges-Lehmann shift and its
    variance from the width of its 68.3% signed-rank interval (see the module docstring).

    A row with fewer than 3 pairs has no finite interval: its variance is NaN.
    """
    d = np.atleast_2d(np.asarray(d, dtype=float))
    if d.shape[1] == 0:
        nan = np.full(d.shape[0], np.nan)
        return nan, nan.copy()
    hl, ((lo, hi),), _ = signedrank.hl_and_intervals(d, (SE_ALPHA,))
    z = stats.norm.isf(_achieved_alpha(d.shape[1], SE_ALPHA) / 2.0)
    se = (hi - lo) / (2.0 * z)
    v = np.where(np.isfinite(se), se**2, np.nan)
    return np.asarray(hl, dtype=float), np.asarray(v, dtype=float)


# --- tau^2 --------------------------------------------------------------------------------------

def _fixed(y: FloatArray, w: FloatArray) -> FloatArray:
    out: FloatArray = np.sum(w * y, axis=1) / np.sum(w, axis=1)
    return out


def cochran_q(y: FloatArray, v: FloatArray) -> FloatArray:
    """Cochran's Q per row (rows = meta-analyses, columns = hosts)."""
    w = 1.0 / v
    mu = _fixed(y, w)
    out: FloatArray = np.sum(w * (y - mu[:, None]) ** 2, axis=1)
    return out


def tau2_dl(y: FloatArray, v: FloatArray) -> FloatArray:
    """DerSimonian-Laird tau^2 per row, truncated at 0."""
    w = 1.0 / v
    k = y.shape[1]
    c = np.sum(w, axis=1) - np.sum(w**2, axis=1) / np.sum(w, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (cochran_q(y, v) - (k - 1)) / c
    out: FloatArray = np.maximum(np.nan_to_num(t, nan=0.0), 0.0)
    return out


def _generalised_q(y: FloatArray, v: FloatArray, t2: FloatArray) -> FloatArray:
    w = 1.0 / (v + t2[:, None])
    mu = _fixed(y, w)
    out: FloatArray = np.sum(w * (y - mu[:, None]) ** 2, axis=1)
    return out


def tau2_pm(y: FloatArray, v: FloatArray) -> FloatArray:
    """Paule-Mandel tau^2 per row: the root of Q(tau^2) = k - 1, 0 when Q(0) <= k - 1.

    Q(tau^2) decreases in tau^2 and is at most k - 1 at k * range(y)^2 / (k - 1), so bisection
    on [0, that] finds the root of every row at once.
    """
    k = y.shape[1]
    lo = np.zeros(y.shape[0])
    hi = k * np.ptp(y, axis=1) ** 2 / max(k - 1, 1) + V_FLOOR
    live = _generalised_q(y, v, lo) > k - 1
    for _ in range(PM_ITERATIONS):
        mid = 0.5 * (lo + hi)
        above = _generalised_q(y, v, mid) > k - 1
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    out: FloatArray = np.where(live, 0.5 * (lo + hi), 0.0)
    return out


# --- pooling ------------------------------------------------------------------------------------

def pool_rows(y: ArrayLike, v: ArrayLike, *, alpha: float = 0.05, method: Tau2Method = "pm",
              modified: bool = True) -> dict[str, FloatArray]:
    """Vectorised pooling of many meta-analyses at once (rows x hosts, k >= 2, no NaNs, v > 0);
    for simulation. Keys: mu, se, lo, hi, p, tau2, q, q_star, pred_lo, pred_hi, weights."""
    ys: FloatArray = np.atleast_2d(np.asarray(y, dtype=float))
    vs: FloatArray = np.maximum(np.atleast_2d(np.asarray(v, dtype=float)), V_FLOOR)
    k = ys.shape[1]
    if k < 2:
        raise StatsInputError("pool_rows needs at least 2 hosts per row; use pool() for one")
    t2 = tau2_pm(ys, vs) if method == "pm" else tau2_dl(ys, vs)
    w = 1.0 / (vs + t2[:, None])
    mu = _fixed(ys, w)
    q_star = np.sum(w * (ys - mu[:, None]) ** 2, axis=1) / (k - 1)
    scale = np.maximum(q_star, 1.0) if modified else q_star
    se = np.sqrt(scale / np.sum(w, axis=1))
    crit = stats.t.isf(alpha / 2.0, k - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = 2.0 * stats.t.sf(np.abs(mu) / se, k - 1)
    p = np.where(se > 0, p, np.where(mu == 0, 1.0, 0.0))
    pred = (stats.t.isf(alpha / 2.0, k - 2) * np.sqrt(t2 + se**2) if k >= 3
            else np.full(mu.shape, np.nan))
    return {"mu": mu, "se": se, "lo": mu - crit * se, "hi": mu + crit * se, "p": p,
            "tau2": t2, "q": cochran_q(ys, vs), "q_star": q_star, "pred_lo": mu - pred,
            "pred_hi": mu + pred, "weights": w / np.sum(w, axis=1, keepdims=True)}


def _check_inputs(y: ArrayLike, v: ArrayLike, alpha: float, method: str
                  ) -> tuple[FloatArray, FloatArray]:
    ya, va = np.asarray(y, dtype=float), np.asarray(v, dtype=float)
    if ya.ndim != 1 or va.shape != ya.shape:
        raise StatsInputError(f"estimates and variances must be 1-D and pair up: "
                              f"{ya.shape} vs {va.shape}")
    if ya.size == 0:
        raise StatsInputError("no host to pool")
    if not (np.all(np.isfinite(ya)) and np.all(np.isfinite(va))):
        raise StatsInputError("estimates and variances must be finite (a host without an "
                              "interval cannot be weighted: leave it out)")
    if np.any(va < 0):
        raise StatsInputError("variances must not be negative")
    if not 0.0 < alpha < 0.5:
        raise StatsInputError(f"alpha must lie in (0, 0.5), got {alpha}")
    if method not in TAU2_METHODS:
        raise StatsInputError(f"method must be one of {TAU2_METHODS}, got {method!r}")
    return ya, va


def _single(y: float, v: float, alpha: float, notes: list[str], unit: str) -> Pooled:
    se = math.sqrt(v)
    crit = float(stats.norm.isf(alpha / 2.0))
    p = float(2.0 * stats.norm.sf(abs(y) / se))
    nan = float("nan")
    notes.append(f"one {unit}: nothing to pool; its own estimate with a normal interval from "
                 f"its SE; no between-{unit} spread can be estimated")
    return Pooled(k=1, estimate=y, se=se, ci_low=y - crit * se, ci_high=y + crit * se,
                  p_value=p, df=None, alpha=alpha, tau2=nan, tau=nan, i2=nan, q=nan, q_p=nan,
                  q_star=nan, pred_low=nan, pred_high=nan, weights=(1.0,), method="none",
                  interval=f"normal (one {unit})", notes=tuple(notes))


def pool(y: ArrayLike, v: ArrayLike, *, alpha: float = 0.05, method: Tau2Method = "pm",
         modified: bool = True, unit: str = "host") -> Pooled:
    """Random-effects pooled estimate of per-host estimates `y` with variances `v` (log scale);
    `unit` names what each estimate is in the notes (a host, or a run)."""
    ya, va = _check_inputs(y, v, alpha, method)
    notes: list[str] = []
    zero = int(np.sum(va < V_FLOOR))
    if zero:
        notes.append(f"{zero} {unit}(s) with (near) zero variance: floored at SE "
                     f"{math.sqrt(V_FLOOR):g}")
    va = np.maximum(va, V_FLOOR)
    k = ya.size
    if k == 1:
        return _single(float(ya[0]), float(va[0]), alpha, notes, unit)
    r = {key: val[0] for key, val in pool_rows(ya, va, alpha=alpha, method=method,
                                                modified=modified).items()}
    q = float(r["q"])
    i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    if k == 2:
        notes.append(f"two {unit}s: the interval uses t with 1 degree of freedom (wide), tau^2 "
                     "is barely estimable and no prediction interval is given")
    elif k < 5:
        notes.append(f"{k} {unit}s: tau^2 and the prediction interval are imprecise")
    modified_here = modified and float(r["q_star"]) < 1.0
    return Pooled(k=k, estimate=float(r["mu"]), se=float(r["se"]), ci_low=float(r["lo"]),
                  ci_high=float(r["hi"]), p_value=float(r["p"]), df=k - 1, alpha=alpha,
                  tau2=float(r["tau2"]), tau=math.sqrt(float(r["tau2"])), i2=i2, q=q,
                  q_p=float(stats.chi2.sf(q, k - 1)), q_star=float(r["q_star"]),
                  pred_low=float(r["pred_lo"]), pred_high=float(r["pred_hi"]),
                  weights=tuple(float(x) for x in r["weights"]), method=method,
                  interval="hksj-modified" if modified_here else "hksj", notes=tuple(notes))


# --- verdicts -----------------------------------------------------------------------------------

def _dist(p: Pooled) -> Any:
    return stats.norm if p.df is None else stats.t(p.df)


def tost_pvalue(p: Pooled, margin: float = 0.01) -> float:
    """Equivalence p-value: two one-sided tests of mu against +/-log(1 + margin), max of both."""
    delta = math.log1p(margin)
    if not p.se > 0:
        return 0.0 if abs(p.estimate) < delta else 1.0
    dist = _dist(p)
    low = float(dist.sf((p.estimate + delta) / p.se))
    high = float(dist.cdf((p.estimate - delta) / p.se))
    return max(low, high)


def verdict(p: Pooled, *, better: str = "lower", margin: float = 0.01,
            p_value: float | None = None, tost_p: float | None = None) -> str:
    """faster / slower / equivalent / inconclusive at the pooled estimate's alpha, by the rule of
    :func:`hugelab.stats.paired.decide`; pass Holm-adjusted `p_value` / `tost_p` to override."""
    check_args(better, p.alpha, margin)
    pv = p.p_value if p_value is None else p_value
    tp = tost_pvalue(p, margin) if tost_p is None else tost_p
    return decide(pv, tp, p.estimate, p.alpha, better)


def verdict_rows(r: dict[str, FloatArray], k: int, *, alpha: float, better: str,
                 margin: float) -> np.ndarray:
    """Vectorised verdicts for `pool_rows` output (simulation)."""
    delta = math.log1p(margin)
    se = np.where(r["se"] > 0, r["se"], np.finfo(float).tiny)
    low = stats.t.sf((r["mu"] + delta) / se, k - 1)
    high = stats.t.cdf((r["mu"] - delta) / se, k - 1)
    return verdict_codes(r["p"], np.maximum(low, high), r["mu"], alpha, better)
