"""One paired estimate with its verdict (`hugelab.stats.paired.Comparison`, JSON-safe): what a
comparison, a factor's effect and a latency percentile share."""

from __future__ import annotations

from dataclasses import dataclass

from hugelab.report.model.base import Model


@dataclass
class Estimate(Model):
    """A Hodges-Lehmann effect, its interval, tests and verdict (None: not estimable)."""

    verdict: str
    better: str
    alpha: float
    margin: float
    n: int
    n_dropped: int
    unit: str
    n_units: int
    hl_log: float | None
    effect_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    ci_method: str
    p_value: float | None
    p_adjusted: float | None
    tost_p: float | None
    tost_p_adjusted: float | None
    tost_low_pct: float | None
    tost_high_pct: float | None
    within_margin: bool
    mean_ratio: float | None
    median_ratio: float | None
    trimmed_mean_ratio: float | None
    ratio_of_means: float | None
    design_effect: float | None
    pooling_warning: bool
    notes: list[str]
