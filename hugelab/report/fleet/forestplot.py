"""The fleet report's forest plot: each host's effect and interval, and the pooled one."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from hugelab.report.analysis import (
    Options,
)
from hugelab.report.figure import label as plot_label
from hugelab.report.figure import png
from hugelab.report.fleet.pooling import FleetComparison
from hugelab.report.table import pct
from hugelab.stats import paired


def _host_rows(ax: Any, c: FleetComparison, y: np.ndarray) -> None:
    for e, yy in zip(c.hosts, y, strict=True):
        if not np.isfinite(e.effect_pct):
            continue
        lo = e.ci_low_pct if np.isfinite(e.ci_low_pct) else e.effect_pct
        hi = e.ci_high_pct if np.isfinite(e.ci_high_pct) else e.effect_pct
        size = 4 + (12 * e.weight if e.weight else 0)
        ax.errorbar([e.effect_pct], [yy], xerr=[[e.effect_pct - lo], [hi - e.effect_pct]],
                    fmt="s", color="#4c72b0" if e.pooled else "#999999", markersize=size,
                    capsize=2, mfc="#4c72b0" if e.pooled else "none")


def _pooled_row(ax: Any, c: FleetComparison, new: str = "a new host") -> None:
    if not np.isfinite(c.effect_pct):
        return
    p = c.pooled
    if p is not None and p.k >= 3:
        ax.hlines(0.5, float(paired.pct(p.pred_low)), float(paired.pct(p.pred_high)),
                  colors="#c44e52", linewidth=2, zorder=1,
                  label=f"prediction interval ({new})")
        ax.legend(fontsize=7, loc="best")
    lo, hi = c.ci_low_pct, c.ci_high_pct
    if np.isfinite(lo) and np.isfinite(hi):
        ax.fill([lo, c.effect_pct, hi, c.effect_pct], [0.5, 0.85, 0.5, 0.15], color="black",
                zorder=2)
    else:
        ax.plot([c.effect_pct], [0.5], "D", color="black", zorder=2)
    ax.axvline(c.effect_pct, color="black", linestyle=":", linewidth=1)


def _xlim(c: FleetComparison, margin: float) -> tuple[float, float]:
    """The range that shows every pooled host's interval, the pooled row and the margins;
    the open-ended interval of a host with too few pairs is cut at the edge."""
    xs = [0.0, -100 * margin, 100 * margin, c.effect_pct, c.ci_low_pct, c.ci_high_pct]
    xs += [e.effect_pct for e in c.hosts]
    xs += [x for e in c.hosts if e.pooled for x in (e.ci_low_pct, e.ci_high_pct)]
    if c.pooled is not None and c.pooled.k >= 3:
        xs += [float(paired.pct(c.pooled.pred_low)), float(paired.pct(c.pooled.pred_high))]
    good = [x for x in xs if np.isfinite(x) and x > -99.9]
    lo, hi = min(good), max(good)
    pad = 0.06 * (hi - lo)
    return lo - pad, hi + pad


def forest(c: FleetComparison, opts: Options, unit: str = "host") -> bytes:
    """One row per host, or per run (effect with its own interval; marker size by weight,
    hollow grey: not pooled) and the pooled diamond with the prediction interval for a new
    host (the next run) in red."""
    n = len(c.hosts)
    fig = Figure(figsize=(8, 1.6 + 0.28 * (n + 2)), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(n)[::-1] + 2.0
    _host_rows(ax, c, y)
    _pooled_row(ax, c, "the next run" if unit == "run" else f"a new {unit}")
    for s in (-1, 1):
        ax.axvline(100 * s * opts.margin, color="#c44e52", linestyle=":", linewidth=1)
    ax.axvline(0, color="grey", linewidth=0.5)
    names = [plot_label(f"{e.label} ({e.verdict})") for e in c.hosts]
    ax.set_yticks([*y, 0.5], [*names, plot_label(f"pooled ({c.verdict})")], fontsize=7)
    ax.set_ylim(-0.2, n + 1.8)
    ax.set_xlim(*_xlim(c, opts.margin))
    ax.set_xlabel(f"candidate vs baseline, % ({100 * (1 - opts.alpha):g}% intervals; dotted red: "
                  f"±{100 * opts.margin:g}% margin)")
    tau = "" if c.pooled is None else (f"; tau {pct(float(paired.pct(c.pooled.tau)), 1)}, "
                                       f"I² {100 * c.pooled.i2:.0f}%")
    ax.set_title(plot_label(f"Across {unit}s: {c.name}{tau}"), fontsize=10)
    return png(fig)
