"""The trade an answer states: an arm's speed beside what it costs in memory. Pure over the
report's `Costs` (report/weighing.py): the memory footprint's paired effect of a comparison, said
where it exceeds the memory margin, so that no answer or recommendation names an arm that
costs more memory than the margin without saying so."""

from __future__ import annotations

from hugelab.report.model.costs import CostEntry, Costs
from hugelab.report.sections.prices import effect, verdict_words

MEMORY = "footprint_kb"  # the figure the trade is stated in: what the host pays


def memory(costs: Costs | None, comparison: str) -> CostEntry | None:
    """The footprint entry of a comparison, when the run recorded one."""
    return costs.entry(comparison, MEMORY) if costs else None


def exceeds(costs: Costs | None, comparison: str) -> bool:
    """Whether the candidate's footprint estimate lies beyond the memory margin either way."""
    e = memory(costs, comparison)
    return bool(costs and e and e.effect_pct is not None
                and abs(e.effect_pct) > 100 * costs.memory_margin)


def phrase(costs: Costs | None, comparison: str) -> str | None:
    """'memory +310.0 MiB [+300.0 MiB, +320.0 MiB] (+12.0%), more' where the footprint moved
    beyond the margin; None otherwise."""
    e = memory(costs, comparison)
    if costs is None or e is None or not exceeds(costs, comparison):
        return None
    return f"memory {effect(e, costs.figure(MEMORY))}, {verdict_words(e, costs)}"


def cost_note(costs: Costs | None, comparison: str, arm: str) -> str | None:
    """'; thp costs memory +310.0 MiB [..] (+12.0%) beyond the 2% memory margin' for an arm
    the recommendation names whose footprint grows beyond the margin; None otherwise."""
    e = memory(costs, comparison)
    if costs is None or e is None or e.effect_pct is None or \
            e.effect_pct <= 100 * costs.memory_margin:
        return None
    return (f"; {arm} costs memory {effect(e, costs.figure(MEMORY))}, beyond the "
            f"{100 * costs.memory_margin:g}% memory margin ({verdict_words(e, costs)})")
