"""One series (an arm on a target): trial counts and reasons, the classic table, the
monitors' and the mapping evidence's readings."""

from __future__ import annotations

from dataclasses import dataclass

from hugelab.report.model.base import Model


@dataclass
class Counts(Model):
    ok: int
    flagged: int
    failed: int


@dataclass
class Reason(Model):
    reason: str
    count: int


@dataclass
class Normality(Model):
    test: str
    statistic: float | None
    p_value: float | None
    reading: str


@dataclass
class Classic(Model):
    """Mean, spread and margin of error of the ok values (`hugelab.stats.classic`)."""

    mean: float | None
    n: int
    stddev: float | None
    min: float | None
    max: float | None
    confidence: float
    margin_of_error: float | None
    beyond_3sigma_high: int
    beyond_3sigma_low: int
    beyond_6sigma_high: int
    beyond_6sigma_low: int
    expected_beyond_3sigma: float
    max_sigma: float | None
    normality: Normality


@dataclass
class MachineLoad(Model):
    """The machine's load over sampled trials (`hugelab.trial.load`)."""

    trials: int
    high: int
    median: dict[str, float]
    max: dict[str, float]
    high_kinds: dict[str, int]
    thresholds: dict[str, float]
    reading: str


@dataclass
class Monitors(Model):
    trials: int
    vmstat_median: dict[str, float]
    thp_fault_share: float | None
    load: MachineLoad | None
    reading: str


@dataclass
class Evidence(Model):
    trials: int
    kernel_page_size_kB: dict[str, int]  # noqa: N815 - the JSON's key
    anon_huge_share_median: float | None
    checks: dict[str, int]
    layers: dict[str, dict[str, int]]
    reading: str


@dataclass
class Series(Model):
    name: str
    arm: str
    target: str
    better: str | None
    metric: str | None
    unit: str | None
    counts: Counts
    non_positive: int
    flag_reasons: list[Reason]
    error_reasons: list[Reason]
    retried: int
    retry_reasons: list[Reason]
    classic: Classic | None
    median: float | None
    monitors: Monitors
    evidence: Evidence
    details_sampled: int
