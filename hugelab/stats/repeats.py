"""Repeats of one experiment on one host, combined with the repeat as a random effect.

On a shared machine the effect itself moves between runs minutes apart (neighbours, the
hypervisor's backing of guest memory): Kalibera & Jones' execution level of variance. A single
run's interval describes that run's minutes, not the machine, so runs minutes apart can give
intervals that do not overlap. The remedy is the fleet's meta-analysis one level down: each
repeat r contributes its paired effect y_r (the Hodges-Lehmann shift of its block log-ratios)
and its variance v_r (from its 68.3% signed-rank interval, :func:`hugelab.stats.meta.
hl_estimates`), and the model is y_r ~ N(mu + u_r, v_r) with u_r ~ N(0, tau^2): mu is the
machine's effect and tau the spread between repeats. Pooling is :func:`hugelab.stats.meta.pool`
(Paule-Mandel tau^2, HKSJ interval with max(1, q*), t with R - 1 degrees of freedom), the same
code as a fleet's; the verdict is :func:`hugelab.stats.meta.verdict`.

Measured in tests/test_stats_repeats.py (2,000 simulations, run-level shifts with tau = 3%,
blocks' SD 2%, 10 blocks per repeat, 95% intervals): the across-repeat interval covers the
machine's effect 0.949 of the time with 5 repeats (Gaussian noise) and 0.943 with 8 (t3 noise);
a single run's own interval covers it 0.37 / 0.32, and pooling every block of every repeat as
one run (what ignoring the repeat level does) 0.52 / 0.51. Without run-level shifts the
across-repeat interval keeps its coverage and its false positives below 5%.

With 2 repeats the interval uses t_1 and is very wide: the honest answer for two runs. A
repeat with fewer than 3 pairs has no interval and is left out (a note says so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from hugelab.stats import meta, signedrank
from hugelab.stats._util import FloatArray, StatsInputError, jsonable
from hugelab.stats.paired import check_args, pct

DISAGREE_ALPHA = 0.05  # Cochran's Q: the repeats differ by more than their own intervals allow
BETWEEN_DOMINATES = 0.5  # I^2 above which more repeats, not more blocks, narrow the interval


def pairs_for_interval(alpha: float) -> int:
    """The fewest pairs for which a signed-rank interval at 1-alpha exists: with n pairs the
    smallest two-sided p-value is 2 / 2^n (6 pairs at 95%, 8 at 99%)."""
    return math.ceil(math.log2(2 / alpha))


@dataclass(frozen=True)
class RepeatEstimate:
    """One repeat's own paired effect (log scale) with its SE and its own 1-alpha interval."""

    repeat: int
    n: int
    estimate: float
    se: float
    ci_low: float
    ci_high: float

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = asdict(self)
        d.update(effect_pct=float(pct(self.estimate)), ci_low_pct=float(pct(self.ci_low)),
                 ci_high_pct=float(pct(self.ci_high)), se_pct=100.0 * self.se)
        out: dict[str, Any] = jsonable(d)
        return out


@dataclass(frozen=True)
class Replication:
    """The effect across repeats (the machine's), its spread between repeats, and each repeat's."""

    repeats: tuple[RepeatEstimate, ...]
    pooled: meta.Pooled
    verdict: str
    better: str
    margin: float
    disagree: bool  # Cochran's Q p < DISAGREE_ALPHA: the repeats differ beyond their intervals
    between_dominates: bool  # I^2 > BETWEEN_DOMINATES: plan repeats, not blocks
    notes: tuple[str, ...] = ()

    @property
    def tau_pct(self) -> float:
        return float(pct(self.pooled.tau))

    def reading(self) -> str:
        p = self.pooled
        lvl = f"{1 - p.alpha:.0%}"
        if p.k < 2:
            return "one usable repeat: nothing to combine"
        head = (f"across {p.k} repeats: {p.effect_pct:+.1f}% [{pct(p.ci_low):+.1f}, "
                f"{pct(p.ci_high):+.1f}] ({lvl}), tau between repeats {self.tau_pct:.1f}%")
        if self.disagree:
            return (head + f"; the repeats disagree beyond their own intervals (Q p = "
                    f"{p.q_p:.2g}): one run's interval describes its minutes, not the machine")
        return head + "; the repeats agree within their own intervals"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = jsonable({
            "repeats": [r.to_dict() for r in self.repeats], "pooled": self.pooled.to_dict(),
            "verdict": self.verdict, "better": self.better, "margin": self.margin,
            "disagree": self.disagree, "between_dominates": self.between_dominates,
            "tau_pct": self.tau_pct, "reading": self.reading(), "notes": list(self.notes)})
        return out


def estimate(d: ArrayLike, repeat: int = 0, *, alpha: float = 0.05) -> RepeatEstimate:
    """One repeat's Hodges-Lehmann shift of its paired log-ratios `d`, its SE (as a fleet's
    host's) and its own signed-rank 1-alpha interval; NaN SE and interval below 3 pairs."""
    x = np.asarray(d, dtype=float)
    x = x[np.isfinite(x)]
    nan = float("nan")
    if x.size == 0:
        return RepeatEstimate(repeat, 0, nan, nan, nan, nan)
    y, v = meta.hl_estimates(x[None, :])
    _, lo, hi, _ = signedrank.hl_and_interval(x[None, :], alpha)
    se = math.sqrt(v[0]) if np.isfinite(v[0]) else nan
    finite = np.isfinite(lo[0]) and np.isfinite(hi[0])
    return RepeatEstimate(repeat, int(x.size), float(y[0]), se,
                          float(lo[0]) if finite else nan, float(hi[0]) if finite else nan)


def combine(log_ratios: Sequence[ArrayLike], *, better: str = "lower", alpha: float = 0.05,
            margin: float = 0.01) -> Replication:
    """Combine repeats of one comparison: `log_ratios[r]` holds repeat r's paired block
    log-ratios (log candidate/baseline). Raises StatsInputError when no repeat is usable."""
    check_args(better, alpha, margin)
    ests = tuple(estimate(d, r, alpha=alpha) for r, d in enumerate(log_ratios))
    use = [e for e in ests if math.isfinite(e.se)]
    notes: list[str] = []
    if len(use) < len(ests):
        left = ", ".join(str(e.repeat + 1) for e in ests if not math.isfinite(e.se))
        notes.append(f"repeat(s) {left} left out: fewer than 3 pairs, no interval to weigh")
    if not use:
        raise StatsInputError("no repeat has the 3 pairs an interval needs")
    pooled = meta.pool([e.estimate for e in use], [e.se**2 for e in use], alpha=alpha)
    # meta speaks of hosts; here each pooled unit is a repeat (the JSON's pooled notes too)
    pooled = replace(pooled, notes=tuple(n.replace("host", "repeat") for n in pooled.notes))
    notes.extend(pooled.notes)
    disagree = len(use) >= 2 and pooled.q_p < DISAGREE_ALPHA
    dominates = len(use) >= 2 and pooled.i2 > BETWEEN_DOMINATES
    return Replication(ests, pooled, meta.verdict(pooled, better=better, margin=margin),
                       better, margin, bool(disagree), bool(dominates), tuple(notes))


def combine_rows(d: ArrayLike, *, alpha: float = 0.05) -> dict[str, FloatArray]:
    """Vectorised for simulation: `d` is (simulations x repeats x blocks) of log-ratios; the
    :func:`hugelab.stats.meta.pool_rows` output of each simulation's repeats."""
    x = np.asarray(d, dtype=float)
    if x.ndim != 3 or x.shape[1] < 2 or x.shape[2] < 3:
        raise StatsInputError("combine_rows needs (simulations, >= 2 repeats, >= 3 blocks)")
    y, v = meta.hl_estimates(x.reshape(-1, x.shape[2]))
    return meta.pool_rows(y.reshape(x.shape[:2]), v.reshape(x.shape[:2]), alpha=alpha)


def repeats_needed(tau2: float, v: float, effect: float, *, confidence: float, power: float,
                   max_repeats: int = 10_000) -> int | None:
    """The fewest repeats whose across-repeat test detects a relative `effect` (0.01 = 1%) at
    `confidence` with `power`, when repeats differ by tau^2 and each repeat's own estimate has
    variance v (log scale): the smallest R >= 2 with
    (t_{R-1}(1 - (1 - confidence)/2) + t_{R-1}(power)) sqrt((tau^2 + v) / R) <= |log(1 + effect)|.
    None when even `max_repeats` do not (an effect too small for the spread between runs)."""
    if not (0 < confidence < 1 and 0 < power < 1 and effect != 0 and tau2 >= 0 and v >= 0):
        raise StatsInputError("repeats_needed: confidence and power in (0, 1), effect != 0, "
                              "variances >= 0")
    r = np.arange(2, max_repeats + 1, dtype=float)
    crit = stats.t.isf((1 - confidence) / 2, r - 1) + stats.t.isf(1 - power, r - 1)
    ok = crit * np.sqrt((tau2 + v) / r) <= abs(math.log1p(effect))
    return int(r[np.argmax(ok)]) if ok.any() else None
