"""One trial's paired estimate from request-interleaved windows (pure numpy and scipy).

A request-interleaving client (hugelab-reqmix) runs windows of a few operations on each arm's
server in blocks: a random order of the arms, then the same order reversed (ABBA for two
arms). Each window gives a rate, ops/ns. Within a block every arm's two windows sit
symmetrically about the block's middle, so the difference of an arm's mean log rate and the
reference's within one block cancels any drift of the machine's speed that is linear over
the block (a few milliseconds), and most of what is not.

The trial's estimate is the mean of those per-block log-ratios; its interval comes from
batch means (contiguous runs of blocks averaged first), so that noise correlated over a few
blocks does not make the interval too narrow. The ratio is a ratio of geometric means of
the window rates: `exp(log_ratio)` above 1 means the arm served more ops per second than the
reference. An arm's recorded rate (robust_arm_rates) stands off the blocks' level by the
Hodges-Lehmann shift of those per-block log-ratios instead: a few windows slowed by a
preempted vCPU move a mean by their whole share and the shift by little. A trial stays the unit of a verdict: this interval says how well one set of
servers was measured, not how a fresh set would differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from hugelab.stats._util import FloatArray, StatsInputError, as_1d

DEFAULT_BATCHES = 20
SLOW_MADS = 4.0  # a window this many robust SDs slow against its block is left out of the level


@dataclass(frozen=True)
class WindowEffect:
    """An arm against the reference arm over one trial's windows (log scale: rates)."""

    arm: int
    reference: int
    n_blocks: int
    n_batches: int
    log_ratio: float       # mean per-block log(rate of arm / rate of reference)
    se: float              # its standard error from the batch means
    lo: float              # interval for log_ratio at `level`
    hi: float
    level: float
    block_sd: float        # SD of the per-block log-ratios: the design's noise per block

    @property
    def ratio(self) -> float:
        """Rate of the arm over the reference's (1.02: 2% more ops per second)."""
        return float(np.exp(self.log_ratio))

    @property
    def percent(self) -> tuple[float, float, float]:
        """(estimate, low, high) as percent changes of the rate."""
        return tuple(float(100 * np.expm1(v)) for v in (self.log_ratio, self.lo, self.hi))  # type: ignore[return-value]


def _log_rates(ops: ArrayLike, ns: ArrayLike) -> FloatArray:
    o, t = as_1d(ops, "ops"), as_1d(ns, "ns")
    if o.shape != t.shape:
        raise StatsInputError(f"ops and ns must pair up: {o.size} vs {t.size} windows")
    if np.any(o <= 0) or np.any(t <= 0):
        raise StatsInputError("every window needs ops > 0 and ns > 0")
    return np.log(o / t)


def block_log_ratios(arms: ArrayLike, blocks: ArrayLike, ops: ArrayLike, ns: ArrayLike,
                     arm: int, reference: int = 0) -> FloatArray:
    """Per block (in block order): mean log rate of `arm` minus that of `reference`.

    Blocks lacking either arm (a block cut short) are left out."""
    y = _log_rates(ops, ns)
    a = np.asarray(arms)
    b = np.asarray(blocks)
    if a.shape != y.shape or b.shape != y.shape:
        raise StatsInputError("arms, blocks, ops and ns must have one value per window")
    labels, inv = np.unique(b, return_inverse=True)
    means = []
    for which in (arm, reference):
        sel = a == which
        count = np.bincount(inv[sel], minlength=labels.size)
        total = np.bincount(inv[sel], weights=y[sel], minlength=labels.size)
        with np.errstate(invalid="ignore", divide="ignore"):
            means.append(total / count)
    diff = means[0] - means[1]
    return diff[np.isfinite(diff)]


def batch_means(values: ArrayLike, batches: int = DEFAULT_BATCHES) -> FloatArray:
    """Means of `batches` contiguous, near-equal runs of `values` (fewer if there are fewer)."""
    x = as_1d(values, "values")
    n = min(batches, x.size)
    return np.array([chunk.mean() for chunk in np.array_split(x, n)]) if n else x


def window_effect(arms: ArrayLike, blocks: ArrayLike, ops: ArrayLike, ns: ArrayLike,
                  arm: int, reference: int = 0, level: float = 0.95,
                  batches: int = DEFAULT_BATCHES) -> WindowEffect:
    """The trial's paired estimate of `arm` against `reference` from its windows."""
    d = block_log_ratios(arms, blocks, ops, ns, arm, reference)
    if d.size < 2:
        raise StatsInputError(f"a window estimate needs at least 2 complete blocks, got {d.size}")
    if not 0 < level < 1:
        raise StatsInputError(f"level must lie in (0, 1), got {level}")
    from scipy import stats  # here: the request client imports this module, in guests too

    m = batch_means(d, max(batches, 2))
    est = float(m.mean())
    se = float(m.std(ddof=1) / np.sqrt(m.size))
    half = float(stats.t.ppf(0.5 + level / 2, m.size - 1)) * se
    return WindowEffect(arm=arm, reference=reference, n_blocks=int(d.size),
                        n_batches=int(m.size), log_ratio=est, se=se, lo=est - half,
                        hi=est + half, level=level, block_sd=float(d.std(ddof=1)))


def arm_rates(arms: ArrayLike, ops: ArrayLike, ns: ArrayLike) -> dict[int, float]:
    """Per arm, the geometric mean of its windows' rates in ops per second."""
    y = _log_rates(ops, ns)
    a = np.asarray(arms)
    return {int(k): float(np.exp(y[a == k].mean()) * 1e9) for k in np.unique(a)}


def block_arm_means(arms: ArrayLike, blocks: ArrayLike, ops: ArrayLike, ns: ArrayLike
                    ) -> tuple[FloatArray, FloatArray]:
    """(arm labels, y): y[k, j] the mean log rate (ops/ns) of arm labels[j] in the k-th block
    that has every arm (blocks in order; a block cut short is left out)."""
    y = _log_rates(ops, ns)
    a, b = np.asarray(arms), np.asarray(blocks)
    if a.shape != y.shape or b.shape != y.shape:
        raise StatsInputError("arms, blocks, ops and ns must have one value per window")
    arm_labels, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    count = np.zeros((bi.max() + 1, arm_labels.size))
    total = np.zeros_like(count)
    np.add.at(count, (bi, ai), 1.0)
    np.add.at(total, (bi, ai), y)
    full = np.all(count > 0, axis=1)
    return arm_labels.astype(np.float64), total[full] / count[full]


def hl_shift(values: ArrayLike) -> float:
    """The Hodges-Lehmann estimate of a sample's centre: the median of its Walsh averages
    (x_i + x_j) / 2, i <= j (pure)."""
    x = as_1d(values, "values")
    i, j = np.triu_indices(x.size)
    return float(np.median((x[i] + x[j]) / 2))


SHIFTS = {"mean": lambda x: float(np.mean(x)), "median": lambda x: float(np.median(x)),
          "hl": hl_shift}


def paired_shifts(y: FloatArray, ref: int, how: str = "hl") -> FloatArray:
    """Each arm's shift against column `ref` of y[k, a] (the arms' mean log rates per complete
    block): `how` ("hl", "median" or "mean") of its paired per-block log-ratios (pure)."""
    f = SHIFTS[how]
    return np.array([0.0 if a == ref else f(y[:, a] - y[:, ref]) for a in range(y.shape[1])])


def robust_level(y: FloatArray, shifts: FloatArray) -> float:
    """The trial's log level under arms standing at `shifts` (pure): per block the mean of
    y[k, a] less the arm's standing (its shift less the mean shift), over the arms that did
    not run slow by more than SLOW_MADS robust SDs (1.4826 MAD) of all the residuals against
    the block's centre; then the mean over the blocks."""
    z = shifts - shifts.mean()
    resid = y - y.mean(axis=1)[:, None] - z
    scale = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    keep = resid >= -SLOW_MADS * scale
    keep[~keep.any(axis=1)] = True
    own = np.where(keep, y - z, 0.0).sum(axis=1) / np.maximum(keep.sum(axis=1), 1)
    return float(own.mean())


def robust_arm_rates(arms: ArrayLike, blocks: ArrayLike, ops: ArrayLike, ns: ArrayLike,
                     reference: int = 0, how: str = "hl") -> dict[int, float]:
    """Per arm, a trial's rate in ops per second that a few preempted windows cannot move, and
    that keeps every arm paired with `reference` (pure). Over the blocks that have every arm,
    with y[k, a] the arm's mean log rate in block k and s_a the Hodges-Lehmann shift of the
    arm's per-block log-ratios y[k, a] - y[k, ref] (s_ref = 0):

        rate_a = exp(level + s_a - mean_j s_j)

    so log(rate_a / rate_ref) is exactly the Hodges-Lehmann shift of the paired per-block
    log-ratios: a window slowed by a preempted vCPU moves a mean of log-ratios by its whole
    share and a Hodges-Lehmann shift by little, and where the per-block log-ratios are not
    heavy-tailed it is nearly as precise as the mean (0.955 of it for Gaussian noise; a median
    0.64). The level (robust_level) leaves out windows running slow against their block, so
    they do not pull it down either; without them exp(level) is the geometric-mean rate over
    the blocks. It is the same for every arm and cancels in a ratio. `how` "median" or "mean"
    gives those shifts instead. Without a complete block (one arm, or every block cut short)
    it is arm_rates'."""
    labels, y = block_arm_means(arms, blocks, ops, ns)
    if y.shape[0] == 0:
        return arm_rates(arms, ops, ns)
    ref = int(np.flatnonzero(labels == reference)[0]) if reference in labels else 0
    sh = paired_shifts(y, ref, how)
    level = robust_level(y, sh)
    return {int(k): float(np.exp(level + sh[j] - sh.mean()) * 1e9)
            for j, k in enumerate(labels)}


def median_se(values: ArrayLike) -> float:
    """The standard error of a sample's median from its distribution-free 95% interval (the
    order statistics n/2 -+ 1.96 sqrt(n)/2, as in the sign test), divided by 2 x 1.96 (pure):
    what robust_arm_rates' paired median is uncertain by within one trial. NaN below 6."""
    x = np.sort(as_1d(values, "values"))
    n = x.size
    if n < 6:
        return float("nan")
    half = 1.959964 * np.sqrt(n) / 2
    lo, hi = max(int(np.floor(n / 2 - half)), 0), min(int(np.ceil(n / 2 + half)), n - 1)
    return float((x[hi] - x[lo]) / (2 * 1.959964))


@dataclass(frozen=True)
class TrialSplit:
    """Where the variance of an arm's trial effects lies: between trials (fresh servers: where
    each one's memory landed) or within them (what the trial's windows leave uncertain)."""

    trials: int
    var_total: float    # of the trials' log-ratios (ddof 1)
    var_within: float   # the mean squared standard error of a trial's window estimate
    var_between: float  # what is left, floored at 0
    share_between: float
    share_within: float


def split_trials(effects: ArrayLike, ses: ArrayLike) -> TrialSplit:
    """Split the variance of per-trial window estimates (log-ratios, with their standard errors)
    into between-trial and within-trial parts (pure): the total is the estimates' variance, the
    within part the mean of their squared standard errors, the between part the rest."""
    e, s = np.asarray(effects, dtype=np.float64), np.asarray(ses, dtype=np.float64)
    if e.size < 2 or e.size != s.size:
        raise StatsInputError(f"a split needs at least 2 trials with a standard error each, "
                              f"got {e.size} and {s.size}")
    total = float(e.var(ddof=1))
    within = float(np.mean(s ** 2))
    between = max(total - within, 0.0)
    parts = between + within
    share = between / parts if parts > 0 else 0.0
    return TrialSplit(int(e.size), total, within, between, share, 1.0 - share)
