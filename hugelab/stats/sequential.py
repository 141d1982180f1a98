"""Group-sequential looks with Lan-DeMets O'Brien-Fleming-type alpha spending.

Spending function: each side spends alpha/2 with the Lan-DeMets O'Brien-Fleming form
alpha_side(t) = 2 - 2 * Phi(z_{1-alpha/4} / sqrt(t)) at information fraction t = n_k / n_max
(the convention of ldbounds / gsDesign; K=5, alpha=0.05 gives 4.877, 3.357, 2.680, 2.290, 2.031). Boundaries c_k on the z scale are found by the recursive numerical
integration of Armitage, McPherson & Rowe (Jennison & Turnbull, ch. 19): the density of the
score B(t_k) = Z_k sqrt(t_k) on the continuation region is carried from look to look on a
fine grid (trapezoid rule), and c_k solves P(exit at look k) = alpha(t_k) - alpha(t_{k-1}) in
log space, so 99.99% designs work too.

At each look the statistic is the normal-approximation signed-rank z of the paired
log-ratios so far (scipy, zeros dropped, tie-corrected). Stops:
- efficacy: |z| >= c_k  -> "faster"/"slower";
- equivalence: both one-sided signed-rank z against +/-log(1+margin) pass e_k -> "equivalent"
  (TOST: each side a one-sided test at alpha, so e_k are the boundaries that spend alpha on
  one side, those of a two-sided 2 x alpha design; the efficacy boundaries c_k spend alpha/2
  a side and would test each side at alpha/2, twice as strict as TOST asks);
- futility (non-binding, only with ``target_effect``): conditional power to reach the final
  boundary under the target effect below ``futility_cp`` -> "inconclusive";
- last look without a stop -> "inconclusive".
Non-binding futility and equivalence stops never add a false "faster"/"slower" claim.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, stats

from hugelab.stats import signedrank, weighted
from hugelab.stats._util import FloatArray, StatsInputError, as_1d, jsonable
from hugelab.stats.plan import unit_sd

GRID = 2001


@dataclass(frozen=True)
class SequentialPlan:
    """A pre-declared group-sequential design."""

    max_blocks: int
    looks: int
    alpha: float
    margin: float
    better: str
    look_sizes: tuple[int, ...]
    fractions: tuple[float, ...]
    bounds: tuple[float, ...]
    alpha_spent: tuple[float, ...]
    equivalence_bounds: tuple[float, ...]
    target_effect: float | None
    futility_cp: float
    truncated_from: int | None = None  # a time budget ended it early: the planned most blocks

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out


@dataclass(frozen=True)
class SequentialDecision:
    """What to do after a look: "continue" or a verdict, and why."""

    decision: str
    look: int
    n: int
    z: float
    bound: float
    stopped: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out


def obf_spending(t: FloatArray | float, alpha: float) -> FloatArray:
    """Lan-DeMets O'Brien-Fleming-type cumulative alpha spent (both sides) at fraction t."""
    t = np.asarray(t, dtype=float)
    z = stats.norm.isf(alpha / 4.0)
    with np.errstate(divide="ignore"):
        return np.where(t > 0, 4.0 * stats.norm.sf(z / np.sqrt(np.where(t > 0, t, 1.0))), 0.0)


def max_signed_rank_z(n: int) -> float:
    """The largest |z| of the signed-rank statistic with n nonzero pairs (all of one sign)."""
    return math.sqrt(1.5 * n * (n + 1) / (2 * n + 1))


def look_schedule(max_blocks: int, alpha: float, every: int = 0) -> tuple[int, ...]:
    """An error-spending schedule with many looks: one every ``every`` blocks (0: about 6
    looks in all, at least one a block apart) from the first block count at which the signed-rank z
    can reach that look's equivalence boundary (OBF spending of 2 x alpha, as
    sequential_plan's), the last at ``max_blocks``. Earlier looks could never stop; under
    OBF-type spending the later ones cost the last boundary little (see docs/statistics.md)."""
    if max_blocks < 6:
        raise StatsInputError(f"a sequential run needs at least 6 blocks, got {max_blocks}")
    first = 6
    while first < max_blocks and max_signed_rank_z(first) < float(
            stats.norm.isf(obf_spending(first / max_blocks, 2.0 * alpha) / 2.0)):
        first += 1
    step = every if every > 0 else max(1, math.ceil((max_blocks - first) / 5))
    sizes = [n for n in range(first, max_blocks, step) if max_blocks - n >= step / 2]
    return (*sizes, max_blocks)


def _exit_prob(x: FloatArray, f: FloatArray, b: float, sigma: float) -> float:
    tail = stats.norm.sf((b - x) / sigma) + stats.norm.cdf((-b - x) / sigma)
    return float(np.trapezoid(f * tail, x))


def _log_gap(
    c: float, x: FloatArray, f: FloatArray, sqrt_t: float, sigma: float, log_target: float
) -> float:
    return math.log(max(_exit_prob(x, f, c * sqrt_t, sigma), 1e-320)) - log_target


def boundaries(fractions: ArrayLike, alpha: float, spend_all: bool = False
               ) -> tuple[FloatArray, FloatArray]:
    """Two-sided z boundaries and cumulative alpha spent for the given information fractions;
    `spend_all`: the last look spends whatever alpha is left (a final look that comes before
    the planned most blocks, Lan & DeMets' rule for an analysis cut short)."""
    t = as_1d(fractions, "fractions")
    bounds, spent = _boundaries(tuple(float(x) for x in t), float(alpha), spend_all)
    return bounds.copy(), spent.copy()


@functools.lru_cache(maxsize=64)
def _boundaries(fractions: tuple[float, ...], alpha: float, spend_all: bool = False
                ) -> tuple[FloatArray, FloatArray]:
    """boundaries(), kept: a run's stopper and a simulation ask for the same design again.
    The boundary of a look depends only on the looks before it, so cutting a design short
    leaves its earlier boundaries as they were."""
    t = np.asarray(fractions)
    if np.any(np.diff(t) <= 0) or t[0] <= 0 or t[-1] > 1 + 1e-12:
        raise StatsInputError("information fractions must increase within (0, 1]")
    spent = obf_spending(t, alpha)
    if spend_all:
        spent[-1] = alpha
    bounds = np.empty(t.size)
    bounds[0] = stats.norm.isf(max(spent[0], 1e-300) / 2.0)
    b1 = bounds[0] * math.sqrt(t[0])
    x = np.linspace(-b1, b1, GRID)
    f = stats.norm.pdf(x, scale=math.sqrt(t[0]))
    for k in range(1, t.size):
        sigma = math.sqrt(t[k] - t[k - 1])
        inc = max(spent[k] - spent[k - 1], 1e-300)

        bounds[k] = optimize.brentq(
            _log_gap, 0.1, 40.0, args=(x, f, math.sqrt(t[k]), sigma, math.log(inc)), xtol=1e-10
        )
        bk = bounds[k] * math.sqrt(t[k])
        y = np.linspace(-bk, bk, GRID)
        kernel = stats.norm.pdf((y[:, None] - x[None, :]) / sigma) / sigma
        f = np.trapezoid(kernel * f[None, :], x, axis=1)
        x = y
    return bounds, spent


def sequential_plan(
    max_blocks: int,
    *,
    looks: int = 5,
    alpha: float = 0.05,
    margin: float = 0.01,
    better: str = "lower",
    target_effect: float | None = None,
    futility_cp: float = 0.05,
    look_sizes: Sequence[int] | None = None,
) -> SequentialPlan:
    """Looks (by blocks) up to ``max_blocks`` with OBF-type spending: ``looks`` equally spaced
    ones, or those at ``look_sizes`` (increasing, the last ``max_blocks``; see look_schedule)."""
    if look_sizes is not None:
        sizes = np.asarray(look_sizes, dtype=int)
        if sizes.size < 1 or sizes[0] < 6 or np.any(np.diff(sizes) <= 0) or \
                sizes[-1] != max_blocks:
            raise StatsInputError(f"look sizes must increase from 6 or more blocks to "
                                  f"{max_blocks}, got {list(look_sizes)}")
        looks = int(sizes.size)
    elif looks < 1 or max_blocks < 6 * looks:
        raise StatsInputError(
            f"need looks >= 1 and at least 6 blocks per look, got {looks} looks, {max_blocks} blocks"
        )
    else:
        sizes = np.round(np.linspace(max_blocks / looks, max_blocks, looks)).astype(int)
    if not 0.0 < alpha < 0.5:
        raise StatsInputError(f"alpha must lie in (0, 0.5), got {alpha}")
    if better not in ("lower", "higher"):
        raise StatsInputError(f"better must be 'lower' or 'higher', got {better!r}")
    fractions = sizes / max_blocks
    bounds, spent = boundaries(fractions, alpha)
    equivalence, _ = boundaries(fractions, 2.0 * alpha)
    return SequentialPlan(
        max_blocks=max_blocks,
        looks=looks,
        alpha=alpha,
        margin=margin,
        better=better,
        look_sizes=tuple(int(s) for s in sizes),
        fractions=tuple(float(f) for f in fractions),
        bounds=tuple(float(b) for b in bounds),
        alpha_spent=tuple(float(s) for s in spent),
        equivalence_bounds=tuple(float(e) for e in equivalence),
        target_effect=target_effect,
        futility_cp=futility_cp,
    )


def truncated(plan: SequentialPlan, looks_done: int, at_blocks: int) -> SequentialPlan:
    """The plan cut short: its first `looks_done` looks as they were, then a last look at
    `at_blocks` (after the last of those, before the planned most) that spends all the alpha
    left, on both the efficacy and the equivalence scale. Alpha holds when the cut does not
    depend on the data (a time budget's: block times, not block values)."""
    if not 0 <= looks_done < plan.looks or at_blocks >= plan.max_blocks or \
            (looks_done and at_blocks <= plan.look_sizes[looks_done - 1]) or at_blocks < 1:
        raise StatsInputError(f"cannot cut a plan of looks {list(plan.look_sizes)} after look "
                              f"{looks_done} at {at_blocks} blocks")
    planned = plan.truncated_from or plan.max_blocks
    sizes = (*plan.look_sizes[:looks_done], at_blocks)
    fractions = tuple(n / planned for n in sizes)
    bounds, spent = boundaries(fractions, plan.alpha, spend_all=True)
    equivalence, _ = boundaries(fractions, 2.0 * plan.alpha, spend_all=True)
    return replace(plan, max_blocks=at_blocks, looks=len(sizes), look_sizes=sizes,
                   fractions=fractions, bounds=tuple(float(b) for b in bounds),
                   alpha_spent=tuple(float(x) for x in spent),
                   equivalence_bounds=tuple(float(e) for e in equivalence),
                   truncated_from=planned)


def _direction(z: float, better: str) -> str:
    return "faster" if (z < 0) == (better == "lower") else "slower"


def _conditional_power(d: FloatArray, z: float, look: int, plan: SequentialPlan) -> float:
    """P(|Z_final| >= c_K | data so far) if the true shift is the target effect."""
    assert plan.target_effect is not None
    t = plan.fractions[look - 1]
    if t >= 1.0 or d.size < 10:
        return 1.0
    theta = abs(math.log1p(plan.target_effect)) * math.sqrt(plan.max_blocks) / unit_sd(d)
    theta *= 1.0 if z >= 0 else -1.0
    b_now = z * math.sqrt(t)
    c = plan.bounds[-1]
    mean = b_now + theta * (1.0 - t)
    sd = math.sqrt(1.0 - t)
    return float(stats.norm.sf((c - mean) / sd) + stats.norm.cdf((-c - mean) / sd))


def _look_z(d: FloatArray, se: FloatArray | None, delta: float, e: float
            ) -> tuple[float, bool]:
    """z against 0 and whether both one-sided tests against -/+delta pass at e: signed-rank,
    or with `se` the trials weighted by their own SEs (hugelab.stats.weighted)."""
    if se is not None:
        x, s2 = weighted.as_rows(d, se)
        zs, eq = weighted.tests(x, s2, delta, e)
        return float(zs[0]), bool(eq[0])
    z = float(signedrank.z_statistic(d[None, :])[0])
    z_low = float(signedrank.z_statistic(d[None, :] + delta)[0])
    z_high = float(signedrank.z_statistic(d[None, :] - delta)[0])
    return z, z_low >= e and z_high <= -e


def sequential_decision(d_so_far: ArrayLike, look: int, plan: SequentialPlan,
                        se: ArrayLike | None = None) -> SequentialDecision:
    """Decide at look ``look`` (1-based) from all paired log-ratios gathered so far; with
    ``se`` (each log-ratio's own standard error) the trials are weighted by them
    (hugelab.stats.weighted) instead of ranked.

    The design's alpha holds when each look comes at its planned size (plan.look_sizes);
    NaNs are dropped (with their SEs).
    """
    if not 1 <= look <= plan.looks:
        raise StatsInputError(f"look must lie in 1..{plan.looks}, got {look}")
    d = as_1d(d_so_far, "d_so_far")
    s = None if se is None else np.asarray(se, dtype=float).ravel()
    if s is not None and s.shape != d.shape:
        raise StatsInputError(f"{d.size} log-ratios but {s.size} standard errors")
    keep = ~np.isnan(d) if s is None else ~(np.isnan(d) | np.isnan(s))
    d = d[keep]
    if d.size == 0:
        raise StatsInputError("no paired log-ratios yet")
    c, e = plan.bounds[look - 1], plan.equivalence_bounds[look - 1]
    z, equivalent = _look_z(d, None if s is None else s[keep], math.log1p(plan.margin), e)

    def out(decision: str, stopped: bool, reason: str) -> SequentialDecision:
        return SequentialDecision(decision, look, int(d.size), z, c, stopped, reason)

    if abs(z) >= c:
        return out(_direction(z, plan.better), True, f"|z| = {abs(z):.2f} crossed {c:.2f}")
    if equivalent:
        return out(
            "equivalent", True, f"both one-sided tests within +/-{plan.margin:.1%} crossed {e:.2f}"
        )
    if look == plan.looks:
        return out("inconclusive", True, "last look reached without crossing a boundary")
    if plan.target_effect is not None:
        cp = _conditional_power(d, z, look, plan)
        if cp < plan.futility_cp:
            return out("inconclusive", True, f"futile: conditional power {cp:.3f}")
    return out("continue", False, f"|z| = {abs(z):.2f} below {c:.2f}")


def run_sequential(d: ArrayLike, plan: SequentialPlan) -> tuple[np.ndarray, FloatArray]:
    """Replay the plan on many experiments at once: rows of d hold max_blocks log-ratios.

    Returns (decision per row, look at which each row stopped). Futility is not replayed.
    """
    d = np.atleast_2d(np.asarray(d, dtype=float))
    if d.shape[1] < plan.max_blocks:
        raise StatsInputError(f"rows need {plan.max_blocks} values, got {d.shape[1]}")
    delta = math.log1p(plan.margin)

    def signed_rank(size: int, e: float) -> tuple[FloatArray, np.ndarray]:
        part = d[:, :size]
        eq = (signedrank.z_statistic(part + delta) >= e) & (
            signedrank.z_statistic(part - delta) <= -e
        )
        return signedrank.z_statistic(part), eq

    return replay(d.shape[0], plan, signed_rank)


def run_weighted(d: ArrayLike, se: ArrayLike, plan: SequentialPlan
                 ) -> tuple[np.ndarray, FloatArray]:
    """run_sequential with the trials weighted by their own SEs (rows of `se` beside those of
    d; hugelab.stats.weighted), for simulation."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    s2 = np.atleast_2d(np.asarray(se, dtype=float)) ** 2
    if d.shape[1] < plan.max_blocks or s2.shape != d.shape:
        raise StatsInputError(f"rows need {plan.max_blocks} values and as many SEs")
    delta = math.log1p(plan.margin)

    def trial_weighted(size: int, e: float) -> tuple[FloatArray, np.ndarray]:
        return weighted.tests(d[:, :size], s2[:, :size], delta, e)

    return replay(d.shape[0], plan, trial_weighted)


def replay(rows: int, plan: SequentialPlan,
           statistic: Callable[[int, float], tuple[FloatArray, np.ndarray]]
           ) -> tuple[np.ndarray, FloatArray]:
    """The plan's looks over `rows` experiments at once: at each look `statistic(blocks,
    equivalence bound)` gives every row's z and whether its equivalence tests pass; |z| at the
    efficacy bound stops a row `faster`/`slower`, else a pass stops it `equivalent`. Returns
    (decision per row, the look each stopped at). run_sequential's, and a simulation's of
    another statistic (bench/weights_sim.py)."""
    decision = np.full(rows, "inconclusive", dtype=object)
    stop = np.full(rows, plan.looks, dtype=float)
    live = np.ones(rows, dtype=bool)
    looks = zip(plan.look_sizes, plan.bounds, plan.equivalence_bounds, strict=True)
    for k, (size, c, e) in enumerate(looks, start=1):
        z, eq = statistic(size, e)
        good = (z < 0) if plan.better == "lower" else (z > 0)
        hit = live & (np.abs(z) >= c)
        decision[hit & good] = "faster"
        decision[hit & ~good] = "slower"
        equiv = live & ~hit & eq
        decision[equiv] = "equivalent"
        stopped = hit | equiv
        stop[stopped] = k
        live &= ~stopped
    return decision, stop
