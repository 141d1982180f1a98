"""Repetitions within guest boots: where the variance is, and how many trials a boot should run.

A guest arm with ``trials_per_boot = k`` runs the workload k times in one boot. The boot is the
unit of analysis (its value the geometric mean of its k trials); the k log values inside it are
repeated measures. With boots as groups, the one-way random-effects model

    log value = mu + b_boot + e_trial,   var(b) = sigma_b^2,  var(e) = sigma_w^2

gives the variance of one boot's mean of k trials as ``sigma_b^2 + sigma_w^2 / k``. The
ANOVA (method-of-moments) estimator handles unequal boot sizes through

    n0 = (N - sum(n_i^2) / N) / (g - 1),   sigma_b^2 = max(0, (MS_between - MS_within) / n0)

(g boots, N trials; sigma_w^2 = MS_within, unbiased; sigma_b^2 unbiased before the clip at 0).

Kalibera & Jones (ISMM 2013) spend repetitions where the variance is: when a boot costs
``c_boot`` seconds (start-up, agent, shutdown) and a trial ``c_trial``, the variance of the
mean per unit of wall time, ``(sigma_b^2 + sigma_w^2/k) * (c_boot + k * c_trial)``, is
smallest at

    k* = sqrt((c_boot / c_trial) * sigma_w^2 / sigma_b^2)

Pure numpy: values in, a frozen dataclass out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from hugelab.stats._util import StatsInputError, jsonable, labelled

K_MAX = 50  # recommending more trials per boot than this is never worth a guest's risk
FEW_BOOTS = 10  # below this the between-boot variance is a rough estimate


@dataclass(frozen=True)
class KChoice:
    """The recommended trials per boot for measured costs, and what it buys against k = 1."""

    k: int
    optimum: float  # the unrounded k* (inf when the boots do not differ)
    cost_boot_s: float
    cost_trial_s: float
    gain_vs_k1: float  # variance x wall time at k = 1 over that at k (> 1: k is better)
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (an infinite optimum is None)."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out


@dataclass(frozen=True)
class BootComponents:
    """Variance of log values between boots and within them (trials of one boot)."""

    boots: int
    trials: int
    mean_k: float
    var_between: float  # sigma_b^2, clipped at 0
    var_within: float  # sigma_w^2
    notes: tuple[str, ...]

    @property
    def share_between(self) -> float:
        """sigma_b^2 / (sigma_b^2 + sigma_w^2), in [0, 1] (0 when nothing varies)."""
        total = self.var_between + self.var_within
        return self.var_between / total if total > 0 else 0.0

    @property
    def share_within(self) -> float:
        total = self.var_between + self.var_within
        return self.var_within / total if total > 0 else 0.0

    def boot_mean_var(self, k: float) -> float:
        """Variance of one boot's mean log value over k trials: sigma_b^2 + sigma_w^2 / k."""
        if k < 1:
            raise StatsInputError(f"k must be at least 1, got {k}")
        return self.var_between + self.var_within / k

    def cost_var(self, k: float, cost_boot_s: float, cost_trial_s: float) -> float:
        """Variance of the mean per unit of wall time at k (smaller is better)."""
        return self.boot_mean_var(k) * (cost_boot_s + k * cost_trial_s)

    def optimum_k(self, cost_boot_s: float, cost_trial_s: float) -> float:
        """Kalibera & Jones' k* = sqrt((c_boot / c_trial) * sigma_w^2 / sigma_b^2), unrounded."""
        if not (cost_trial_s > 0 and cost_boot_s >= 0):
            raise StatsInputError(f"costs must be positive: boot {cost_boot_s} s, "
                                  f"trial {cost_trial_s} s")
        if self.var_within == 0:
            return 1.0
        if self.var_between == 0:
            return math.inf
        return math.sqrt(cost_boot_s / cost_trial_s * self.var_within / self.var_between)

    def best_k(self, cost_boot_s: float, cost_trial_s: float) -> int:
        """k* rounded to the better of its two integer neighbours, clamped to [1, K_MAX]."""
        return self.choose_k(cost_boot_s, cost_trial_s).k

    def choose_k(self, cost_boot_s: float, cost_trial_s: float) -> KChoice:
        """:meth:`best_k` with the reasoning: the optimum, the gain over k = 1, notes."""
        opt = self.optimum_k(cost_boot_s, cost_trial_s)
        notes = []
        if math.isinf(opt):
            k = K_MAX
            notes.append(f"the boots do not differ measurably (between-boot variance 0): every "
                         f"repetition pays, capped at {K_MAX} trials per boot")
        else:
            lo = min(max(math.floor(opt), 1), K_MAX)
            hi = min(lo + 1, K_MAX)
            k = min((lo, hi), key=lambda j: (self.cost_var(j, cost_boot_s, cost_trial_s), j))
            if opt > K_MAX:
                notes.append(f"the optimum is {opt:.0f} trials per boot; capped at {K_MAX}")
        if self.boots < FEW_BOOTS:
            notes.append(f"components estimated from {self.boots} boots: a rough guide, "
                         "re-estimate with more boots")
        base = self.cost_var(1, cost_boot_s, cost_trial_s)
        at_k = self.cost_var(k, cost_boot_s, cost_trial_s)
        gain = base / at_k if at_k > 0 else 1.0
        return KChoice(k, opt, cost_boot_s, cost_trial_s, gain, tuple(notes))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict, with the two shares."""
        out: dict[str, Any] = jsonable({**asdict(self), "share_between": self.share_between,
                                        "share_within": self.share_within})
        return out


def boot_components(log_values: ArrayLike, boots: ArrayLike) -> BootComponents:
    """One-way random-effects components of ``log_values`` grouped by ``boots`` labels.

    NaN values are ignored. Needs at least two boots and one boot with two values.
    """
    x, labels = labelled(log_values, boots, "log values", "boots")
    if np.any(np.isinf(x)):
        raise StatsInputError("log values must be finite (found inf)")
    _, inv = np.unique(labels, return_inverse=True)
    sizes = np.bincount(inv).astype(float)
    g, n = sizes.size, x.size
    if g < 2 or n - g < 1:
        raise StatsInputError(f"variance components need at least 2 boots and one boot with "
                              f"2 trials, got {g} boot(s) holding {n} trial(s)")
    means = np.bincount(inv, weights=x) / sizes
    ms_b = float(np.sum(sizes * (means - x.mean()) ** 2)) / (g - 1)
    ms_w = float(np.sum((x - means[inv]) ** 2)) / (n - g)
    n0 = (n - float(np.sum(sizes**2)) / n) / (g - 1)
    var_b = max(0.0, (ms_b - ms_w) / n0)
    notes = []
    if var_b == 0.0 and ms_w > 0:
        notes.append("boot means vary no more than the trials within boots predict: "
                      "between-boot variance estimated as 0")
    return BootComponents(boots=g, trials=n, mean_k=n / g, var_between=var_b, var_within=ms_w,
                          notes=tuple(notes))


def from_boots(values: Sequence[Sequence[float]]) -> BootComponents:
    """Components from each boot's repetition values (positive; logged here)."""
    logs, labels = [], []
    for i, vs in enumerate(values):
        for v in vs:
            if not v > 0:
                raise StatsInputError(f"repetition values must be positive, got {v!r}")
            logs.append(math.log(v))
            labels.append(i)
    return boot_components(np.asarray(logs, dtype=float), np.asarray(labels, dtype=np.int64))


def scale_pair_sd(sd: float, comps: BootComponents, k0: float, k: float) -> float:
    """A pilot's SD of paired log-ratios, measured at k0 trials per boot, rescaled to k:

        sd * sqrt((sigma_b^2 + sigma_w^2 / k) / (sigma_b^2 + sigma_w^2 / k0))

    A paired log-ratio is the difference of two boot means, so its variance is the sum of the
    two arms' ``sigma_b^2 + sigma_w^2 / k``; the ratio above is exact when both arms have
    similar components (``comps``: one arm's, or the two pooled). Estimated per arm, sigma_b^2
    also holds block-to-block variation that pairing cancels, which makes the rescaling
    conservative: more trials per boot shrink the paired SD by at least this much.
    """
    at_k0 = comps.boot_mean_var(k0)
    if at_k0 <= 0:
        return sd
    return sd * math.sqrt(comps.boot_mean_var(k) / at_k0)


def pooled(parts: Sequence[BootComponents]) -> BootComponents:
    """Components of several arms combined, each weighted by its boots (for a pair of arms)."""
    if not parts:
        raise StatsInputError("nothing to pool")
    if len(parts) == 1:
        return parts[0]
    w = np.asarray([p.boots for p in parts], dtype=float)
    var_b = float(np.dot(w, [p.var_between for p in parts]) / w.sum())
    var_w = float(np.dot(w, [p.var_within for p in parts]) / w.sum())
    trials = sum(p.trials for p in parts)
    notes = tuple(dict.fromkeys(n for p in parts for n in p.notes))
    return BootComponents(boots=int(w.sum()), trials=trials, mean_k=trials / w.sum(),
                          var_between=var_b, var_within=var_w, notes=notes)


@dataclass(frozen=True)
class RepBoot:
    """One boot of a run: its repetitions' values and wall times, and the trial's wall time."""

    values: tuple[float, ...]
    wall_s: tuple[float, ...]
    trial_s: float | None  # the trial row's ended - started: boot, workload, shutdown
    workload_s: float | None  # the sum of the repetitions' wall times

    @property
    def overhead_s(self) -> float | None:
        """What the boot cost beyond its workload (start-up, agent, evidence, shutdown)."""
        if self.trial_s is None:
            return None
        work = self.workload_s if self.workload_s is not None else sum(self.wall_s)
        return max(0.0, self.trial_s - work)


def costs(boots: Sequence[RepBoot]) -> tuple[float, float] | None:
    """(cost per boot, cost per trial) in seconds measured in a run: the mean overhead of a
    boot and the mean wall time of one repetition; None when the run did not record them."""
    over = [o for b in boots if (o := b.overhead_s) is not None]
    walls = [w for b in boots for w in b.wall_s if w > 0]
    if not over or not walls:
        return None
    return float(np.mean(over)), float(np.mean(walls))


@dataclass(frozen=True)
class Repetitions:
    """One series' repetitions: components, measured costs and the recommended k."""

    components: BootComponents
    k_run: float  # the trials per boot the run used (median over boots)
    choice: KChoice | None  # None when the run did not record costs

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.components.to_dict(), "k_run": self.k_run,
                               "recommended": None if self.choice is None
                               else self.choice.to_dict()}
        return out


def repetitions(boots: Sequence[RepBoot]) -> Repetitions:
    """Components, costs and recommended k of one series' boots (each with its reps)."""
    comps = from_boots([b.values for b in boots])
    cost = costs(boots)
    choice = comps.choose_k(*cost) if cost is not None else None
    k_run = float(np.median([len(b.values) for b in boots]))
    return Repetitions(comps, k_run, choice)
