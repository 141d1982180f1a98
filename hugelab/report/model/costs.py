"""What huge pages cost, as the report gives it: per comparison the paired effects on the
weighed figures of the trials' cost records (`hugelab.trial.costs`), adjusted as one
family (`stats.multiple.exclusive`), and per series the median of every figure recorded."""

from __future__ import annotations

from dataclasses import dataclass

from hugelab.report.model.base import Model


@dataclass
class CostFigure(Model):
    """One figure of the cost record: its key, words, unit and whose it is."""

    key: str
    label: str
    unit: str
    scope: str  # "workload", "host-wide", "application", "QEMU (host view)"
    weighed: bool


@dataclass
class CostEntry(Model):
    """One figure of one comparison: candidate against baseline, paired by block.

    `effect_pct` and its interval: the Hodges-Lehmann shift of the log-ratios (ratio-scale
    figures with positive values); `shift` and its interval: the shift of the differences in
    the figure's unit (every figure). `verdict`: "more" or "less" (adjusted signed-rank
    test), "same" (TOST within the margin, ratio scale), "inconclusive", or "no verdict yet"
    (too few pairs). `beyond_margin`: a memory figure whose estimate exceeds the memory
    margin (the trade the answer states)."""

    comparison: str
    cost: str
    pairs: int
    baseline_median: float | None
    candidate_median: float | None
    effect_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    shift: float | None
    shift_low: float | None
    shift_high: float | None
    p_value: float | None
    p_adjusted: float | None
    verdict: str
    beyond_margin: bool


@dataclass
class CostSeries(Model):
    """Every figure's median over one series' ok trials that recorded it."""

    series: str
    trials: int
    medians: dict[str, float]


@dataclass
class Costs(Model):
    holm_family: int
    memory_margin: float
    figures: list[CostFigure]
    entries: list[CostEntry]
    series: list[CostSeries]
    method: str
    alpha: float = 0.05  # the level of every figure's own interval and of the verdicts

    def entry(self, comparison: str, cost: str) -> CostEntry | None:
        return next((e for e in self.entries if e.comparison == comparison and e.cost == cost),
                    None)

    def figure(self, key: str) -> CostFigure | None:
        return next((f for f in self.figures if f.key == key), None)
