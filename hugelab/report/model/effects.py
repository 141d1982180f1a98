"""A factorial run's findings: main effects, interactions, effects along an ordered
parameter, two-way medians and the one-paragraph summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hugelab.report.model.base import Model
from hugelab.report.model.estimate import Estimate


@dataclass
class FactorInfo(Model):
    """A factor; `condition`: True for a host condition (`host_state` levels, issue 38), the
    background of every comparison as a scenario is; `measured`: per level of a condition,
    the median measured unusable free-memory index of its trials (a 2 MiB page's)."""

    OMIT: ClassVar[frozenset[str]] = frozenset({"condition", "measured"})

    name: str
    levels: list[str]
    scenario: bool
    ordered: bool
    condition: bool | None = None
    measured: dict[str, float] | None = None


@dataclass
class _Claim(Model):
    name: str
    kind: str  # "main" or "interaction"
    scope: str  # "overall" or the scenario
    factor: str
    level: str
    base_level: str


@dataclass
class Effect(Estimate, _Claim):
    """A main effect or (with `by`) a two-way interaction, Holm-adjusted with the run's
    comparisons."""

    OMIT: ClassVar[frozenset[str]] = frozenset({"by", "by_level", "by_base", "by_scenario",
                                                "interaction_verdict"})

    blocks_used: int
    by: str | None = None
    by_level: str | None = None
    by_base: str | None = None
    by_scenario: bool | None = None
    interaction_verdict: str | None = None


@dataclass
class AlongPoint(Model):
    level: str
    x: float
    effect_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    n_units: int


@dataclass
class AlongLine(Model):
    parameter: str
    factor: str
    level: str
    base_level: str
    points: list[AlongPoint]


@dataclass
class TwoWay(Model):
    scope: str
    rows: str
    columns: str
    row_levels: list[str]
    column_levels: list[str]
    medians: list[list[float | None]]


@dataclass
class Factorial(Model):
    factors: list[FactorInfo]
    cells: int
    main_effects: list[Effect]
    interactions: list[Effect]
    along: list[AlongLine]
    summary: str
    not_estimable: list[str]
    two_way: list[TwoWay]
    cell_levels: dict[str, dict[str, str]]
