"""Every table of one run's report, in order (one module per section under `sections/`), and
which of them go with the answer. Nothing here escapes: every renderer escapes every cell for
its own format."""

from __future__ import annotations

from hugelab.report.model.result import Result
from hugelab.report.sections import prices as costs
from hugelab.report.sections.classic import classic
from hugelab.report.sections.drift import drift
from hugelab.report.sections.factors import factor_tables
from hugelab.report.sections.grids import grid_tables
from hugelab.report.sections.repetitions import repetitions
from hugelab.report.sections.replication import replication_tables
from hugelab.report.sections.tails import tails
from hugelab.report.sections.trials import evidence, trials
from hugelab.report.sections.verdicts import server_cpu, tail_latency, verdicts
from hugelab.report.table import Table


def all_tables(result: Result, full: bool = True) -> list[Table]:
    """Every table, or (full=False) the compact set: verdicts, trials, evidence, grids, and
    drift only when the effect changed over the run. A note is kept under the first table
    shown that has it, and left out under the later ones."""
    drifts = [drift(result)] if result.comparisons else []
    every = [*factor_tables(result), verdicts(result), *replication_tables(result), *drifts,
             *tail_latency(result), *server_cpu(result), *costs.weighed(result),
             *costs.medians(result), tails(result), classic(result),
             trials(result), *repetitions(result),
             evidence(result), *grid_tables(result)]
    shown = [t for t in every if full or not t.full]
    said: set[str] = set()
    for t in shown:
        t.notes = [n for n in dict.fromkeys(t.notes) if n not in said]
        said.update(t.notes)
    return shown


def lead_split(ts: list[Table]) -> tuple[list[Table], list[Table]]:
    """(tables that answer the question and go with the lead: a factorial's medians grids,
    the rest)."""
    lead_ = [t for t in ts if t.key.startswith("two_way")]
    return lead_, [t for t in ts if not t.key.startswith("two_way")]
