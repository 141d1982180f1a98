"""Start-slot adjustment of paired log-ratios (request-interleaved runs; issue 39).

In a request-interleaved block every arm's server runs at once, started one after another in
the block's order, and where a server stood in that order moves what it serves (PostgreSQL:
the server started second served 4.6 points more than the one started first, pooled over
three held-out runs). Balanced orders (experiment.model.balanced_orders) cancel that bias over
whole sets of orders, but not its variance: each block's log-ratio d_b = log(arm / baseline)
carries the difference of the two arms' slot effects.

The fix: fit y_{b,a} = block_b + arm_a + slot_{s(b,a)} + e_{b,a} by ordinary least squares on
the log values of every arm of every complete block (block effects removed by centring within
each block), and subtract each block's slot contrast s_hat(slot of arm) - s_hat(slot of
baseline) from its d_b. The adjusted d_b then go to the same signed-rank tests, intervals and
sequential looks as before.

The fit costs degrees of freedom and makes the adjusted d_b dependent: their spread
underestimates the true one by a factor f < 1 (about 0.93 at 17 blocks, 0.96 at 30, three
arms). f is computed exactly for the run's own design (the expected sum of squares of the
adjusted d_b about their mean for independent errors of equal variance, relative to the
unadjusted errors'), and the adjusted d_b are spread about their Hodges-Lehmann shift by
1 / sqrt(f): the shift stays, the interval and the tests' spread widen to match. Checked by
simulation in bench/slot_adjust_sim.py (false positives, coverage, `equivalent` rate, power).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from hugelab.stats import signedrank
from hugelab.stats._util import FloatArray

MIN_BLOCKS = 6  # complete blocks needed before slot effects are fitted
NOTE = "adjusted for start order"


@dataclass(frozen=True)
class SlotFit:
    """One run's slot effects and what the adjustment needs to correct the spread."""

    effects: FloatArray  # per start slot, log scale, slot 0 = 0
    blocks: NDArray[np.int64]  # row indices (into the caller's matrix) of the fitted blocks
    weights: FloatArray  # (fitted blocks, arms, slots - 1): each error's weight in s_hat
    cov: FloatArray  # (slots - 1, slots - 1): Var(s_hat) / error variance

    @property
    def effects_pct(self) -> list[float]:
        """Each slot's effect against slot 0, in %."""
        return [100 * math.expm1(float(e)) for e in self.effects]

    def sentence(self) -> str:
        """One line for the report: what was adjusted and by how much."""
        slots = ", ".join(f"{e:+.1f}%" for e in self.effects_pct)
        return (f"intervals {NOTE} (start slots 1 to {self.effects.size}: {slots}; fitted "
                f"on {self.blocks.size} complete blocks)")


def _design(slot: NDArray[np.int64], n_slots: int) -> FloatArray:
    """(R, B, A, p) arm and slot dummies (arm 0 and slot 0 the references)."""
    r, b, a = slot.shape
    x = np.zeros((r, b, a, (a - 1) + (n_slots - 1)))
    for k in range(1, a):
        x[:, :, k, k - 1] = 1.0
    for s in range(1, n_slots):
        x[..., a - 1 + s - 1] = slot == s
    return x


def fit_batch(y: ArrayLike, slot: ArrayLike, n_slots: int | None = None
              ) -> tuple[FloatArray, FloatArray, FloatArray, NDArray[np.bool_]]:
    """OLS of y (R, B, A: log values of R runs' complete blocks) on block, arm and slot
    (R, B, A: start slots 0..S-1). Returns per run the slot effects (R, S; slot 0 = 0), each
    error's weight in them (R, B, A, S - 1), their covariance over the error variance
    (R, S - 1, S - 1), and whether they are identifiable (full rank)."""
    yv = np.asarray(y, dtype=float)
    sv = np.asarray(slot, dtype=np.int64)
    s = int(sv.max()) + 1 if n_slots is None else n_slots
    a = yv.shape[2]
    x = _design(sv, s)
    xc = x - x.mean(axis=2, keepdims=True)
    yc = yv - yv.mean(axis=2, keepdims=True)
    xtx = np.einsum("rbap,rbaq->rpq", xc, xc)
    ok = np.linalg.matrix_rank(xtx) == xtx.shape[1]
    w = np.linalg.pinv(xtx)
    beta = np.einsum("rpq,rq->rp", w, np.einsum("rbap,rba->rp", xc, yc))
    effects = np.concatenate([np.zeros((yv.shape[0], 1)), beta[:, a - 1:]], axis=1)
    weights = np.einsum("rbap,rpq->rbaq", xc, w)[..., a - 1:]
    return effects, weights, w[:, a - 1:, a - 1:], ok


def spread_factor(arm_slot: NDArray[np.int64], base_slot: NDArray[np.int64],
                  h: FloatArray, cov: FloatArray) -> FloatArray:
    """f per run (R,): the expected sum of squares of the adjusted d about their mean over
    2 (B - 1) error variances, its value without the adjustment. arm_slot, base_slot (R, B):
    each block's two slots; h (R, B, S - 1): each block's arm weight less its baseline's in
    s_hat (0 for blocks outside the fit)."""
    n_minus = cov.shape[1]
    eye = np.eye(n_minus + 1)[:, 1:]  # slot -> its dummy row (slot 0: zeros)
    c = eye[arm_slot] - eye[base_slot]  # (R, B, S - 1)
    cc = c - c.mean(axis=1, keepdims=True)
    cross = np.einsum("rbs,rbs->r", cc, h)
    own = np.einsum("rbs,rbt,rst->r", cc, cc, cov)
    df2 = 2.0 * (arm_slot.shape[1] - 1)
    out: FloatArray = (df2 - 2.0 * cross + own) / df2
    return out


def spread(d: FloatArray, factor: FloatArray) -> FloatArray:
    """Rows of d spread about their Hodges-Lehmann shift by 1 / sqrt(factor)."""
    hl, _, _, _ = signedrank.hl_and_interval(d, 0.05)
    k = 1.0 / np.sqrt(np.clip(factor, 1e-6, None))
    out: FloatArray = hl[:, None] + k[:, None] * (d - hl[:, None])
    return out


def fit(log_values: ArrayLike, slots: ArrayLike) -> SlotFit | None:
    """One run's slot effects from its (blocks x arms) log values (NaN: no ok value) and
    start slots (-1: not recorded); None with fewer than MIN_BLOCKS complete blocks or
    effects the design cannot tell from the arms'."""
    y = np.asarray(log_values, dtype=float)
    s = np.asarray(slots, dtype=np.int64)
    complete = np.all(np.isfinite(y) & (s >= 0), axis=1)
    rows = np.flatnonzero(complete)
    if rows.size < MIN_BLOCKS or y.shape[1] < 2:
        return None
    effects, weights, cov, ok = fit_batch(y[None, rows], s[None, rows], y.shape[1])
    if not ok[0]:
        return None
    return SlotFit(effects[0], rows, weights[0], cov[0])


def adjust(log_values: ArrayLike, slots: ArrayLike, arm: int, base: int,
           found: SlotFit) -> FloatArray:
    """The adjusted, spread-corrected log-ratios of column `arm` against column `base`, for
    every block where both have a value (in block order)."""
    y = np.asarray(log_values, dtype=float)
    s = np.asarray(slots, dtype=np.int64)
    both = np.flatnonzero(np.isfinite(y[:, arm]) & np.isfinite(y[:, base]))
    d = y[both, arm] - y[both, base]
    known = (s[both, arm] >= 0) & (s[both, base] >= 0)  # a slot not recorded: no contrast
    sa, sb = np.where(known, s[both, arm], 0), np.where(known, s[both, base], 0)
    d = d - (found.effects[sa] - found.effects[sb])
    h = np.zeros((both.size, found.cov.shape[0]))
    where = {int(r): i for i, r in enumerate(found.blocks)}
    for k, row in enumerate(both):
        i = where.get(int(row))
        if i is not None:
            h[k] = found.weights[i, arm] - found.weights[i, base]
    if d.size < 2:
        return d
    factor = spread_factor(sa[None], sb[None], h[None], found.cov[None])
    return spread(d[None], factor)[0]
