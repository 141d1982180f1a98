"""Figures for the HTML report (matplotlib, Agg, no pyplot; `figure.py`): each function returns
PNG bytes; the effect against page size is `pagesizes.py`'s.

Every figure is bounded in size whatever the number of trials: histograms are counts, ECDFs
are drawn through at most `ECDF_POINTS` quantiles, the drift plot bins pairs into at most
`DRIFT_BINS` medians, and the forest plot groups blocks into at most `FOREST_ROWS` rows.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from numpy.typing import NDArray
from scipy import stats

from hugelab.report import answer
from hugelab.report.analysis import Paired, Report
from hugelab.report.figure import label, png
from hugelab.report.model.comparison import Comparison
from hugelab.report.model.effects import AlongLine
from hugelab.report.model.series import Series
from hugelab.report.pagesizes import page_size_points, page_sizes
from hugelab.report.tradeplot import speed_memory
from hugelab.stats.drift import part_name, segment_bounds
from hugelab.stats.paired import MIN_UNITS

ECDF_POINTS = 1000
DRIFT_BINS = 400
RUNNING_LOOKS = 60
FOREST_ROWS = 40
OUTLIER_MARKS = 500
DISTRIBUTION_MIN = 10  # ok values a series needs for its histogram and ECDF


def _values(report: Report, i: int) -> NDArray[np.float64]:
    d = report.data
    v = d.value[(d.code == i) & (d.status == 0)]
    out: NDArray[np.float64] = v[np.isfinite(v)]
    return out


def _unit(report: Report) -> str:
    units = {s.unit for s in report.result.series if s.unit}
    return label(units.pop()) if len(units) == 1 else "value"


def _panels(report: Report, rows: list[Series]) -> list[list[Series]]:
    """Series grouped by scenario, metric and unit: values of one panel share a scale."""
    names = answer.Names.of(report.result.factorial)
    out: dict[tuple[str, str, str], list[Series]] = {}
    for s in rows:
        key = (names.scope(s.name), str(s.metric or ""), str(s.unit or ""))
        out.setdefault(key, []).append(s)
    return list(out.values())


def means(report: Report) -> bytes:
    """Bar chart of each arm's mean with its t-based margin of error, one panel per scenario
    and metric (their scales differ), bars labelled by the levels that name them."""
    rows = [s for s in report.result.series if s.classic]
    panels = _panels(report, rows) or [[]]
    names = answer.Names.of(report.result.factorial)
    fig = Figure(figsize=(min(12, 4 + 4 * len(panels)), 4), layout="constrained")
    conf = 100 * report.result.options.confidence
    for k, group in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        _means_panel(ax, group, names)
        scope = names.scope(group[0].name) if group else ""
        unit = label(" ".join(x for x in (group[0].metric, group[0].unit) if x)
                     if group else "")
        ax.set_ylabel(f"mean {unit}".strip())
        if scope:
            ax.set_title(label(scope), fontsize=9)
    fig.suptitle(f"Means with t-based margin of error ({conf:g}% confidence)", fontsize=10)
    return png(fig)


def _means_panel(ax: Axes, rows: list[Series], names: answer.Names) -> None:
    x = np.arange(len(rows))
    classics = [s.classic for s in rows if s.classic is not None]
    m = [c.mean or 0.0 for c in classics]
    err = [c.margin_of_error or 0.0 for c in classics]
    ax.bar(x, m, yerr=err, capsize=4, color="#4c72b0")
    ax.set_xticks(x, [label(names.short(s.name)) for s in rows], rotation=30, ha="right",
                  fontsize=8 if len(rows) > 6 else 10)
    if m:
        lo = min(a - e for a, e in zip(m, err, strict=True))
        hi = max(a + e for a, e in zip(m, err, strict=True))
        top = max(m) * 1.5  # a margin of error from two values must not flatten the bars
        hi = min(hi, top) if top > 0 else hi
        pad = max(hi - lo, abs(hi) * 1e-3, 1e-12)
        bottom = max(0.0, lo - 2 * pad)
        ax.set_ylim(bottom, hi + pad)
        if bottom > 0:
            ax.set_xlabel("(the y axis does not start at 0)", fontsize=8)


def _hist_one(ax: Axes, v: NDArray[np.float64], name: str) -> None:
    mean, sd = float(np.mean(v)), float(np.std(v, ddof=1)) if v.size > 1 else 0.0
    med = float(np.median(v))
    spread = 1.4826 * float(np.median(np.abs(v - med))) or sd
    lo, hi = float(v.min()), float(v.max())
    if spread > 0:  # robust range: a few huge stalls must not squash the shape
        lo, hi = max(lo, med - 8 * spread), min(hi, med + 8 * spread)
    if hi <= lo:
        hi = lo + max(abs(lo) * 1e-6, 1e-9)
    bins = int(np.clip(np.sqrt(v.size), 10, 60))
    counts, edges = np.histogram(v, bins=bins, range=(lo, hi))
    ax.stairs(counts, edges, fill=True, color="#4c72b0", alpha=0.8)
    out = v[np.abs(v - mean) > 3 * sd] if sd > 0 else v[:0]
    if out.size:
        marks = np.unique(np.clip(out, lo, hi))
        if marks.size > OUTLIER_MARKS:
            marks = marks[np.linspace(0, marks.size - 1, OUTLIER_MARKS).astype(int)]
        ax.plot(marks, np.zeros_like(marks), "|", color="#c44e52", markersize=14,
                markeredgewidth=1.5)
    beyond = int(np.sum((v < lo) | (v > hi)))
    ax.set_title(f"{label(name)}: n={v.size:,}, {out.size:,} beyond ±3σ"
                 + (f" ({beyond:,} off-scale, drawn at the edge)" if beyond else ""), fontsize=9)
    for k in (-3, 3):
        if sd > 0 and lo <= mean + k * sd <= hi:
            ax.axvline(mean + k * sd, color="#c44e52", linestyle=":", linewidth=1)


def shown_series(report: Report) -> list[int]:
    """Series with enough ok values to show a distribution (`DISTRIBUTION_MIN`)."""
    return [i for i in range(len(report.data.series))
            if _values(report, i).size >= DISTRIBUTION_MIN]


def histograms(report: Report, which: list[int] | None = None) -> bytes:
    """One histogram per arm (`which`: these series only); values beyond ±3σ marked in red
    below the axis."""
    which = list(range(len(report.data.series))) if which is None else which
    n = len(which)
    cols = 2 if n > 1 else 1
    rows = max(1, math.ceil(n / cols))
    fig = Figure(figsize=(10, 2.8 * rows), layout="constrained")
    for k, i in enumerate(which):
        name = report.data.series[i]
        ax = fig.add_subplot(rows, cols, k + 1)
        v = _values(report, i)
        if v.size:
            _hist_one(ax, v, name)
        else:
            ax.set_title(f"{label(name)}: no ok trials", fontsize=9)
        ax.set_xlabel(_unit(report))
    fig.suptitle("Distribution per arm (dotted: ±3σ; red ticks: values beyond ±3σ)")
    return png(fig)


def ecdfs(report: Report, which: list[int] | None = None) -> bytes:
    """Empirical CDFs of every arm (`which`: these series only) on a log x axis."""
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    q = np.linspace(0.0, 1.0, ECDF_POINTS)
    for i in range(len(report.data.series)) if which is None else which:
        name = report.data.series[i]
        v = _values(report, i)
        v = v[v > 0]
        if v.size:
            ax.step(np.quantile(v, q), q, where="post", label=label(name))
    ax.set_xscale("log")
    ax.set_xlabel(f"{_unit(report)} (log scale)")
    ax.set_ylabel("fraction of trials ≤ x")
    ax.set_title("Empirical CDF per arm")
    if ax.lines:
        ax.legend(fontsize=8)
    return png(fig)


def median_ci(x: NDArray[np.float64], alpha: float) -> tuple[float, float, float]:
    """Median and its distribution-free (binomial order-statistic) 1-alpha interval."""
    n = x.size
    j = int(stats.binom.ppf(alpha / 2, n, 0.5))  # 0-based lower rank
    mid = [(n - 1) // 2, n // 2]
    if j < 1 or n - j - 1 <= j:
        part = np.partition(x, sorted(set(mid)))
        return float(0.5 * (part[mid[0]] + part[mid[1]])), math.nan, math.nan
    ranks = sorted({j - 1, n - j, *mid})
    part = np.partition(x, ranks)
    return float(0.5 * (part[mid[0]] + part[mid[1]])), float(part[j - 1]), float(part[n - j])


def _pct(x: NDArray[np.float64] | float) -> NDArray[np.float64]:
    return np.asarray(100.0 * np.expm1(x))


def _segments(ax: Axes, report: Report, p: Paired) -> None:
    """The drift check's effect per segment (Hodges-Lehmann) as horizontal steps."""
    c = next((c for c in report.result.comparisons if c.name == p.name), None)
    dr = c.drift if c is not None else None
    if dr is None or not dr.checked or dr.n != p.blocks.size:
        return
    cut = segment_bounds(p.blocks.size, dr.segments)
    colour = "#c44e52" if dr.drifting else "#55a868"
    label = (f"effect per {part_name(dr.segments)} (HL): "
             + ("changed" if dr.drifting else "no change detected"))
    for k, (a, b) in enumerate(zip(cut[:-1], cut[1:], strict=True)):
        y = dr.segment_pct[k]
        ax.hlines(np.nan if y is None else y, p.blocks[a], p.blocks[b - 1], colors=colour,
                  linewidth=2.5, label=label if k == 0 else "_nolegend_")


def drift(report: Report, p: Paired) -> bytes:
    """Paired log-ratio (as %) against block order, binned, with the running interval."""
    d, blocks = p.log_ratio, p.blocks
    alpha = report.result.options.alpha
    margin = report.result.options.margin
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax = fig.add_subplot()
    n = d.size
    if n:
        if n > DRIFT_BINS:
            per = n // DRIFT_BINS
            cut = per * DRIFT_BINS
            ys = np.median(d[:cut].reshape(DRIFT_BINS, per), axis=1)
            xs = np.median(blocks[:cut].reshape(DRIFT_BINS, per), axis=1)
            ax.plot(xs, _pct(ys), ".", markersize=3, color="#4c72b0",
                    label=f"median of each {per:,} consecutive pairs")
        else:
            ax.plot(blocks, _pct(d), ".", color="#4c72b0", label="pair")
        looks = np.unique(np.geomspace(min(6, n), n, min(RUNNING_LOOKS, n)).astype(int))
        run = np.array([median_ci(d[:k], alpha) for k in looks])
        xb = blocks[looks - 1]
        ax.plot(xb, _pct(run[:, 0]), color="black", linewidth=1.2, label="running median")
        ax.fill_between(xb, _pct(run[:, 1]), _pct(run[:, 2]), color="grey", alpha=0.35,
                        label=f"running {100 * (1 - alpha):g}% interval")
        _segments(ax, report, p)
    for s in (-1, 1):
        ax.axhline(100 * s * margin, color="#c44e52", linestyle=":", linewidth=1)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xlabel("block (trial order)")
    ax.set_ylabel("candidate vs baseline, %")
    ax.set_title(f"Drift: {label(p.name)} (dotted: ±{100 * margin:g}% equivalence margin)")
    ax.legend(fontsize=8, loc="best")
    return png(fig)


def forest(report: Report, p: Paired, comparison: Comparison) -> bytes:
    """Per block (or group of consecutive blocks) effect with interval, and the overall one."""
    d, blocks = p.log_ratio, p.blocks
    alpha = report.result.options.alpha
    groups = np.array_split(np.arange(d.size), min(FOREST_ROWS, d.size)) if d.size else []
    labels, est, lo, hi = [], [], [], []
    for g in groups:
        m, a, b = median_ci(d[g], alpha)
        first, last = int(blocks[g[0]]), int(blocks[g[-1]])
        labels.append(f"block {first}" if first == last else f"blocks {first}-{last}")
        est.append(m)
        lo.append(a)
        hi.append(b)
    fig = Figure(figsize=(8, 1.2 + 0.22 * (len(groups) + 2)), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(groups))[::-1] + 2
    e = _pct(np.array(est, dtype=float))
    ax.errorbar(e, y, xerr=[e - _pct(np.array(lo, dtype=float)),
                            _pct(np.array(hi, dtype=float)) - e],
                fmt="s", color="#4c72b0", markersize=4, capsize=2)
    overall = comparison.effect_pct
    if isinstance(overall, float):
        clo, chi = comparison.ci_low_pct, comparison.ci_high_pct
        if isinstance(clo, float) and isinstance(chi, float):
            ax.errorbar([overall], [0.5], xerr=[[overall - clo], [chi - overall]], fmt="D",
                        color="black", capsize=4)
        ax.axvline(overall, color="black", linestyle=":", linewidth=1)
    ax.axvline(0, color="grey", linewidth=0.5)
    ax.set_yticks([*y, 0.5], [*labels, "overall (HL)"], fontsize=7)
    ax.set_xlabel("candidate vs baseline, % (median with distribution-free interval)")
    ax.set_title(f"Per-block effects: {label(p.name)}")
    return png(fig)


def along(lines: list[AlongLine]) -> bytes:
    """Effect with its interval against an ordered workload parameter (workers 1 -> 16), one
    line per factor level; log x when the levels span a factor of 4 or more."""
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    xs: list[float] = []
    names: dict[float, str] = {}  # tick labels: the levels as written (64M, not 6.7e7)
    for i, line in enumerate(lines):
        pts = line.points
        x = np.array([float(q.x) for q in pts])
        e = np.array([np.nan if q.effect_pct is None else q.effect_pct for q in pts],
                     dtype=float)
        lo = np.array([np.nan if q.ci_low_pct is None else q.ci_low_pct for q in pts],
                      dtype=float)
        hi = np.array([np.nan if q.ci_high_pct is None else q.ci_high_pct for q in pts],
                      dtype=float)
        shift = 1 + 0.015 * (i - (len(lines) - 1) / 2)  # keep overlapping bars apart
        ax.errorbar(x * shift, e, yerr=[e - lo, hi - e], fmt="o-", capsize=3, markersize=4,
                    label=label(f"{line.factor}: {line.level} vs {line.base_level}"))
        xs += list(x)
        names.update({float(q.x): str(q.level) for q in pts})
    if xs and min(xs) > 0 and max(xs) / min(xs) >= 4:
        ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(xs)), [label(names[v]) for v in sorted(set(xs))])
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set_xlabel(label(lines[0].parameter) if lines else "")
    ax.set_ylabel("effect vs baseline level, % (unadjusted interval)")
    ax.legend(fontsize=7)
    ax.set_title(f"Effects along {label(lines[0].parameter) if lines else ''}")
    return png(fig)


MAX_COMPARISON_FIGURES = 12  # per-comparison drift and forest plots: a factorial has many


def effects(report: Report) -> bytes:
    """Every comparison's effect with its interval, one row each (a point without bars has
    no interval yet)."""
    names = answer.Names.of(report.result.factorial)
    comps = [c for c in report.result.comparisons if c.effect_pct is not None]
    fig = Figure(figsize=(10, 1.4 + 0.32 * max(len(comps), 1)), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(comps))[::-1]
    for yi, c in zip(y, comps, strict=True):
        e = float(c.effect_pct or 0.0)
        lo, hi = c.ci_low_pct, c.ci_high_pct
        bars = answer.has_interval(c) and lo is not None and hi is not None
        ax.errorbar([e], [yi], xerr=[[e - (lo or 0.0)], [(hi or 0.0) - e]]
                    if bars else None, fmt="o", color=VERDICT_COLOUR.get(c.verdict, "grey"),
                    capsize=3)
    m = 100 * report.result.options.margin
    ax.axvspan(-m, m, color="#cccccc", alpha=0.5, label=f"±{m:g}% margin")
    ax.axvline(0, color="grey", linewidth=0.5)
    ax.set_yticks(y, [label(names.pair(c).removesuffix(" vs baseline")) for c in comps],
                  fontsize=8)
    ax.set_xlabel("effect vs baseline, % (Hodges-Lehmann; Holm-adjusted interval)")
    ax.set_title("Effect of each arm against its baseline"
                 + (" cell" if len(names.arm_factors) > 1 else ""))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png(fig)


VERDICT_COLOUR = {"faster": "#1b5e20", "slower": "#b71c1c", "equivalent": "#006064",
                  "inconclusive": "#8d6e00"}


def lead_figures(report: Report) -> list[tuple[str, bytes]]:
    """The figures that answer the question, shown under the answer: effect against page
    size, effects along an ordered parameter, or (neither) each comparison's effect."""
    out = []
    points = page_size_points(report)
    if points:
        out.append(("Effect against page size, vs 4 KiB pages, with intervals",
                    page_sizes(points)))
    along_ = report.result.factorial.along if report.result.factorial else []
    params = dict.fromkeys(str(line.parameter) for line in along_)
    for param in params:
        lines = [x for x in along_ if x.parameter == param]
        out.append((f"How each factor's effect changes along {param}", along(lines)))
    if not out and any(c.effect_pct is not None for c in report.result.comparisons):
        out.append(("Effect of each arm against its baseline, with intervals", effects(report)))
    return out


def detail_figures(report: Report) -> tuple[list[tuple[str, bytes]], list[str]]:
    """(caption, PNG) of the detail figures, and a note for each kind left out (too few
    values to show a distribution, too few pairs for drift and forest plots)."""
    notes = []
    trade = speed_memory(report)
    out = [("Speed against memory footprint, per arm (medians)", trade)] if trade else []
    out.append(("Means with t-based margin of error", means(report)))
    shown = shown_series(report)
    if shown:
        out += [("Distribution per arm, outliers beyond ±3σ marked", histograms(report, shown)),
                ("Empirical CDFs (log x)", ecdfs(report, shown))]
    hidden = len(report.data.series) - len(shown)
    if hidden:
        notes.append(f"histograms and CDFs left out for {hidden} of {len(report.data.series)} "
                     f"arms: fewer than {DISTRIBUTION_MIN} ok values each")
    comps = {c.name: c for c in report.result.comparisons}
    enough = [p for p in report.paired if p.b.size >= MIN_UNITS]
    for p in enough[:MAX_COMPARISON_FIGURES]:
        out.append((f"Drift over the run: {p.name}", drift(report, p)))
        out.append((f"Per-block forest plot: {p.name}", forest(report, p, comps[p.name])))
    if len(enough) < len(report.paired):
        notes.append(f"drift and forest plots left out for {len(report.paired) - len(enough)} "
                     f"comparisons with fewer than {MIN_UNITS} pairs")
    if len(enough) > MAX_COMPARISON_FIGURES:
        notes.append(f"drift and forest plots for the first {MAX_COMPARISON_FIGURES} of "
                     f"{len(enough)} comparisons (the JSON has every comparison's numbers)")
    return out, notes


def all_figures(report: Report) -> list[tuple[str, bytes]]:
    """(caption, PNG) for every figure of the report: the lead figures, then the details."""
    return lead_figures(report) + detail_figures(report)[0]
