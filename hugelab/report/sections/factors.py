"""A factorial's tables: main effects (overall and per scenario), two-way interactions, and
the two-way medians that go with the answer."""

from __future__ import annotations

from hugelab.report.model.effects import Factorial, TwoWay
from hugelab.report.model.result import Result
from hugelab.report.sections.labels import effect, no_interval_note, verdict_text
from hugelab.report.table import Table, confidence, num, pval


def _main(f: Factorial, conf: float, family: int) -> tuple[Table, Table]:
    main = Table("main_effects", f"Main effects of each factor (within-block contrasts; Holm "
                 f"across {family} claims)",
                 ["factor: level vs baseline", "verdict", f"effect [{conf:g}% CI]", "p", "n"],
                 [], right={2, 3, 4})
    cond = any(x.condition for x in f.factors)  # a host condition's: the answer, always shown
    scoped = Table("main_effects_scenarios", "Main effects in each scenario" +
                   (" and host condition" if cond else ""),
                   ["factor: level vs baseline", "scenario", "verdict", f"effect [{conf:g}% CI]",
                    "p", "n"], [], right={3, 4, 5}, full=not cond)
    for e in f.main_effects:
        row = [e.name.split(" [")[0], verdict_text(e), effect(e), pval(e.p_adjusted),
               f"{e.n_units:,} blocks"]
        if e.scope == "overall":
            main.rows.append(row)
        else:
            scoped.rows.append([row[0], e.scope, *row[1:]])
    main.notes.append("a main effect averages the level's effect over every other factor's "
                      "levels, within each block, over every scenario")
    main.notes += no_interval_note(f.main_effects)
    return main, scoped


def _interactions(f: Factorial, conf: float, margin: float) -> Table:
    inter = Table("interactions", "Two-way interactions (does one factor's effect depend on "
                  "another's level?)", ["interaction", "verdict", f"change [{conf:g}% CI]", "p"],
                  [], right={2, 3})
    for e in f.interactions:
        inter.rows.append([e.name, str(e.interaction_verdict), effect(e), pval(e.p_adjusted)])
    inter.notes.append("change: how much the first factor's effect (a ratio) moves when the "
                       "second goes from its baseline to the level named; 'equivalent': within "
                       f"±{100 * margin:g}%")
    return inter


def _two_way(i: int, g: TwoWay) -> Table:
    title = f"Medians: {g.rows} (rows) × {g.columns} (columns)" + \
        (f" [{g.scope}]" if g.scope != "overall" else "")
    return Table(f"two_way_{i}", title, [f"{g.rows} \\ {g.columns}", *g.column_levels],
                 [[lv, *(num(v) for v in row)]
                  for lv, row in zip(g.row_levels, g.medians, strict=True)],
                 right=set(range(1, len(g.column_levels) + 1)))


def factor_tables(result: Result) -> list[Table]:
    """Main effects (overall and per scenario) and two-way interactions of a factorial."""
    f = result.factorial
    if not f:
        return []
    o = result.options
    conf = confidence(result.options.alpha)
    main, scoped = _main(f, conf, o.holm_family)
    inter = _interactions(f, conf, o.margin)
    for name in f.not_estimable:
        main.notes.append(f"{name}: not estimable (a cell it needs has no ok trial in any "
                          "block); left out of the Holm family")
    grids = [_two_way(i, g) for i, g in enumerate(f.two_way)]
    inter.notes += no_interval_note(f.interactions)
    return [main] + ([scoped] if scoped.rows else []) + ([inter] if inter.rows else []) + grids
