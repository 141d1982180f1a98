"""What every section says the same way: names of arms and comparisons by their levels,
verdicts, effects with their intervals, notes folded, and the report's header line."""

from __future__ import annotations

from collections.abc import Sequence

from hugelab.report import answer, lead
from hugelab.report.model.comparison import Comparison
from hugelab.report.model.estimate import Estimate
from hugelab.report.model.result import Result

SAID_AS_WARNING = "needed for any verdict"


def verdict_text(c: Estimate) -> str:
    v = str(c.verdict)
    if v in ("faster", "slower") and c.within_margin:
        v += f" (within ±{100 * c.margin:g}%)"
    return v


def comparison_label(result: Result, c: Comparison) -> str:
    """A comparison by the levels that differ ('thp vs 4k [workload=chase]'); its name in a
    flat run."""
    names = answer.Names.of(result.factorial)
    scope = names.scope(c.candidate)
    return names.pair(c) + (f" [{scope}]" if scope else "")


def series_label(result: Result, name: str) -> str:
    """An arm by its levels ('thp [workload=chase]'); its name in a flat run."""
    names = answer.Names.of(result.factorial)
    scope = names.scope(name)
    return names.short(name) + (f" [{scope}]" if scope else "")


def folded(notes: list[tuple[str, str]], total: int, what: str = "comparisons") -> list[str]:
    """Per-row notes with the ones many rows share said once (`lead.fold`)."""
    return lead.fold(notes, total, what)


def header(result: Result) -> str:
    run = result.run
    base = f"baseline '{run.baseline}'"
    fact = result.factorial
    if fact is not None and any(f.scenario and len(f.levels) > 1 for f in fact.factors):
        base = f"baseline cell '{str(run.baseline).split(' [')[0]}' of each scenario"
    return (f"run {run.id} '{run.name}' ({run.status}): {result.trials:,} trials in "
            f"{result.blocks:,} blocks; {base}")


def effect(e: Estimate) -> str:
    """'+1.2% [-0.3, +2.5]', or '-40.1% (no CI)' (`no_interval_note` says why once)."""
    if e.effect_pct is not None and not answer.has_interval(e):
        return f"{answer.pct(e.effect_pct)} (no CI)"
    return answer.interval(e)


def no_interval_note(entries: Sequence[Estimate]) -> list[str]:
    """Why some rows have no interval, said once for the table: the pairs an interval at the
    rows' alpha needs (`answer.needed`) and those the rows have."""
    few = [e for e in entries if e.effect_pct is not None and not answer.has_interval(e)]
    out = []
    for need, lvl in sorted({(answer.needed(e), answer.level(e.alpha)) for e in few}):
        have = ", ".join(str(n) for n in sorted({e.n_units for e in few
                                                 if answer.needed(e) == need
                                                 and answer.level(e.alpha) == lvl}))
        out.append(f"(no CI): no interval yet: a {lvl} interval needs at least {need} pairs "
                   f"(blocks); those rows have {have}")
    return out
