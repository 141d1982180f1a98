"""The classic table: mean, spread and margin of error of each arm's ok values."""

from __future__ import annotations

from hugelab.report.model.result import Result
from hugelab.report.model.series import Classic
from hugelab.report.sections.labels import folded, series_label
from hugelab.report.table import Table, num, pval


def _row(name: str, c: Classic) -> list[str]:
    return [name, num(c.mean), f"{c.n:,}", num(c.stddev), num(c.min), num(c.max),
            num(c.margin_of_error), f"{c.beyond_3sigma_high}/{c.beyond_3sigma_low}",
            f"{c.beyond_6sigma_high}/{c.beyond_6sigma_low}", num(c.max_sigma, ".1f"),
            pval(c.normality.p_value)]


def classic(result: Result) -> Table:
    conf = 100 * result.options.confidence
    t = Table("classic", f"Classic table (t-based margin at {conf:g}% confidence; for reference)",
              ["arm", "mean", "N", "σ", "min", "max", "±MoE", ">3σ", ">6σ", "max σ", "norm p"],
              [], right=set(range(1, 11)), full=True)
    t.notes.append(f"σ: standard deviation; ±MoE: t-based margin of error of the mean at "
                   f"{conf:g}%; >3σ, >6σ: values beyond mean ± 3σ / 6σ (high/low); max σ: the "
                   "farthest value in σ; norm p: normality test")
    per: list[tuple[str, str]] = []
    for s in result.series:
        c = s.classic
        name = series_label(result, s.name)
        if c is None:
            t.rows.append([name, *(["-"] * 10)])
            continue
        t.rows.append(_row(name, c))
        per.append((name, f"{c.normality.reading} (expected beyond 3σ if normal: "
                          f"{c.expected_beyond_3sigma:.1f})"))
    t.notes += folded(per, len(result.series), "arms")
    return t
