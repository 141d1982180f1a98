"""What a sequential run can still reach within its budget (issue 39, item 2).

At a look with n of the budget's N blocks, the Hodges-Lehmann shift so far (theta, log scale)
and the per-block SD of that shift (s: hugelab.stats.plan.unit_sd's estimate, row by row)
predict the shift at the last look: with a flat prior on the true shift, theta_N ~ Normal(theta,
s^2 (1/n - 1/N)). The last look's tests then read, approximately, z = theta_N sqrt(N) / s:
- `equivalent` at margin m (log(1+m) = delta) when |theta_N| <= delta - e_K s / sqrt(N);
- `faster`/`slower` when |theta_N| >= c_K s / sqrt(N).
From this:
- p_equivalent, p_difference: the predictive probability of each by the last look;
- reachable margin: the smallest margin whose TOST passes at the last look with predictive
  probability `power` (folded-normal quantile of |theta_N| plus e_K s / sqrt(N));
- futile: neither `equivalent` at the run's margin nor `faster`/`slower` has predictive
  probability `gamma` or more: the budget is spent in vain, so the comparison stops
  `inconclusive` and says which margin the budget could reach. Stopping for futility never
  adds a false claim (it is non-binding), so alpha holds; its cost is the rare run that would
  have decided after all (measured by simulation in tests/test_stats_reach.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from hugelab.stats import signedrank
from hugelab.stats._util import FloatArray, as_1d, jsonable
from hugelab.stats.plan import ARE_NORMAL, MAD_TO_SD, MIN_PILOT
from hugelab.stats.sequential import SequentialPlan

POWER = 0.8  # the reachable margin: the TOST at the last look passes with this probability
GAMMA = 0.05  # futile below this predictive probability of either verdict
SD_LOW_Q, SD_HIGH_Q = 0.9, 0.25  # chi-square quantiles of sd_bounds


@dataclass(frozen=True)
class Reach:
    """What the rest of the budget can still decide, from the blocks so far."""

    n: int
    max_blocks: int
    effect_pct: float  # Hodges-Lehmann shift so far, %
    sd_pct: float  # per-block SD of that shift, %
    reachable_margin_pct: float  # equivalence within +/- this at the last look, P = power
    power: float
    p_equivalent: float  # by the last look, at the run's margin
    p_difference: float  # `faster` or `slower` by the last look
    reaches_margin: bool  # p_equivalent >= gamma
    futile: bool  # neither verdict has predictive probability gamma or more

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out

    def sentence(self, margin: float) -> str:
        """One line for the run's history and summary."""
        tail = (f"effect {self.effect_pct:+.2f}%, per-block SD {self.sd_pct:.2f}% after "
                f"{self.n} blocks")
        if self.n >= self.max_blocks:  # the last look: no forecast left
            return f"its {self.n} blocks reach ±{self.reachable_margin_pct:.1f}%: {tail}"
        if self.reaches_margin:
            return (f"±{100 * margin:g}% within reach in {self.max_blocks} blocks (P "
                    f"{self.p_equivalent:.2f} of `equivalent` by then)")
        return (f"cannot reach ±{100 * margin:g}% in {self.max_blocks} blocks (P "
                f"{self.p_equivalent:.2f}); it can reach ±{self.reachable_margin_pct:.1f}% "
                f"(P {self.power:g}): {tail}")


def unit_sds(d: FloatArray) -> FloatArray:
    """hugelab.stats.plan.unit_sd for each row (MAD/ARE and Lehmann-interval estimates, the
    larger), and each row's Hodges-Lehmann shift: (shift, sd)."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    med = np.median(d, axis=1, keepdims=True)
    from_mad = MAD_TO_SD * np.median(np.abs(d - med), axis=1) / math.sqrt(ARE_NORMAL)
    hl, lo, hi, _ = signedrank.hl_and_interval(d, 0.05)
    from_interval = math.sqrt(d.shape[1]) * (hi - lo) / (2.0 * stats.norm.isf(0.025))
    return np.vstack([hl, np.maximum(from_mad, from_interval)])


def sd_bounds(sd: ArrayLike, n: int) -> tuple[FloatArray, FloatArray]:
    """The per-block SD at its 90% lower and 75% upper confidence bounds (chi-square, n - 1
    degrees of freedom): the "cannot reach" statement takes the lower (it errs towards going
    on), the reachable margin the upper (it errs towards a wider margin)."""
    s = np.asarray(sd, dtype=float)
    df = max(n - 1, 1)
    return (s * math.sqrt(df / stats.chi2.ppf(SD_LOW_Q, df)),
            s * math.sqrt(df / stats.chi2.ppf(SD_HIGH_Q, df)))


def _predict(th: FloatArray, s: FloatArray, n: int, plan: SequentialPlan, power: float
             ) -> tuple[FloatArray, FloatArray, FloatArray]:
    big_n = plan.max_blocks
    se_last = s / math.sqrt(big_n)
    v = s * math.sqrt(max(1.0 / n - 1.0 / big_n, 0.0))
    e_last, c_last = plan.equivalence_bounds[-1], plan.bounds[-1]
    a = math.log1p(plan.margin) - e_last * se_last
    b = c_last * se_last
    if np.all(v == 0):  # the last look: nothing left to predict
        return np.expm1(th + e_last * se_last), (th <= a).astype(float), (th >= b).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_eq = np.where(a > 0, stats.norm.cdf((a - th) / v) - stats.norm.cdf((-a - th) / v), 0.0)
        p_diff = stats.norm.sf((b - th) / v) + stats.norm.cdf((-b - th) / v)
        folded = stats.foldnorm.ppf(power, th / v) * v
    return np.expm1(folded + e_last * se_last), p_eq, p_diff


def reach_arrays(theta: ArrayLike, sd: ArrayLike, n: int, plan: SequentialPlan,
                 power: float = POWER) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(reachable margin as a fraction, p_equivalent, p_difference) per (theta, sd) pair, the
    probabilities from the SD's lower bound, the margin from its upper (sd_bounds)."""
    th = np.abs(np.asarray(theta, dtype=float))
    low, high = sd_bounds(sd, n)
    _, p_eq, p_diff = _predict(th, np.broadcast_to(low, th.shape), n, plan, power)
    margin, _, _ = _predict(th, np.broadcast_to(high, th.shape), n, plan, power)
    return margin, p_eq, p_diff


def reach(d_so_far: ArrayLike, plan: SequentialPlan, power: float = POWER,
          gamma: float = GAMMA, shift_sd: tuple[float, float] | None = None) -> Reach | None:
    """What the budget can reach from these paired log-ratios; None below 10 blocks.
    `shift_sd`: the shift so far and its per-block SD from another estimator (a weighted
    look's: hugelab.stats.weighted), in place of the Hodges-Lehmann ones."""
    d = as_1d(d_so_far, "d_so_far")
    d = d[~np.isnan(d)]
    if d.size < MIN_PILOT:
        return None
    theta, sd = shift_sd if shift_sd is not None else \
        (float(x[0]) for x in unit_sds(d[None, :]))
    n = min(int(d.size), plan.max_blocks)
    m, p_eq, p_diff = (float(x) for x in reach_arrays(theta, sd, n, plan, power))
    return Reach(n=int(d.size), max_blocks=plan.max_blocks, effect_pct=100 * math.expm1(theta),
                 sd_pct=100 * sd, reachable_margin_pct=100 * m, power=power,
                 p_equivalent=p_eq, p_difference=p_diff, reaches_margin=p_eq >= gamma,
                 futile=p_eq < gamma and p_diff < gamma)


@dataclass(frozen=True)
class Replay:
    """A sequential plan with futility stops replayed on many simulated runs (one a row)."""

    decision: np.ndarray  # faster / slower / equivalent / inconclusive
    look: FloatArray  # the look it stopped at
    blocks: FloatArray  # blocks it used
    futile: np.ndarray  # stopped early because neither verdict was reachable
    said_at: FloatArray  # look of its first "cannot reach the margin" (nan: never said)
    said_margin: FloatArray  # the reachable margin it named then (fraction)
    kept: np.ndarray  # that margin's TOST passed at the budget's end (all N blocks)
    plain: np.ndarray  # the decision of the same plan without futility stops


def _tost(d: FloatArray, margin: FloatArray, bound: float) -> np.ndarray:
    delta = np.log1p(margin)[:, None]
    return (signedrank.z_statistic(d + delta) >= bound) & \
        (signedrank.z_statistic(d - delta) <= -bound)


def look_stops(part: FloatArray, bound: float, eq_bound: float, plan: SequentialPlan
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One look over many runs at once (rows of `part`, each run's log-ratios so far), as
    boolean masks: where the efficacy boundary is crossed (|z| >= bound), where that crossing
    is the better direction (plan.better), and where equivalence within the plan's margin
    passes (both one-sided tests against eq_bound)."""
    delta = math.log1p(plan.margin)
    z = signedrank.z_statistic(part)
    eq = (signedrank.z_statistic(part + delta) >= eq_bound) & \
        (signedrank.z_statistic(part - delta) <= -eq_bound)
    good = (z < 0) if plan.better == "lower" else (z > 0)
    return np.abs(z) >= bound, good, eq


def replay(d: ArrayLike, plan: SequentialPlan, gamma: float = GAMMA,
           power: float = POWER) -> Replay:
    """run_sequential with this module's statements and futility stops, for simulation."""
    from hugelab.stats.sequential import run_sequential
    d = np.atleast_2d(np.asarray(d, dtype=float))[:, : plan.max_blocks]
    rows = d.shape[0]
    plain, _ = run_sequential(d, plan)
    decision = np.full(rows, "inconclusive", dtype=object)
    look = np.full(rows, float(plan.looks))
    futile = np.zeros(rows, dtype=bool)
    said_at, said_margin = np.full(rows, np.nan), np.full(rows, np.nan)
    live = np.ones(rows, dtype=bool)
    for k, (size, c, e) in enumerate(zip(plan.look_sizes, plan.bounds,
                                         plan.equivalence_bounds, strict=True), start=1):
        part = d[:, :size]
        crossed, good, eq = look_stops(part, c, e, plan)
        hit = live & crossed
        decision[hit] = np.where(good[hit], "faster", "slower")
        decision[live & ~hit & eq] = "equivalent"
        stopped = hit | (live & eq)
        look[stopped & live] = k
        live &= ~stopped
        if size < MIN_PILOT or not live.any():
            continue
        idx = np.flatnonzero(live)
        theta, sd = unit_sds(part[idx])
        m, p_eq, p_diff = reach_arrays(theta, sd, size, plan, power)
        first = (p_eq < gamma) & np.isnan(said_at[idx])
        said_at[idx[first]], said_margin[idx[first]] = k, m[first]
        quit_now = idx[(p_eq < gamma) & (p_diff < gamma) & (k < plan.looks)]
        futile[quit_now], look[quit_now] = True, k
        live[quit_now] = False
    said = ~np.isnan(said_at)
    kept = np.zeros(rows, dtype=bool)
    if said.any():
        kept[said] = _tost(d[said], said_margin[said], plan.equivalence_bounds[-1])
    blocks = np.asarray(plan.look_sizes, dtype=float)[look.astype(int) - 1]
    return Replay(decision, look, blocks, futile, said_at, said_margin, kept, plain)
