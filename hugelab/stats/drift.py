"""Drift of the effect itself over a run: did candidate vs baseline change between early and late?

Pairing cancels drift that hits both arms alike (d_i = log(candidate_i / baseline_i) does not
move when the machine slows down for everyone), but not drift in the *effect*: THP gains that
shrink as memory fragments over a long run, a compaction storm in the second half. Then the
overall Hodges-Lehmann estimate averages over a moving target.

Two rank-based checks on the paired log-ratios in run order, combined by Bonferroni:

- Trend: Spearman rank correlation of d with run order, two-sided p from the t approximation
  (identical to :func:`scipy.stats.spearmanr`). Sensitive to gradual change.
- Split: the run cut into ``segments`` consecutive segments of (nearly) equal size (default 3,
  thirds); the first and the last segment compared with a two-sided Mann-Whitney U test
  (:func:`scipy.stats.mannwhitneyu`, its automatic exact / asymptotic choice). Sensitive to a
  step. The effect in every segment is reported as its Hodges-Lehmann shift in percent.

``drifting`` is ``min(2 * trend_p, 2 * split_p) < alpha``. Both tests only assume that under no
drift the d_i are exchangeable over the run, so heavy tails and drift common to both arms do
not raise false alarms (validated by simulation in tests/test_stats_drift.py). Fewer than
``MIN_PAIRS`` pairs (or fewer than ``MIN_PER_SEGMENT`` per segment) give a result with
``checked=False`` and says so; never an exception for too little data.

Power, for planning: against an effect moving linearly from -6% to -2% over 100 pairs with
Gaussian noise of SD 3.3% on d, the combined check at alpha 0.01 detects drift in ~78% of runs
(the parametric regression slope t-test at the same Bonferroni level: ~79%; the information in
100 such pairs is the limit, not the rank tests). With heavy-tailed noise of the same SD the rank
tests detect it in ~97%.

Vectorised over rows (experiments x pairs) in :func:`drift_pvalues` for simulations; the
O(n log n) cost is dominated by ranking and the segments' Hodges-Lehmann selections (about
0.2 s at 250,000 pairs).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from hugelab.stats import signedrank
from hugelab.stats._util import FloatArray, StatsInputError, as_1d, jsonable

MIN_PAIRS = 12
MIN_PER_SEGMENT = 4
DEFAULT_SEGMENTS = 3
N_TESTS = 2  # Bonferroni family: trend and split
METHOD = ("Spearman rank correlation with run order (t approximation) and Mann-Whitney U of the "
          "first vs the last segment; Bonferroni over the two")
_PART = {2: "half", 3: "third", 4: "quarter", 5: "fifth"}


@dataclass(frozen=True)
class Drift:
    """Whether the paired effect changed over the run, with the effect per segment (percent)."""

    n: int
    alpha: float
    segments: int
    checked: bool
    drifting: bool
    rho: float
    trend_p: float
    split_p: float
    p_value: float  # Bonferroni over trend and split: min(1, 2 * min(trend_p, split_p))
    first_pct: float
    last_pct: float
    change_pct: float  # last - first, percentage points
    segment_pct: tuple[float, ...]
    segment_sizes: tuple[int, ...]
    method: str
    reading: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (non-finite numbers become None)."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out


def _spearman_p(d: FloatArray, x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Spearman rho of each row of d with x (already ranks, centred) and its two-sided p."""
    n = d.shape[1]
    r = stats.rankdata(d, axis=1)
    r -= r.mean(axis=1, keepdims=True)
    den = np.sqrt(np.einsum("ij,ij->i", r, r) * float(x @ x))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.clip((r @ x) / den, -1.0, 1.0)
        t = rho * np.sqrt((n - 2) / ((1.0 - rho) * (1.0 + rho)))
    p = 2.0 * stats.t.sf(np.abs(t), n - 2)
    p = np.where(np.isnan(rho), 1.0, p)  # constant d: no evidence of a trend
    return rho, p


def segment_bounds(n: int, segments: int) -> NDArray[np.int64]:
    """Start index of each of ``segments`` consecutive, nearly equal segments, plus n."""
    return np.array([k * n // segments for k in range(segments + 1)], dtype=np.int64)


def _check_segments(segments: int | None) -> int:
    k = DEFAULT_SEGMENTS if segments is None else int(segments)
    if k < 2:
        raise StatsInputError(f"segments must be at least 2, got {segments}")
    return k


def min_pairs(segments: int | None = None) -> int:
    """Fewest pairs for which drift is checked with ``segments`` segments."""
    return max(MIN_PAIRS, MIN_PER_SEGMENT * _check_segments(segments))


def drift_pvalues(
    d: ArrayLike, order: ArrayLike | None = None, *, segments: int | None = None
) -> dict[str, FloatArray]:
    """Trend and split p-values for each row of d (experiments x pairs, run order, no NaNs).

    ``order`` (one per column) gives the run position of each column; columns are sorted by it.
    Returns rho, trend_p, split_p and p (Bonferroni), one value per row.
    """
    k = _check_segments(segments)
    d = np.atleast_2d(np.asarray(d, dtype=float))
    n = d.shape[1]
    if n < min_pairs(k):
        raise StatsInputError(f"need at least {min_pairs(k)} pairs, got {n}")
    pos = np.arange(n, dtype=float)
    if order is not None:
        o = as_1d(order, "order")
        idx = np.argsort(o, kind="stable")
        d, pos = d[:, idx], stats.rankdata(o[idx])
    x = pos - pos.mean()
    rho, trend_p = _spearman_p(d, x)
    cut = segment_bounds(n, k)
    split = stats.mannwhitneyu(d[:, : cut[1]], d[:, cut[-2] :], axis=1, alternative="two-sided")
    split_p = np.where(np.isnan(split.pvalue), 1.0, split.pvalue)
    p = np.minimum(1.0, N_TESTS * np.minimum(trend_p, split_p))
    return {"rho": rho, "trend_p": trend_p, "split_p": split_p, "p": p}


def _fmt_p(p: float) -> str:
    if p == 0:
        return "<1e-300"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}"


def part_name(k: int) -> str:
    """"third" for 3 segments, "half", "quarter", "fifth"; "of k segments" beyond."""
    return _PART.get(k, f"of {k} segments")


def _reading(dr: dict[str, Any]) -> str:
    part = part_name(dr["segments"])
    seg = (f"{dr['first_pct']:+.1f}% in the first {part}, {dr['last_pct']:+.1f}% in the last "
           f"(p = {_fmt_p(dr['p_value'])})")
    if dr["drifting"]:
        return (f"the effect changed during the run: {seg}; the overall estimate averages over "
                "a moving target: rerun, or report the segments")
    return f"no change of the effect during the run detected: {seg}"


def _pct(log_shift: float) -> float:
    return float(100.0 * math.expm1(log_shift))


def _insufficient(n: int, alpha: float, k: int) -> Drift:
    nan = float("nan")
    return Drift(n=n, alpha=alpha, segments=k, checked=False, drifting=False, rho=nan,
                 trend_p=nan, split_p=nan, p_value=nan, first_pct=nan, last_pct=nan,
                 change_pct=nan, segment_pct=(), segment_sizes=(), method=METHOD,
                 reading=f"not enough pairs to check drift ({n}; at least {min_pairs(k)} needed)")


def effect_drift(
    d: ArrayLike,
    order: ArrayLike | None = None,
    *,
    alpha: float = 0.01,
    segments: int | None = None,
) -> Drift:
    """Check whether the paired effect (log-ratios ``d``) changed over the run.

    ``order``: run position of each pair (block index, time); pairs are sorted by it (stable),
    and taken as given when None. Pairs whose d or order is NaN are dropped; infinite d raise.
    """
    if not 0.0 < alpha < 1.0:
        raise StatsInputError(f"alpha must lie in (0, 1), got {alpha}")
    k = _check_segments(segments)
    x = as_1d(d, "d")
    o = np.arange(x.size, dtype=float) if order is None else as_1d(order, "order")
    if o.shape != x.shape:
        raise StatsInputError(f"order must give one position per pair: {o.shape} vs {x.shape}")
    keep = ~(np.isnan(x) | np.isnan(o))
    x, o = x[keep], o[keep]
    if np.any(np.isinf(x)):
        raise StatsInputError("log-ratios must be finite (found inf)")
    if x.size < min_pairs(k):
        return _insufficient(int(x.size), alpha, k)
    idx = np.argsort(o, kind="stable")
    x, o = x[idx], o[idx]
    r = drift_pvalues(x, o, segments=k)
    cut = segment_bounds(x.size, k)
    hl = [float(signedrank.hodges_lehmann(x[None, a:b])[0])
          for a, b in zip(cut[:-1], cut[1:], strict=True)]
    seg = tuple(_pct(h) for h in hl)
    fields: dict[str, Any] = {
        "n": int(x.size), "alpha": alpha, "segments": k, "checked": True,
        "drifting": bool(r["p"][0] < alpha), "rho": float(r["rho"][0]),
        "trend_p": float(r["trend_p"][0]), "split_p": float(r["split_p"][0]),
        "p_value": float(r["p"][0]), "first_pct": seg[0], "last_pct": seg[-1],
        "change_pct": seg[-1] - seg[0], "segment_pct": seg,
        "segment_sizes": tuple(int(s) for s in np.diff(cut)), "method": METHOD,
    }
    return Drift(**fields, reading=_reading(fields))
