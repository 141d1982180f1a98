"""What it costs (report/weighing.py): the weighed figures of every comparison, paired by block and
Holm-adjusted as their own family, and every recorded figure's median per arm, each said with
whose it is (the workload's own, host-wide, the application's, QEMU's)."""

from __future__ import annotations

from hugelab.report.model.costs import CostEntry, CostFigure, Costs
from hugelab.report.model.result import Result
from hugelab.report.table import Table, ci_column, pval
from hugelab.stats import multiple
from hugelab.units import amount

SCOPE_NOTES = {
    "workload": "the workload's own processes (its process tree, sampled during the trial; in "
                "a guest, the guest's view)",
    "host-wide": "host-wide kernel counters over the trial (/proc/vmstat, the per-size mTHP "
                 "stats, khugepaged and kcompactd, PSI): every process's, not only the "
                 "workload's; in a block whose arms run at once, shared by them",
    "application": "the application's own report (e.g. Redis's INFO, the JVM's NMT)",
    "QEMU (host view)": "QEMU's process as the host sees it",
}


def value(v: float | None, unit: str, signed: bool = False) -> str:
    """A figure in its unit for people: KiB as MiB/GiB, a share in percent, seconds."""
    if v is None:
        return "-"
    sign = "+" if signed and v > 0 else ""
    if unit == "KiB":
        return sign + amount(v)
    if unit == "share":
        return f"{sign}{100 * v:.1f}{' pt' if signed else '%'}"
    if unit in ("count", ""):
        return f"{v:+g}" if signed else f"{v:g}"
    return f"{v:+.3g} {unit}" if signed else f"{v:.3g} {unit}"


def effect(e: CostEntry, fig: CostFigure | None) -> str:
    """'+310.0 MiB [+300.0 MiB, +320.0 MiB] (+12.0%)' or '+3 [+1, +5]'."""
    unit = fig.unit if fig else ""
    if e.shift is None:
        return "-"
    text = value(e.shift, unit, signed=True)
    if e.shift_low is not None and e.shift_high is not None:
        text += f" [{value(e.shift_low, unit, True)}, {value(e.shift_high, unit, True)}]"
    if e.effect_pct is not None:
        text += f" ({e.effect_pct:+.1f}%)"
    return text


def _label(fig: CostFigure | None, key: str) -> str:
    return fig.label if fig else key


SHORT_SCOPES = {"host-wide": " (host)", "application": " (app)", "QEMU (host view)": ""}


def _whose(fig: CostFigure | None) -> str:
    return SHORT_SCOPES.get(fig.scope, "") if fig else ""


def weighed(result: Result) -> list[Table]:
    """The weighed figures of every comparison, one row each."""
    c = result.costs
    if not c or not c.entries:
        return []
    t = Table("costs", f"What it costs (lower is cheaper; Holm across {c.holm_family} "
              "figures)", ["comparison", "figure", ci_column(result.options.alpha), "verdict", "p"],
              [], right={2, 4})
    for e in c.entries:
        fig = c.figure(e.cost)
        t.rows.append([e.comparison, _label(fig, e.cost) + _whose(fig), effect(e, fig),
                       _verdict(e, c), pval(e.p_adjusted)])
    t.notes += notes(c)
    return [t]


def adjusted_away(e: CostEntry, alpha: float) -> bool:
    """Whether the adjustment across every figure of every comparison is what left the figure
    undecided (its own p below alpha, the adjusted one not) while the interval printed beside
    it excludes zero: both hold, and the words must say so."""
    return e.verdict == "inconclusive" and multiple.undecided_by_adjustment(
        e.p_value, e.p_adjusted, alpha, e.shift_low, e.shift_high)


def verdict_words(e: CostEntry, c: Costs) -> str:
    """The verdict, or 'inconclusive across the 12 cost figures' where the adjustment left
    the figure undecided beside an interval that excludes zero (`adjusted_away`)."""
    if adjusted_away(e, c.alpha):
        return f"inconclusive across the {c.holm_family} cost figures"
    return e.verdict


def _verdict(e: CostEntry, c: Costs) -> str:
    if e.beyond_margin:
        return f"{verdict_words(e, c)}; beyond the {100 * c.memory_margin:g}% memory margin"
    return verdict_words(e, c)


def notes(c: Costs) -> list[str]:
    scopes = sorted({f.scope for f in c.figures if f.weighed or f.scope != "workload"})
    return ["figures marked (host) are host-wide, (app) the application's own report, the "
            "others the workload's own processes",
            "effect: the candidate's paired shift in the figure's unit, with the percent of "
            "the baseline for memory amounts; 'more' = the candidate costs more (signed-rank, "
            "Holm-adjusted), 'same' = within the memory margin (TOST)",
            f"memory margin ±{100 * c.memory_margin:g}% (`[costs] memory_margin` in the "
            "experiment, `hugelab report --memory-margin`): a footprint beyond it is stated "
            "beside every answer and recommendation",
            *(["'inconclusive across the N cost figures': the interval is that figure's own, the "
               f"verdict is adjusted across all {c.holm_family}"]
              if any(adjusted_away(e, c.alpha) for e in c.entries) else []),
            *(f"{s}: {SCOPE_NOTES.get(s, s)}" for s in scopes)]


def medians(result: Result) -> list[Table]:
    """Every recorded figure's median per arm (full report only)."""
    c = result.costs
    if not c or not c.series:
        return []
    keys = [f.key for f in c.figures if any(f.key in s.medians for s in c.series)]
    t = Table("cost_medians", "Cost record per arm (medians over ok trials)",
              ["figure", "whose", *[s.series for s in c.series]], [],
              right=set(range(2, 2 + len(c.series))), full=True)
    for key in keys:
        fig = c.figure(key)
        unit = fig.unit if fig else ""
        t.rows.append([_label(fig, key), fig.scope if fig else "-",
                       *[value(s.medians.get(key), unit) for s in c.series]])
    t.notes.append("the trial's cost record (monitors.costs in `hugelab show`); each figure "
                   "is explained in docs/statistics.md")
    return [t]
