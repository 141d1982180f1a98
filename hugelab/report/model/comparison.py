"""A comparison of two arms: its estimate, tails, drift of the effect over the run, regimes
among its blocks and their link to the machine's load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hugelab.report.model.base import Model
from hugelab.report.model.estimate import Estimate


@dataclass
class TailQuantile(Model):
    q: float
    baseline: float | None
    candidate: float | None
    ratio: float | None
    low: float | None
    high: float | None


@dataclass
class Outliers(Model):
    baseline_rate: float
    candidate_rate: float
    difference: float
    low: float | None
    high: float | None
    baseline_bad_side_rate: float
    candidate_bad_side_rate: float


@dataclass
class Tails(Model):
    """Percentile ratios and outlier rates, candidate against baseline."""

    confidence: float
    paired: bool
    quantiles: list[TailQuantile]
    outliers: Outliers
    notes: list[str]
    n_boot: int | None
    pairs_used: int


@dataclass
class Drift(Model):
    """Whether the effect itself changed over the run (`hugelab.stats.drift`)."""

    n: int
    alpha: float
    segments: int
    checked: bool
    drifting: bool
    rho: float | None
    trend_p: float | None
    split_p: float | None
    p_value: float | None
    first_pct: float | None
    last_pct: float | None
    change_pct: float | None
    segment_pct: list[float | None]
    segment_sizes: list[int]
    method: str
    reading: str


@dataclass
class Regime(Model):
    blocks: int
    share: float
    effect: float | None
    effect_pct: float | None


@dataclass
class Regimes(Model):
    """Two regimes among the blocks' effects, or not (`hugelab.stats.regimes`)."""

    n: int
    r2: float | None
    separation: float | None
    p_value: float | None
    alpha: float
    split: bool
    low: Regime | None
    high: Regime | None
    switches: int
    reading: str


@dataclass
class Spearman(Model):
    rho: float
    p: float
    blocks: int


@dataclass
class LoadEffect(Model):
    """The per-block effect against the machine's load in that block."""

    OMIT: ClassVar[frozenset[str]] = frozenset({"low_regime_median", "high_regime_median"})

    blocks: int
    spearman: dict[str, Spearman]
    low_regime_median: dict[str, float] | None = None
    high_regime_median: dict[str, float] | None = None
    reading: str = ""

    @property
    def moved(self) -> bool:
        return self.reading.startswith("the effect moved")


@dataclass
class _Pair(Model):
    name: str
    baseline: str
    candidate: str
    blocks_dropped: int


@dataclass
class Comparison(Estimate, _Pair):
    """One arm against its baseline, paired by block (JSON: the pair, then the estimate,
    then the rest)."""

    tails: Tails | None
    drift: Drift | None
    regimes: Regimes | None
    load_effect: LoadEffect | None
