"""Server CPU per operation as a verdict, for request-level interleaved trials: each trial
records its server's own CPU time per operation (`server_cpu_us_per_op`: its process tree's
CPU over the trial / the operations), what a request costs the server without the client or
the network stack. Every comparison of the report is repeated on it, paired by block like the
primary metric (lower is better), and all of them are Holm-adjusted as one family of their own
(the primary's and the tail latencies' families are separate and unchanged). Each sits beside
its comparison's round-trip (primary) effect: a server effect larger than the round trip's is
the client diluting it. Beside both, the round trip's effect after each trial's first second
(`settled_hl_log_ratio`): new connections first touch a server's memory then (a 4 KiB
server's backends fault in its shared buffers), which a long-lived connection pays once.
khugepaged's and kcompactd's CPU over the trials (huge pages' background work, in no server's
tree) is given as a median per trial and series."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from hugelab.report.latency import by_block, holm_lower
from hugelab.report.model.comparison import Comparison
from hugelab.report.model.result import DaemonCpu, ServerCpu, ServerCpuEntry
from hugelab.report.runload import RunData, ServerCpuData
from hugelab.stats import paired
from hugelab.stats.signedrank import hl_and_interval

MIN_PAIRS = 6  # blocks with a settled effect for its interval
METHOD = ("Hodges-Lehmann shift of the paired log-ratios of server CPU per operation, Wilcoxon "
          "signed-rank and TOST, Holm-adjusted across the comparisons")


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def settled(sc: ServerCpuData, blocks: list[int], ij: tuple[int, int], alpha: float
            ) -> tuple[float | None, float | None, float | None, int]:
    """The comparison's round-trip effect after each trial's first second: per block the
    candidate's settled log-ratio less the baseline's (0 where the baseline was its trial's
    reference arm, which records none), their Hodges-Lehmann shift and signed-rank 1-alpha
    interval in % (pure; None where fewer than MIN_PAIRS blocks have it)."""
    i, j = ij
    reference = not any(k[1] == i for k in sc.settled)  # the baseline records none anywhere
    d = [sc.settled[(b, j)] - (0.0 if reference else sc.settled[(b, i)]) for b in blocks
         if (b, j) in sc.settled and (reference or (b, i) in sc.settled)]
    if len(d) < MIN_PAIRS:
        return None, None, None, len(d)
    hl, lo, hi, _m = hl_and_interval(np.asarray(d)[None, :], alpha)
    pct = [100.0 * math.expm1(float(x[0])) for x in (hl, lo, hi)]
    return pct[0], pct[1], pct[2], len(d)


def _entry(sc: ServerCpuData, name: str, blocks: list[int], ij: tuple[int, int],
           trip: Comparison | None, metric: str | None, t: paired.Comparison
           ) -> ServerCpuEntry:
    i, j = ij
    share = [sc.client_share[k] for b in blocks for k in ((b, i), (b, j))
             if k in sc.client_share]
    return ServerCpuEntry(
        name, len(blocks), _median([sc.us_per_op[(b, i)] for b in blocks]),
        _median([sc.us_per_op[(b, j)] for b in blocks]), _median(share),
        metric if trip else None, trip.effect_pct if trip else None,
        trip.ci_low_pct if trip else None, trip.ci_high_pct if trip else None,
        *settled(sc, blocks, ij, t.alpha), **t.to_dict())


def daemons(sc: ServerCpuData, data: RunData) -> list[DaemonCpu]:
    """Per series, the median per trial of each THP daemon's CPU seconds (pure)."""
    return [DaemonCpu(data.series[i], max(len(v) for v in by.values()),
                      {name: float(np.median(v)) for name, v in sorted(by.items())})
            for i, by in sorted(sc.daemons.items()) if by]


def server_cpu(sc: ServerCpuData | None, comparisons: Sequence[Any],
               primary: Sequence[Comparison], data: RunData, *, alpha: float, margin: float
               ) -> ServerCpu | None:
    """The report's `server_cpu` section: every comparison (`Paired`: name, baseline,
    candidate, blocks) on server CPU per operation as one Holm family, each beside its primary
    comparison (`primary`, by name); None for runs without the metric."""
    if sc is None:
        return None
    found = []
    for p in comparisons:
        ij = (data.index(p.baseline), data.index(p.candidate))
        blocks, b, c = by_block(sc.us_per_op, p, *ij)
        if blocks:
            found.append((p.name, blocks, ij, b, c))
    tests = holm_lower([(name, b, c) for name, _k, _ij, b, c in found], alpha=alpha,
                       margin=margin)
    trips = {c.name: c for c in primary}
    entries = [_entry(sc, name, blocks, ij, trips.get(name), data.details[ij[0]].metric, t)
               for (name, blocks, ij, _b, _c), t in zip(found, tests, strict=True)]
    return ServerCpu(len(entries), "lower", entries, daemons(sc, data), METHOD)
