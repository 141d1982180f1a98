"""The whole report of one run: every section the analysis finds, and the answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from hugelab.report.model.base import Model
from hugelab.report.model.comparison import Comparison
from hugelab.report.model.costs import Costs
from hugelab.report.model.effects import Factorial
from hugelab.report.model.estimate import Estimate
from hugelab.report.model.headline import Lead
from hugelab.report.model.replicas import Repetition, Replication
from hugelab.report.model.series import Series


@dataclass
class RunInfo(Model):
    id: int
    name: str
    key: str | None
    status: str
    created: float | None
    finished: float | None
    baseline: str | None
    description: str | None
    workload: dict[str, Any] | None
    blocks_planned: int | None
    seed: int | None
    skipped: dict[str, str]
    sequential: dict[str, Any] | None
    design: str
    repeats: int
    hardware_counters: dict[str, Any] | None


@dataclass
class ReportOptions(Model):
    alpha: float
    margin: float
    confidence: float
    holm_family: int


@dataclass
class BlockVariance(Model):
    """Variance of log values between blocks (`hugelab.stats.blocks`); only `error` when it
    could not be estimated."""

    n: int | None = None
    n_blocks: int | None = None
    mean_block_size: float | None = None
    var_between: float | None = None
    var_within: float | None = None
    icc: float | None = None
    design_effect: float | None = None
    effective_n: float | None = None
    f_stat: float | None = None
    f_p: float | None = None
    kruskal_p: float | None = None
    pooling_warning: bool = False
    reading: str | None = None
    note: str | None = None
    reading_paired: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        return {k: v for k, v in super().to_json().items() if k != "error"}


@dataclass
class GridTable(Model):
    hosts: list[str]
    guests: list[str]
    values: list[list[float | None]]


@dataclass
class Grid(Model):
    medians: GridTable
    better: str
    percent_of_native: GridTable | None


@dataclass
class Provenance(Model):
    accel_by_target: dict[str, list[str]]
    kernels: dict[str, int]
    hugelab_versions: dict[str, int]


@dataclass
class _Percentile(Model):
    comparison: str
    metric: str
    percentile: float | None
    pairs: int


@dataclass
class LatencyEntry(Estimate, _Percentile):
    """One latency percentile of one comparison."""


@dataclass
class TailLatency(Model):
    holm_family: int
    better: str
    entries: list[LatencyEntry]
    method: str


@dataclass
class _ServerCpuPair(Model):
    comparison: str
    pairs: int
    baseline_us_per_op: float | None  # medians over the pairs' trials
    candidate_us_per_op: float | None
    client_cpu_share: float | None
    round_trip_metric: str | None  # the primary metric, its effect copied from the comparison
    round_trip_effect_pct: float | None
    round_trip_ci_low_pct: float | None
    round_trip_ci_high_pct: float | None
    # the round trip's effect after each trial's first second (its trials'
    # `settled_hl_log_ratio`): Hodges-Lehmann over the pairs that have it, its interval
    settled_effect_pct: float | None
    settled_ci_low_pct: float | None
    settled_ci_high_pct: float | None
    settled_pairs: int


@dataclass
class ServerCpuEntry(Estimate, _ServerCpuPair):
    """The server's CPU per operation of one comparison, its round-trip effect beside it."""


@dataclass
class DaemonCpu(Model):
    """khugepaged's and kcompactd's CPU seconds over one series' trials: the median per trial
    by daemon."""

    series: str
    trials: int
    median_cpu_s: dict[str, float]


@dataclass
class ServerCpu(Model):
    holm_family: int
    better: str
    entries: list[ServerCpuEntry]
    thp_daemons: list[DaemonCpu]
    method: str


@dataclass
class Result(Model):
    """What `hugelab report` finds, in the JSON report's order; `store` is where the run was
    read from (set by the command, absent from the JSON otherwise)."""

    OMIT: ClassVar[frozenset[str]] = frozenset({"store"})

    run: RunInfo
    options: ReportOptions
    trials: int
    blocks: int
    series: list[Series]
    comparisons: list[Comparison]
    block_variance: BlockVariance | None
    grid: Grid | None
    factorial: Factorial | None
    provenance: Provenance
    repetitions: list[Repetition] | None
    replication: list[Replication] | None
    tail_latency: TailLatency | None
    server_cpu: ServerCpu | None
    costs: Costs | None
    warnings: list[str]
    answer: Lead | None = None
    store: str | None = field(default=None)
