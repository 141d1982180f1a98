"""The summary `hugelab run` prints when it finishes, answer first and compact at any size:

1. what ran (run id, store, trials this time);
2. the answer in the report's own words (`hugelab.report.lead`: per comparison or per factor,
   the recommendation, warnings each once), saying which analysis it is (the report's
   defaults: alpha, margin, Holm family);
3. with --until-verdict, each arm's sequential decision, saying it comes from the sequential
   looks at the run's own alpha and margin; with --repeats, each comparison across repeats;
4. one row per cell: ok, flagged/failed, median, effect and verdict; factorial cells named by
   the levels that differ from their scenario's baseline cell, one heading line per scenario;
   stacked rows when the table does not fit the terminal, so no word is ever split;
5. what went wrong (skipped arms, failed or flagged trials, hugetlb pools shared with other
   users, retries), once each.

Pure formatting over the run's summary (`RunSummary`, whose JSON `--json` prints) and the
experiment; the answer is drawn from its report parts (`answer.Findings`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from hugelab.experiment import Experiment
from hugelab.planning.cost import human
from hugelab.report import answer, lead, text
from hugelab.report.model.comparison import Comparison
from hugelab.report.model.runsummary import RunSummary
from hugelab.report.sections.labels import effect as effect_cell
from hugelab.report.sections.labels import no_interval_note
from hugelab.report.table import Table, num

EFFECT_NOTE = ("effect: Hodges-Lehmann shift of the paired log-ratios, candidate vs baseline "
               "(negative = smaller values); verdicts: Wilcoxon signed-rank, Holm-adjusted, and "
               "TOST at the margin")


def _report_like(result: RunSummary) -> answer.Findings:
    """The parts of the report's result that `lead` and the tables read."""
    return answer.Findings(result.comparisons, result.factorial, list(result.warnings),
                           [a.arm for a in result.arms], result.costs)


def headline(exp: Experiment, result: RunSummary) -> str:
    verb = "resumed" if result.resumed else "ran"
    return (f"{verb} run {result.run} of '{exp.name}' in {result.store}: "
            f"{result.executed} trial(s) this time")


def analysis_line(result: RunSummary) -> str | None:
    """Which analysis the answer comes from."""
    o = result.options
    if not o or not result.comparisons:
        return None
    return (f"(the report's analysis: alpha {o.alpha:g}, margin ±{100 * o.margin:g}%, "
            f"Holm across {o.holm_family} claim(s); hugelab report says the same)")


def sequential_lines(seq: dict[str, Any] | None) -> list[str]:
    """Each arm's sequential decision, named as such (its alpha is the run's own)."""
    if not seq:
        return []
    at = seq.get("stopped_at_look")
    plan = seq.get("plan") or {}
    alpha, margin = seq.get("family_alpha"), plan.get("margin")
    head = (f"until-verdict: {'stopped at look ' + str(at) if at else 'ran every planned look'}"
            f" of {plan.get('looks')} (looks after blocks {plan.get('look_sizes')}); the "
            f"sequential decisions below use the run's alpha {alpha:g}"
            + (f" and margin ±{100 * margin:g}%" if margin is not None else "")
            + ", not the report's defaults")
    decided, unreachable = seq.get("decided") or {}, seq.get("unreachable") or {}
    out = [head, *budget_lines(seq.get("budget"))]
    for arm in [*decided, *(a for a in unreachable if a not in decided)]:
        d = decided.get(arm)
        if d is not None:
            out.append(f"  {arm}: {d['decision']} at look {d['look']}" + weighted_reading(d))
            if d["decision"] == "inconclusive" and arm not in unreachable and d.get("reach"):
                out.append(f"    {arm}: {d['reach']['statement']}")  # the margin it reached
        u = unreachable.get(arm)
        if u is not None:  # the first look that put the margin out of reach (issue 39)
            out.append(f"    {arm}: at look {u['look']} ({u['blocks']} blocks): "
                       f"{u['statement']}")
    return out


def weighted_reading(d: dict[str, Any]) -> str:
    """', +0.12% [-0.61, +0.80] (trials weighted by their own SEs)' for a look that weighed
    them (hugelab.stats.weighted); the interval is the look's equivalence one."""
    lo_hi = d.get("interval_pct")
    if d.get("statistic") != "weighted" or not lo_hi:
        return ""
    return (f", {d['effect_pct']:+.2f}% [{lo_hi[0]:+.2f}, {lo_hi[1]:+.2f}] (trials weighted "
            f"by their own SEs)")


def budget_lines(budget: dict[str, Any] | None) -> list[str]:
    """With --budget: the blocks' measured time the looks were planned from, and where the
    budget ended the plan early."""
    if not budget:
        return []
    per = budget.get("block_s")
    line = (f"  budget {human(budget['budget_s'])}: {budget['blocks_timed']} blocks"
            + (f" at {per:.1f} s a block (median)" if per is not None else "")
            + f", {human(budget['elapsed_s'])} in all")
    cut = budget.get("cut")
    return [line] + ([f"  cut at block {cut['blocks']}: {cut['reason']}"] if cut else [])


def names_of(exp: Experiment) -> answer.Names:
    """Short cell names from the experiment itself (a run with no comparison yet too)."""
    if not exp.factors:
        return answer.Names()
    cond = {f.name for f in exp.condition_factors}  # a host condition: a scope, as a scenario
    return answer.Names({a.name: dict(a.levels) for a in exp.arms},
                        [f.name for f in exp.factors if not f.scenario and f.name not in cond],
                        [f.name for f in exp.factors
                         if (f.scenario and len(f.levels) > 1) or f.name in cond])


def cells(exp: Experiment, result: RunSummary) -> list[Table]:
    """One table per scenario (one for a flat run) of every cell against its baseline."""
    rep = _report_like(result)
    names = names_of(exp)
    comps: dict[str, Comparison] = {}
    for comp in rep.comparisons:  # one row per arm: its first target's comparison
        comps.setdefault(comp.candidate.split("@")[0], comp)
    unit = result.unit or ""
    out: dict[str, Table] = {}
    for r in result.arms:
        scope = names.scope(r.arm)
        t = out.setdefault(scope, _table(exp, scope, unit))
        c = comps.get(r.arm)
        effect, verdict = ("", "baseline") if r.baseline else ("-", "-") if c is None else \
            (effect_cell(c), answer.verdict(c, why=False))
        name = names.short(r.arm, c.baseline if c else r.arm if r.baseline else None)
        t.rows.append([name, str(r.n), f"{r.flagged}/{r.failed}", num(r.median), effect,
                       verdict])
    return list(out.values())


def _table(exp: Experiment, scope: str, unit: str) -> Table:
    several = any(len(f.levels) > 1 for f in exp.scenario_factors)
    against = "the baseline cell of its scenario" if several else f"'{exp.baseline_arm}'"
    what = "cell" if exp.factors else "arm"
    title = f"{scope}: each {what} against its baseline" if scope else \
        f"{exp.name}: each {what} against {against} (paired by block)"
    return Table("cells", title, [what, "ok", "flag/fail", f"median {unit}".strip(),
                                  "effect [95% CI]", "verdict"], [], right={1, 2, 3, 4})


def problems(result: RunSummary) -> list[tuple[str, str]]:
    """(label, text) of what went wrong, once each."""
    said = set(result.warnings)  # the lead said these already
    out = [("skipped", f"{arm}: {why}") for arm, why in result.skipped.items()
           if lead.skipped_warning(arm, why) not in said]
    out += [("failed" if p.failed else "flagged", p.text) for p in result.problems]
    out += [("shared pool:", w) for w in result.pool_warnings if w not in said]
    if result.retried:
        out.append(("retried", f"{len(result.retried)} trial(s) that failed for outside "
                               "reasons ran again (hugelab show RUN lists them)"))
    return out


def render(exp: Experiment, result: RunSummary, con: Console) -> None:
    """Print the summary (see the module docstring for its order)."""
    con.print(Text(headline(exp, result)))
    rep = _report_like(result)
    first = lead.build(rep)
    if rep.comparisons or first.loud or first.notes:  # no comparison: still what went wrong
        text.lead_lines(first, con)
        line = analysis_line(result)
        if line:
            con.print(Text(line, style="dim"))
    for line in sequential_lines(result.sequential):
        con.print(Text(line))
    for r in result.replication or []:  # a run of several repeats (hugelab report: more)
        said = (r.reading or None) if r.error is None else r.error  # JSON: no reading then
        con.print(Text(f"across repeats: {r.name}: {said}"))
    for t in cells(exp, result):
        text.print_table(t, con)
    for n in no_interval_note(rep.comparisons):
        con.print(Text("  " + n, style="dim"))
    for label, what in problems(result):
        con.print(Text(f"{label} ", style="yellow") + Text(what))
    if rep.comparisons:
        con.print(Text(EFFECT_NOTE, style="dim"))
    if result.factorial:
        con.print(Text("main effects, interactions and effects along ordered parameters: "
                       "hugelab report", style="dim"))
