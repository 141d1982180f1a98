"""Repeated measures in the report: the effect across a run's repeats (`replication`) and the
variance between boots and within them (`repetitions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hugelab.report.model.base import Model


@dataclass
class RepeatEffect(Model):
    repeat: int
    n: int
    estimate: float | None
    se: float | None
    ci_low: float | None
    ci_high: float | None
    effect_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    se_pct: float | None


@dataclass
class PooledEffect(Model):
    """Random-effects pooling (`hugelab.stats.meta.Pooled`, JSON-safe)."""

    k: int
    estimate: float | None
    se: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    df: int
    alpha: float
    tau2: float | None
    tau: float | None
    i2: float | None
    q: float | None
    q_p: float | None
    q_star: float | None
    pred_low: float | None
    pred_high: float | None
    weights: list[float]
    method: str
    interval: str
    notes: list[str]
    effect_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    tau_pct: float | None
    pred_low_pct: float | None
    pred_high_pct: float | None


@dataclass
class Replication(Model):
    """One comparison across the run's repeats; only the head and `error` when they could not
    be combined."""

    name: str
    baseline: str
    candidate: str
    repeats_planned: int
    repeats: list[RepeatEffect] | None = None
    pooled: PooledEffect | None = None
    verdict: str | None = None
    better: str | None = None
    margin: float | None = None
    disagree: bool = False
    between_dominates: bool = False
    tau_pct: float | None = None
    reading: str = ""
    notes: list[str] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.error is None:
            return {k: v for k, v in super().to_json().items() if k != "error"}
        return {"name": self.name, "baseline": self.baseline, "candidate": self.candidate,
                "repeats_planned": self.repeats_planned, "error": self.error}


@dataclass
class KChoice(Model):
    """The recommended trials per boot (`hugelab.stats.components.KChoice`)."""

    k: int
    optimum: float | None
    cost_boot_s: float
    cost_trial_s: float
    gain_vs_k1: float
    notes: list[str]


ERROR_KEYS = ("name", "arm", "target", "boots", "k_run", "error")


@dataclass
class Repetition(Model):
    """One series' variance between boots and within them; only `ERROR_KEYS` when it could
    not be split."""

    name: str
    arm: str
    target: str
    boots: int
    trials: int | None = None
    mean_k: float | None = None
    var_between: float | None = None
    var_within: float | None = None
    notes: list[str] | None = None
    share_between: float | None = None
    share_within: float | None = None
    k_run: float | None = None
    recommended: KChoice | None = None
    error: str | None = None
    effect_of: str | None = None  # request windows: the split of this arm's effect vs this arm
    OMIT: ClassVar[frozenset[str]] = frozenset({"effect_of"})

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.error is None:
            return {k: v for k, v in out.items() if k != "error"}
        return {k: out[k] for k in ERROR_KEYS}
