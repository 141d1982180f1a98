"""The question's answer in words: which arm wins, by how much (with its interval), the
verdict, and a recommendation only where a verdict supports one. Pure over the report's
findings (`Findings`: its comparisons, factorial and warnings); `lead` arranges these sentences and every renderer prints them first.

- A flat run: one sentence per comparison ("thp vs 4k: -12.3% [-14.1, -10.2], faster.").
- A factorial: one or two sentences per factor, ranked as the factorial summary ranks them
  (a factor with a verdict of difference first, then by its largest effect), and one for the
  interactions.
- Recommendations: one per scenario (the whole run when it has none): the best arm that
  differs beyond the margin, the runner-up's share of its gain; "nothing to gain" when every
  arm is equivalent; "keep" the baseline, with what the slower arms cost, when some arm is
  slower beyond the margin and none beats it; otherwise "no recommendation yet" with what
  would settle it.

An effect without an interval says so and why ("no interval: 10 pairs, 15 needed for a 99.99%
interval": the fewest pairs follow the estimate's alpha); an interval end is never a dash. Cell names are shortened to the levels that differ from the baseline
cell (`Names`), the scenario said once per group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hugelab.report import trade
from hugelab.report.model.comparison import Comparison
from hugelab.report.model.costs import Costs
from hugelab.report.model.effects import Effect, Factorial
from hugelab.report.model.estimate import Estimate
from hugelab.report.model.headline import Answer
from hugelab.report.model.result import Result
from hugelab.stats import multiple
from hugelab.stats.paired import MIN_UNITS, any_verdict_units
from hugelab.stats.plan import MIN_PILOT
from hugelab.stats.signedrank import min_pairs

WINS = "faster"  # the verdict of an arm better than its baseline (lower or higher is better)


def pct(v: float) -> str:
    return f"{v:+.1f}%"


def level(alpha: float) -> str:
    """The interval's confidence level in words: '95%', '99.99%'."""
    return f"{100 * (1 - alpha):.10g}%"


def needed(e: Estimate) -> int:
    """The fewest pairs an interval (and a faster/slower verdict) at the estimate's alpha
    needs: 6 at 0.05, 8 at 0.01, 15 at 0.0001 (`signedrank.min_pairs`: 2 / 2^n <= alpha),
    never fewer than any verdict needs."""
    return max(MIN_UNITS, min_pairs(e.alpha)) if 0 < e.alpha < 1 else MIN_UNITS


def needed_for_any(e: Estimate) -> int:
    """The fewest pairs any verdict at the estimate's alpha needs: an equivalence's two
    one-sided tests reach 1 / 2^n, one pair fewer than an interval (7 at 0.01, 14 at 0.0001),
    and never fewer than MIN_UNITS."""
    return any_verdict_units(e.alpha)


def has_interval(e: Estimate) -> bool:
    return e.ci_low_pct is not None and e.ci_high_pct is not None and e.n_units >= needed(e)


def interval(e: Estimate) -> str:
    """'-12.3% [-14.1, -10.2]', or the estimate and why it has no interval ('(no interval: 10
    pairs, 15 needed for a 99.99% interval)')."""
    if e.effect_pct is None:
        return "no estimate (no block has both arms)"
    if e.ci_low_pct is not None and e.ci_high_pct is not None and has_interval(e):
        return f"{pct(e.effect_pct)} [{e.ci_low_pct:+.1f}, {e.ci_high_pct:+.1f}]"
    n, unit = e.n_units, e.unit or "pair"
    return f"{pct(e.effect_pct)} (no interval: {n} {unit}{'s' if n != 1 else ''}, " \
        f"{needed(e)} needed for a {level(e.alpha)} interval)"


def verdict(e: Estimate, *, why: bool = True) -> str:
    """The verdict in words: 'faster', 'faster, but within the ±1% margin', 'equivalent
    (within ±1%)', 'inconclusive', 'inconclusive after adjustment' (`adjusted_away`;
    `why`=False, for a table's narrow column: 'inconclusive'), 'no verdict yet'."""
    v, m = str(e.verdict), f"±{100 * e.margin:g}%"
    if v in ("faster", "slower"):
        return f"{v}, but within the {m} margin" if e.within_margin else v
    if v == "equivalent":
        return f"equivalent (within {m})"
    if e.n_units < needed(e):
        return "no verdict yet"
    if why and adjusted_away(e):
        return "inconclusive after adjustment"
    return "inconclusive"


def adjusted_away(e: Estimate) -> bool:
    """Whether the comparison's own interval excludes zero while its verdict, adjusted across
    the report's comparisons, is not decided (its own p below alpha, the adjusted one not)."""
    return has_interval(e) and multiple.undecided_by_adjustment(
        e.p_value, e.p_adjusted, e.alpha, e.ci_low_pct, e.ci_high_pct)


def decided_win(e: Estimate) -> bool:
    return e.verdict == WINS and not e.within_margin


@dataclass
class Findings:
    """What the answer is drawn from: the comparisons, a factorial's effects, the warnings
    and the series' names (the report's `Result`, or the run summary's parts of it)."""

    comparisons: list[Comparison]
    factorial: Factorial | None
    warnings: list[str]
    series: list[str]
    costs: Costs | None = None  # what each arm costs (the trade the answer states)
    # comparison -> its round trip after each trial's first second, where that differs
    settled: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, result: Result) -> Findings:
        return cls(result.comparisons, result.factorial, result.warnings,
                   [s.name for s in result.series], result.costs, settled_apart(result))


def settled_apart(result: Result) -> dict[str, str]:
    """Per request-level comparison whose round-trip estimate lies outside the interval of
    its effect after each trial's first second: 'after each trial's first second +5.2% [+4.2,
    +7.3]' (the trials' new connections' first touches are a part of the round trip; the
    report's "after 1st s")."""
    out = {}
    for e in result.server_cpu.entries if result.server_cpu else []:
        lo, hi, mid = e.settled_ci_low_pct, e.settled_ci_high_pct, e.settled_effect_pct
        trip = e.round_trip_effect_pct
        if lo is not None and hi is not None and mid is not None and trip is not None \
                and not lo <= trip <= hi:
            out[e.comparison] = (f"after each trial's first second {pct(mid)} "
                                 f"[{lo:+.1f}, {hi:+.1f}]")
    return out


@dataclass
class Names:
    """Short names for cells: the levels that differ from the scenario's baseline cell, and
    the scenario (only the scenario factors that vary) as a group name."""

    levels: dict[str, dict[str, str]] = field(default_factory=dict)
    arm_factors: list[str] = field(default_factory=list)
    scenario_factors: list[str] = field(default_factory=list)
    # a host condition's levels with what their trials measured ('host=fragmented' -> 'a
    # fragmented host: 5% of free memory in blocks of order >= 9, measured')
    places: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, f: Factorial | None) -> Names:
        """The names of a factorial's cells (none for a flat run)."""
        if f is None:
            return cls()
        arm = [x.name for x in f.factors if not x.scenario and not x.condition]
        scen = [x.name for x in f.factors if (x.scenario and len(x.levels) > 1) or x.condition]
        return cls(dict(f.cell_levels), arm, scen, {
            f"{x.name}={lv}": f"{x.name}={lv} ({free_share(idx)})"
            for x in f.factors if x.condition for lv, idx in (x.measured or {}).items()})

    def place(self, scope: str) -> str:
        """A scope with what its host conditions measured: 'host=fragmented (5% of free
        memory in blocks of order >= 9, measured)'."""
        return ", ".join(self.places.get(part, part) for part in scope.split(", ")) \
            if scope else scope

    def _cell(self, series: str) -> tuple[dict[str, str] | None, str]:
        arm, _, target = series.rpartition("@")
        if arm in self.levels:
            return self.levels[arm], f"@{target}"
        return self.levels.get(series), ""

    def scope(self, series: str) -> str:
        lv, _ = self._cell(series)
        return "" if lv is None else ", ".join(f"{f}={lv[f]}" for f in self.scenario_factors)

    def short(self, series: str, base: str | None = None) -> str:
        """'thp' (one arm factor), 'host=thp, guest=always' (the factors that differ from
        `base`), or the series name itself outside a factorial."""
        lv, target = self._cell(series)
        if lv is None or not self.arm_factors:
            return series
        ref = self._cell(base)[0] if base else None
        diff = [f for f in self.arm_factors if ref is None or lv.get(f) != ref.get(f)]
        if len(self.arm_factors) == 1:
            return lv[self.arm_factors[0]] + target
        return (", ".join(f"{f}={lv[f]}" for f in diff) or "baseline") + target

    def pair(self, c: Comparison) -> str:
        """'thp vs 4k'; with several arm factors 'host=thp, guest=always vs baseline' (the
        baseline cell is named once, in the report's header)."""
        base = "baseline" if len(self.arm_factors) > 1 else self.short(c.baseline)
        return f"{self.short(c.candidate, c.baseline)} vs {base}"


def free_share(unusable: float) -> str:
    """The measured unusable free index for 2 MiB pages, as the share a user reads: how much
    of free memory still lies in blocks a 2 MiB page fits in."""
    return f"{100 * (1 - unusable):.0f}% of free memory in blocks of order ≥ 9, measured"


def comparison(c: Comparison, names: Names, costs: Costs | None = None,
               settled: dict[str, str] | None = None) -> Answer:
    """'thp vs 4k: -12.3% [-14.1, -10.2], faster.', with the memory trade where the
    candidate's footprint moved beyond the memory margin ('...; memory +310.0 MiB [..]
    (+12.0%), more.') and the effect after each trial's first second where it differs
    (`settled`, Findings.settled)."""
    subject = names.pair(c)
    said = [x for x in (trade.phrase(costs, c.name), (settled or {}).get(c.name)) if x]
    return Answer(subject, f"{subject}: {interval(c)}, {verdict(c)}"
                  + "".join(f"; {x}" for x in said) + ".", str(c.verdict),
                  names.scope(c.candidate))


def size(e: Estimate) -> float:
    """The effect's size (0 without an estimate)."""
    return abs(e.effect_pct or 0.0)


def _rank(levels: Sequence[Estimate]) -> float:
    decided = [size(e) for e in levels if e.verdict in ("faster", "slower")]
    return max(decided) + 1e6 if decided else max(size(e) for e in levels)


def _counts(levels: list[Effect]) -> str:
    said: dict[str, int] = {}
    for e in levels:
        said[verdict(e)] = said.get(verdict(e), 0) + 1
    return ", ".join(f"{n} {v}" for v, n in said.items())


def factor(name: str, levels: list[Effect]) -> Answer:
    """One factor's overall main effects: the one level, or the largest and the tally."""
    levels = sorted(levels, key=lambda e: -size(e))
    base = levels[0].base_level
    if len(levels) == 1:
        e = levels[0]
        return Answer(name, f"{name}: {e.level} vs {base}: {interval(e)}, {verdict(e)}.",
                      str(e.verdict))
    wins = [e for e in levels if e.verdict in ("faster", "slower")]
    head = f"{name} ({len(levels)} levels vs {base})"
    if wins:
        top = wins[0]
        text = (f"{head}: the largest difference is {top.level}, {interval(top)}, "
                f"{verdict(top)}; all levels: {_counts(levels)}.")
    else:
        top = levels[0]
        said = {verdict(e) for e in levels}
        tally = f"{said.pop()} for any level" if len(said) == 1 else _counts(levels)
        text = f"{head}: {tally}; the largest estimate is {top.level}, {interval(top)}."
    return Answer(name, text, str(top.verdict))


def factors(f: Factorial | None) -> list[Answer]:
    """Per factor (overall main effects), the factor with a verdict of difference first."""
    overall = [e for e in (f.main_effects if f else [])
               if e.scope == "overall" and e.effect_pct is not None]
    by: dict[str, list[Effect]] = {}
    for e in overall:
        by.setdefault(e.factor, []).append(e)
    return [factor(name, lv) for name, lv in sorted(by.items(), key=lambda kv: -_rank(kv[1]))]


def interactions(f: Factorial | None) -> Answer | None:
    """The interactions in one sentence: those found, or that none was among N tested."""
    top = [e for e in (f.interactions if f else []) if e.scope == "overall"]
    if not top:
        return None
    found = [e for e in top if e.interaction_verdict == "interaction"]
    if found:
        said = "; ".join(f"{e.factor}={e.level}'s effect changes by {interval(e)} when "
                         f"{e.by} is {e.by_level} instead of {e.by_base}"
                         for e in found[:3])
        more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
        return Answer("interactions", f"Interactions: {said}{more}.", "interaction")
    eq = sum(1 for e in top if e.interaction_verdict == "equivalent")
    return Answer("interactions", f"No interaction detected among {len(top)} tested"
                  + (f" ({eq} shown equivalent)" if eq else "") + ".", "none")


def conditions(f: Factorial) -> list[Answer]:
    """Per level of a host condition, the other factors' effects on a host in that state:
    'host=fragmented (12% of free memory in blocks of order ≥ 9, measured): backing thp vs
    4k -9.0% [..], faster.'"""
    names = Names.of(f)
    out = []
    for x in f.factors:
        if not x.condition:
            continue
        for lv in x.levels:
            scope = f"{x.name}={lv}"
            mine = sorted((e for e in f.main_effects if e.scope == scope), key=lambda e: -size(e))
            if mine:
                said = "; ".join(f"{e.factor} {e.level} vs {e.base_level} {interval(e)}, "
                                 f"{verdict(e)}" for e in mine)
                out.append(Answer(scope, f"{names.place(scope)}: {said}.", str(mine[0].verdict),
                                  scope))
    return out


def answers(found: Findings) -> list[Answer]:
    """The answer: per factor for a factorial (and per host condition), else per
    comparison."""
    if found.factorial is not None and found.factorial.main_effects:
        out = factors(found.factorial) + conditions(found.factorial)
        inter = interactions(found.factorial)
        return out + ([inter] if inter else [])
    names = Names.of(found.factorial)
    return [comparison(c, names, found.costs, found.settled) for c in found.comparisons]


def _scoped(found: Findings, names: Names) -> dict[str, list[Comparison]]:
    out: dict[str, list[Comparison]] = {}
    for c in found.comparisons:
        out.setdefault(names.scope(c.candidate), []).append(c)
    return out


def _blocks_short(comps: list[Comparison]) -> tuple[list[Comparison], int, int]:
    """The comparisons with too few pairs for a verdict, the fewest pairs among them and the
    most any of them needs."""
    few = [c for c in comps if c.n_units < needed(c)]
    if not few:
        return [], 0, 0
    return few, min(c.n_units for c in few), max(needed(c) for c in few)


def _plan_words(have: int, more: int = 0, what: str = "a verdict needs") -> str:
    """Where `hugelab plan` comes in after `more` further blocks: it reads a pilot of
    MIN_PILOT blocks, so below that it is named with the blocks it still needs."""
    if have + more >= MIN_PILOT:
        return f"`hugelab plan` says how many {what}"
    return (f"`hugelab plan` says how many {what} once the run has {MIN_PILOT} blocks "
            f"({MIN_PILOT - have} more)")


def _fewest(comps: list[Comparison]) -> int:
    return min((c.n_units for c in comps), default=0)


def _not_yet(comps: list[Comparison], names: Names) -> str:
    few, have, need = _blocks_short(comps)
    if few and len(few) == len(comps):
        return (f"no recommendation yet: run at least {need - have} more block(s), then "
                + _plan_words(have, need - have))
    if few:
        return (f"no recommendation yet: {len(few)} of {len(comps)} comparisons have too few "
                f"pairs ({have} of {need} needed): at least {need - have} more "
                "block(s), then " + _plan_words(have, need - have))
    if all(c.verdict == "inconclusive" for c in comps):
        return ("no recommendation yet: no arm differs from its baseline beyond doubt, nor is "
                "shown equivalent: " + _plan_words(_fewest(comps), 0, "blocks would settle it"))
    return "no recommendation yet: no arm beats " + names.short(comps[0].baseline) + \
        f" beyond the ±{100 * comps[0].margin:g}% margin, and {_open(comps, names)}"


def _list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _open(comps: list[Comparison], names: Names) -> str:
    """'4k is undecided (inconclusive): `hugelab plan` says how many blocks would settle
    it', for the comparisons without a verdict."""
    open_ = [c for c in comps if c.verdict not in ("faster", "slower", "equivalent")]
    few, have, need = _blocks_short(open_)
    said = _list([names.short(c.candidate, c.baseline) for c in open_])
    text = f"{said} {'is' if len(open_) == 1 else 'are'} undecided (" + \
        ", ".join(sorted({verdict(c) for c in open_})) + ")"
    if few:
        return text + f": at least {need - have} more block(s), then " + \
            _plan_words(have, need - have)
    return text + ": " + _plan_words(_fewest(open_), 0, "blocks would settle it")


def _cost(c: Comparison) -> str:
    """What a slower arm costs, as a positive share: '2.7% [1.4, 3.9]' (of time where lower
    is better, of throughput where higher is)."""
    e, lo, hi = abs(c.effect_pct or 0.0), c.ci_low_pct, c.ci_high_pct
    if not has_interval(c) or lo is None or hi is None:
        return f"{e:.1f}%"
    lo, hi = sorted((abs(lo), abs(hi)))
    return f"{e:.1f}% [{lo:.1f}, {hi:.1f}]"


def _keep(comps: list[Comparison], names: Names) -> str:
    """The baseline is best: no arm beats it and some are slower beyond doubt and the margin.
    'keep thp, since disable-thp costs 2.7% [1.4, 3.9]; 4k is within ±1% of it; ...'."""
    base = names.short(comps[0].baseline)
    slower = sorted((c for c in comps if c.verdict == "slower" and not c.within_margin),
                    key=lambda c: -size(c))
    same = [c for c in comps if c.verdict == "equivalent" or
            (c.verdict in ("faster", "slower") and c.within_margin)]
    text = f"keep {base}, since " + _list(
        [f"{names.short(c.candidate, c.baseline)} costs {_cost(c)}" for c in slower])
    if same:
        text += f"; {_list([names.short(c.candidate, c.baseline) for c in same])} " \
            f"{'is' if len(same) == 1 else 'are'} within ±{100 * comps[0].margin:g}% of it"
    if len(slower) + len(same) < len(comps):
        text += "; " + _open(comps, names)
    return text


def overlap(a: Estimate, b: Estimate) -> bool:
    """Whether two comparisons' intervals overlap (neither shown better than the other)."""
    if not (has_interval(a) and has_interval(b)):
        return False
    assert a.ci_low_pct is not None and a.ci_high_pct is not None
    assert b.ci_low_pct is not None and b.ci_high_pct is not None
    return a.ci_low_pct <= b.ci_high_pct and b.ci_low_pct <= a.ci_high_pct


def _use(wins: list[Comparison], names: Names, base: str, costs: Costs | None = None) -> str:
    """'use thp: ... vs 4k', the arms as good, the runner-up's share, and what each arm it
    names costs in memory beyond the margin."""
    best = wins[0]
    text = f"use {names.short(best.candidate, best.baseline)}: {interval(best)} vs {base}"
    close = [c for c in wins[1:] if overlap(best, c)]
    if close:  # the ranking among them is the point estimates', not a verdict
        text += f" ({', '.join(names.short(c.candidate, c.baseline) for c in close)} as " \
            "good within the intervals)"
    if len(wins) > 1 and best.effect_pct:
        share = (wins[1].effect_pct or 0.0) / best.effect_pct
        text += f"; {names.short(wins[1].candidate, wins[1].baseline)} gets " \
            f"{share:.0%} of that"
    named = [best, *close] + ([wins[1]] if len(wins) > 1 and wins[1] not in close else [])
    for c in named:
        text += trade.cost_note(costs, c.name, names.short(c.candidate, c.baseline)) or ""
    return text


def recommend(comps: list[Comparison], names: Names, costs: Costs | None = None) -> str:
    """One sentence for a group of comparisons against one baseline: use the best arm that
    beats it, keep the baseline when some arm is slower and none beats it, nothing to gain
    when every arm is within the margin, or what would settle it."""
    base = names.short(comps[0].baseline)
    wins = sorted((c for c in comps if decided_win(c)), key=lambda c: -size(c))
    if wins:
        return _use(wins, names, base, costs)
    if all(c.verdict == "equivalent" or (c.verdict in ("faster", "slower")
                                           and c.within_margin) for c in comps):
        m = f"±{100 * comps[0].margin:g}%"
        return f"nothing to gain: every arm is within {m} of {base}; keep {base}"
    if any(c.verdict == "slower" and not c.within_margin for c in comps):
        return _keep(comps, names)
    return _not_yet(comps, names)


def recommendations(found: Findings) -> list[str]:
    """One sentence per scenario ('workload=chase: use thp: ...'), or one for a flat run."""
    names = Names.of(found.factorial)
    out = []
    for scope, comps in _scoped(found, names).items():
        text = recommend(comps, names, found.costs)
        out.append(f"{names.place(scope)}: {text}" if scope else text[0].upper() + text[1:])
    return out
