"""The run summary `hugelab run` prints and `hugelab run --json` writes: per arm its counts
and medians, the report's comparisons and answer parts, and what went wrong. Its JSON is its
fields, in this order (the keys `hugelab run --json` has always had)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from hugelab.report.model.base import Model
from hugelab.report.model.comparison import Comparison
from hugelab.report.model.costs import Costs
from hugelab.report.model.effects import Factorial
from hugelab.report.model.replicas import Replication
from hugelab.report.model.result import ReportOptions


@dataclass
class ArmRow(Model):
    """One arm against its baseline: ratios of medians (`ratio`: median over the baseline's;
    `speedup`: how many times faster, by the metric's better direction), when both exist."""

    OMIT: ClassVar[frozenset[str]] = frozenset({"ratio", "speedup"})

    arm: str
    n: int  # ok trials with a value
    flagged: int
    failed: int
    median: float | None
    mean: float | None
    min: float | None
    max: float | None
    baseline: bool  # the arm is its own baseline
    ratio: float | None = None
    speedup: float | None = None


@dataclass
class ArmProblem(Model):
    """An arm with trials that are not ok: counts and the commonest reason in plain words."""

    arm: str
    trials: int
    not_ok: int
    failed: int
    no_ok_trial: bool
    reason: str
    text: str


@dataclass
class Retry(Model):
    """A trial that took more than one attempt, with its earlier attempts' first lines."""

    block: int
    arm: str
    target: str
    attempts: int
    status: str
    earlier: list[str]


@dataclass
class RunSummary(Model):
    """What `hugelab run` says about its run. The first five fields are the command's own
    (set by it); `sequential` is `hugelab.stopping`'s description of the looks."""

    sequential: dict[str, Any] | None = None
    run: int = 0
    store: str = ""
    resumed: bool = False
    executed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    arms: list[ArmRow] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    unit: str | None = None
    factorial: Factorial | None = None
    replication: list[Replication] | None = None
    costs: Costs | None = None
    options: ReportOptions | None = None
    warnings: list[str] = field(default_factory=list)
    problems: list[ArmProblem] = field(default_factory=list)
    retried: list[Retry] = field(default_factory=list)
    pool_warnings: list[str] = field(default_factory=list)

    def without_ok(self) -> list[str]:
        """Arms with no ok trial: nothing to compare them with."""
        return [p.arm for p in self.problems if p.no_ok_trial]
