"""Paired comparison of two arms on log-ratios: Hodges-Lehmann, signed-rank test, TOST, verdict.

Pair i holds one observation of each arm from the same block, so machine drift and block
effects cancel in d_i = log(candidate_i / baseline_i). With ``better="lower"`` (times), a
significantly negative d means the candidate is *faster*.

- Estimate: Hodges-Lehmann shift of d (median of Walsh averages), reported as
  ``100*(exp(hl)-1)`` percent, with the signed-rank interval at 1-alpha (see signedrank).
- Difference: two-sided Wilcoxon signed-rank p (scipy.stats.wilcoxon).
- Equivalence: two one-sided signed-rank tests (TOST) against +/-log(1+margin), i.e. the
  ratio lies in [1/(1+margin), 1+margin]; tost_p = max of the two one-sided p-values. The
  1-2*alpha signed-rank interval is reported alongside.
- Verdict: significant difference -> faster/slower (``within_margin`` says if the estimate is
  nevertheless inside the equivalence margin); else equivalence shown -> equivalent; else
  inconclusive. Fewer than ``MIN_UNITS`` units -> inconclusive, never an exception.
- ``blocks``: optional label per pair naming the higher-level unit it ran in (a VM boot).
  When labels repeat, each label's pairs are reduced to their Hodges-Lehmann shift and the
  test runs on those (Kalibera & Jones: the boot is the unit when boots differ; pooling
  would overstate confidence). Variance components are reported either way.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from hugelab.stats import signedrank
from hugelab.stats._util import MIN_UNITS, FloatArray, StatsInputError, jsonable, paired_arrays
from hugelab.stats.blocks import variance_components

Better = Literal["lower", "higher"]
VERDICTS = ("faster", "slower", "equivalent", "inconclusive")


def any_verdict_units(alpha: float) -> int:
    """The fewest units any verdict at `alpha` needs: MIN_UNITS, or more where even an
    equivalence's one-sided tests cannot reach alpha (7 at 0.01, 14 at 0.0001)."""
    return max(MIN_UNITS, signedrank.min_pairs_one_sided(alpha)) if 0 < alpha < 1 else MIN_UNITS


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing a candidate arm against a baseline arm (percent = candidate vs baseline)."""

    verdict: str
    better: str
    alpha: float
    margin: float
    n: int
    n_dropped: int
    unit: str
    n_units: int
    hl_log: float
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    ci_method: str
    p_value: float
    p_adjusted: float
    tost_p: float
    tost_p_adjusted: float
    tost_low_pct: float
    tost_high_pct: float
    within_margin: bool
    mean_ratio: float
    median_ratio: float
    trimmed_mean_ratio: float
    ratio_of_means: float
    design_effect: float | None
    pooling_warning: bool
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (non-finite numbers become None)."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out

    def with_adjusted(self, p_adjusted: float, tost_p_adjusted: float) -> Comparison:
        """Copy with multiplicity-adjusted p-values and the verdict they imply."""
        if self.n_units < MIN_UNITS:
            return replace(self, p_adjusted=p_adjusted, tost_p_adjusted=tost_p_adjusted)
        verdict = decide(p_adjusted, tost_p_adjusted, self.hl_log, self.alpha, self.better)
        return replace(
            self, p_adjusted=p_adjusted, tost_p_adjusted=tost_p_adjusted, verdict=verdict
        )


def pct(log_shift: float | FloatArray) -> Any:
    """Log-ratio shift -> percent change of candidate relative to baseline."""
    return 100.0 * np.expm1(log_shift)


def log_ratios(baseline: ArrayLike, candidate: ArrayLike) -> FloatArray:
    """d = log(candidate / baseline) for complete pairs (pairs with a NaN are dropped)."""
    b, c, _, _ = paired_arrays(baseline, candidate)
    return np.log(c) - np.log(b)


def check_args(better: str, alpha: float, margin: float) -> None:
    """The arguments every comparison shares, checked: StatsInputError when one is out of range."""
    if better not in ("lower", "higher"):
        raise StatsInputError(f"better must be 'lower' or 'higher', got {better!r}")
    if not 0.0 < alpha < 0.5:
        raise StatsInputError(f"alpha must lie in (0, 0.5), got {alpha}")
    if not margin > 0.0:
        raise StatsInputError(f"margin must be positive, got {margin}")


def verdict_codes(
    p: FloatArray, tost_p: FloatArray, hl: FloatArray, alpha: float, better: str
) -> np.ndarray:
    """Vectorised verdicts: see module docstring for the rule."""
    p, tost_p, hl = np.asarray(p), np.asarray(tost_p), np.asarray(hl)
    sign = -1.0 if better == "lower" else 1.0
    better_dir = np.sign(hl) * sign > 0
    worse_dir = np.sign(hl) * sign < 0
    out = np.full(p.shape, "inconclusive", dtype=object)
    out[tost_p < alpha] = "equivalent"
    sig = p < alpha
    out[sig & better_dir] = "faster"
    out[sig & worse_dir] = "slower"
    return out


def decide(p: float, tost_p: float, hl: float, alpha: float, better: str) -> str:
    """Verdict for one comparison."""
    return str(verdict_codes(np.array([p]), np.array([tost_p]), np.array([hl]), alpha, better)[0])


def analyse(d: FloatArray, *, alpha: float, margin: float) -> dict[str, Any]:
    """Vectorised core over rows of log-ratios d (experiments x units): estimates and p-values."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    delta = math.log1p(margin)
    hl, ((lo, hi), (tlo, thi)), method = signedrank.hl_and_intervals(d, (alpha, 2.0 * alpha))
    p = signedrank.pvalue(d)
    p_low = signedrank.pvalue(d + delta, "greater")
    p_high = signedrank.pvalue(d - delta, "less")
    tost_p = np.maximum(p_low, p_high)
    return {
        "hl": hl,
        "lo": lo,
        "hi": hi,
        "method": method,
        "tlo": tlo,
        "thi": thi,
        "p": p,
        "tost_p": tost_p,
    }


def verdicts(
    baseline: ArrayLike,
    candidate: ArrayLike,
    *,
    better: Better = "lower",
    alpha: float = 0.05,
    margin: float = 0.01,
) -> np.ndarray:
    """Verdicts for many experiments at once: rows of (experiments x pairs), no NaNs.

    Same rule as :func:`compare` without blocks; meant for simulation and validation.
    """
    check_args(better, alpha, margin)
    b = np.atleast_2d(np.asarray(baseline, dtype=float))
    c = np.atleast_2d(np.asarray(candidate, dtype=float))
    if b.shape != c.shape:
        raise StatsInputError(f"shapes differ: {b.shape} vs {c.shape}")
    if b.shape[1] < MIN_UNITS:
        return np.full(b.shape[0], "inconclusive", dtype=object)
    r = analyse(np.log(c) - np.log(b), alpha=alpha, margin=margin)
    return verdict_codes(r["p"], r["tost_p"], r["hl"], alpha, better)


def _ratio_summaries(b: FloatArray, c: FloatArray) -> dict[str, float]:
    if b.size == 0:
        nan = float("nan")
        return dict.fromkeys(
            ("mean_ratio", "median_ratio", "trimmed_mean_ratio", "ratio_of_means"), nan
        )
    ratio = c / b
    return {
        "mean_ratio": float(np.mean(ratio)),
        "median_ratio": float(np.median(ratio)),
        "trimmed_mean_ratio": float(stats.trim_mean(ratio, 0.2)),
        "ratio_of_means": float(np.mean(c) / np.mean(b)),
    }


def block_shifts(d: FloatArray, inverse: np.ndarray, k: int) -> FloatArray:
    """Hodges-Lehmann shift of each block's values (``inverse`` = block index 0..k-1 per value).

    Sorts by block once; blocks of equal size are stacked and estimated in one vectorised
    call, so the cost is O(n log n) plus one call per distinct block size.
    """
    order = np.argsort(inverse, kind="stable")
    ordered = d[order]
    sizes = np.bincount(inverse, minlength=k)
    starts = np.cumsum(sizes) - sizes
    out = np.empty(k)
    for size in np.unique(sizes):
        ids = np.flatnonzero(sizes == size)
        rows = ordered[starts[ids][:, None] + np.arange(size)]
        out[ids] = signedrank.hodges_lehmann(rows)
    return out


def _units(d: FloatArray, labels: np.ndarray | None) -> tuple[FloatArray, str, dict[str, Any]]:
    """Reduce pairs to analysis units (pairs, or per-block HL shifts when labels repeat)."""
    info: dict[str, Any] = {"design_effect": None, "pooling_warning": False, "notes": []}
    if labels is None or d.size == 0:
        return d, "pair", info
    uniq, inverse = np.unique(labels, return_inverse=True)
    if uniq.size == labels.size:
        return d, "pair", info
    vc = variance_components(d, labels)
    info["design_effect"] = vc.design_effect
    info["pooling_warning"] = vc.pooling_warning
    if vc.pooling_warning:
        info["notes"].append(vc.reading)
    per_block = block_shifts(d, inverse, uniq.size)
    info["notes"].append(
        f"{d.size} pairs in {uniq.size} blocks: each block's pairs reduced to their "
        "Hodges-Lehmann shift; the block is the unit of analysis"
    )
    return per_block, "block", info


_NAN = float("nan")
# analyse()'s answer for no unit at all: every figure unknown
_NONE: dict[str, Any] = {"hl": [_NAN], "lo": [_NAN], "hi": [_NAN], "method": "none",
                         "tlo": [_NAN], "thi": [_NAN], "p": [_NAN], "tost_p": [_NAN]}


def compare(
    baseline: ArrayLike,
    candidate: ArrayLike,
    *,
    better: Better = "lower",
    alpha: float = 0.05,
    margin: float = 0.01,
    blocks: ArrayLike | None = None,
) -> Comparison:
    """Compare paired observations of a candidate arm against a baseline arm.

    Pairs with a NaN in either arm are dropped (counted in ``n_dropped``); infinite or
    non-positive observations raise StatsInputError. Fewer than 6 units give "inconclusive".
    """
    check_args(better, alpha, margin)
    b, c, labels, n_dropped = paired_arrays(baseline, candidate, blocks)
    d = np.log(c) - np.log(b)
    units, unit, info = _units(d, labels)
    notes: list[str] = list(info["notes"])
    if n_dropped:
        notes.append(f"{n_dropped} pair(s) with missing values dropped")
    res = analyse(units[None, :], alpha=alpha, margin=margin) if units.size >= 1 else _NONE
    if units.size < MIN_UNITS:
        verdict = "inconclusive"
        notes.append(
            f"only {units.size} {unit}(s): at least {any_verdict_units(alpha)} are needed for "
            "any verdict"
        )
    else:
        verdict = decide(res["p"][0], res["tost_p"][0], res["hl"][0], alpha, better)
    hl = float(res["hl"][0])
    delta = math.log1p(margin)
    return Comparison(
        verdict=verdict,
        better=better,
        alpha=alpha,
        margin=margin,
        n=int(d.size),
        n_dropped=n_dropped,
        unit=unit,
        n_units=int(units.size),
        hl_log=hl,
        effect_pct=float(pct(hl)),
        ci_low_pct=float(pct(res["lo"][0])),
        ci_high_pct=float(pct(res["hi"][0])),
        ci_method=str(res["method"]),
        p_value=float(res["p"][0]),
        p_adjusted=float(res["p"][0]),
        tost_p=float(res["tost_p"][0]),
        tost_p_adjusted=float(res["tost_p"][0]),
        tost_low_pct=float(pct(res["tlo"][0])),
        tost_high_pct=float(pct(res["thi"][0])),
        within_margin=bool(abs(hl) < delta),
        design_effect=info["design_effect"],
        pooling_warning=bool(info["pooling_warning"]),
        notes=tuple(notes),
        **_ratio_summaries(b, c),
    )
