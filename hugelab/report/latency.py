"""Tail latency as a verdict: for workloads that report latency percentiles per trial
(postgres: p50_ms .. p99_9_ms from pgbench's log; redis: get_p99_ms, ...), every comparison
of the report is repeated on each percentile, paired by block like the primary metric
(Hodges-Lehmann shift of the log-ratios, signed-rank test, TOST at the report's margin; lower
is better), and all of them, every percentile of every comparison, are Holm-adjusted as one
family of their own: a p99 verdict is never a lucky one among many looks. The primary metric's
family is separate and unchanged. Validated by simulation (tests/test_report_latency.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hugelab.report.model.result import LatencyEntry, TailLatency
from hugelab.report.runload import Latencies, RunData, percentile_of
from hugelab.stats import multiple, paired


def holm_lower(pairs: Sequence[tuple[str, np.ndarray, np.ndarray]], *, alpha: float,
               margin: float) -> list[paired.Comparison]:
    """Each (unique key, baseline values, candidate values) compared by block, lower is
    better, Holm-adjusted across all of them as one family; in the given order (pure)."""
    raw = {k: paired.compare(b, c, better="lower", alpha=alpha, margin=margin)
           for k, b, c in pairs}
    adjusted = multiple.adjust(raw) if raw else {}
    return [adjusted[k] for k, _b, _c in pairs]


def by_block(vals: dict[tuple[int, int], float], p: Any, i: int, j: int
             ) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The blocks of comparison `p` (`Paired`) where series i and j both have a value in
    `vals` ((block, series) -> value), and those values: (blocks, baseline, candidate)."""
    blocks = [int(k) for k in p.blocks if (int(k), i) in vals and (int(k), j) in vals]
    return (blocks, np.array([vals[(k, i)] for k in blocks]),
            np.array([vals[(k, j)] for k in blocks]))


def family(pairs: Sequence[tuple[str, str, np.ndarray, np.ndarray]], *, alpha: float,
           margin: float) -> list[LatencyEntry]:
    """(comparison, metric, baseline values, candidate values) -> one entry each, with its
    paired effect and verdict Holm-adjusted across all of them (pure)."""
    tests = holm_lower([(f"{name}\0{metric}", b, c) for name, metric, b, c in pairs],
                       alpha=alpha, margin=margin)
    return [LatencyEntry(name, metric, percentile_of(metric), int(b.size), **t.to_dict())
            for (name, metric, b, _c), t in zip(pairs, tests, strict=True)]


METHOD = ("per percentile: Hodges-Lehmann shift of paired log-ratios, Wilcoxon signed-rank and "
          "TOST, Holm-adjusted across every percentile of every comparison")


def tail_latency(lat: Latencies, comparisons: Sequence[Any], data: RunData, *,
                 alpha: float, margin: float) -> TailLatency | None:
    """The report's `tail_latency` section: every percentile of every comparison (`Paired`:
    name, baseline, candidate, blocks) as one Holm family; None without latency metrics."""
    if not lat:
        return None
    pairs = []
    for p in comparisons:
        i, j = data.index(p.baseline), data.index(p.candidate)
        for metric in sorted(lat, key=lambda k: (k.rsplit("p", 1)[0], percentile_of(k) or 0)):
            blocks, b, c = by_block(lat[metric], p, i, j)
            if blocks:
                pairs.append((p.name, metric, b, c))
    entries = family(pairs, alpha=alpha, margin=margin)
    return TailLatency(len(entries), "lower", entries, METHOD)
