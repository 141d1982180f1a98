"""The paired verdicts of the comparisons, of each latency percentile, and of the server's CPU
per operation (request-level trials)."""

from __future__ import annotations

from hugelab.report.model.result import DaemonCpu, Result, ServerCpuEntry
from hugelab.report.sections.labels import (
    SAID_AS_WARNING,
    comparison_label,
    effect,
    folded,
    no_interval_note,
    verdict_text,
)
from hugelab.report.table import Table, ci_column, confidence, num, pval


def verdicts(result: Result) -> Table:
    o = result.options
    family = f"{o.holm_family} claims" if result.factorial else \
        f"{o.holm_family} comparison(s)"
    t = Table("verdicts", f"Paired verdicts (by block; Holm across {family}, "
              f"alpha {o.alpha:g}, equivalence margin ±{100 * o.margin:g}%)",
              ["comparison", "verdict", ci_column(result.options.alpha), "p", "TOST p", "n"], [],
              right={2, 3, 4, 5}, full=bool(result.factorial))
    per: list[tuple[str, str]] = []
    for c in result.comparisons:
        name = comparison_label(result, c)
        t.rows.append([name, verdict_text(c), effect(c), pval(c.p_adjusted),
                       pval(c.tost_p_adjusted), f"{c.n_units:,} {c.unit}s"])
        if c.blocks_dropped:
            per.append((name, f"{c.blocks_dropped} block(s) dropped (an arm missing)"))
        # too few pairs is one of the report's warnings: say it once
        per += [(name, n) for n in c.notes if SAID_AS_WARNING not in n]
    t.notes += folded(per, len(result.comparisons))
    t.notes += no_interval_note(result.comparisons)
    t.notes.append("p and TOST p are Holm-adjusted across the comparisons of this report, "
                   "both claims together (a comparison's two nulls cannot both hold, so it "
                   "counts once: Shaffer's step-down)")
    if not result.comparisons and result.run.skipped:
        t.notes.append(f"no comparisons: arm(s) {', '.join(result.run.skipped)} skipped (the "
                       "warnings say why), and no other pair of arms to compare")
    elif not result.comparisons:
        t.notes.append("no comparisons: the run has a single arm or no baseline arm")
    t.notes.append("effect: Hodges-Lehmann shift of the paired log-ratios, candidate vs "
                   "baseline (negative = smaller values)")
    return t


def tail_latency(result: Result) -> list[Table]:
    """Per-percentile latency verdicts (report/latency.py), when the workload reports them."""
    tl = result.tail_latency
    if not tl or not tl.entries:
        return []
    t = Table("tail_latency", f"Tail latency (lower is better; Holm across "
              f"{tl.holm_family} percentiles)",
              ["comparison", "percentile", "verdict", ci_column(result.options.alpha), "p", "n"], [],
              right={3, 4, 5})
    for e in tl.entries:
        t.rows.append([e.comparison, e.metric, verdict_text(e), effect(e),
                       pval(e.p_adjusted), f"{e.n_units:,}"])
    t.notes.append("each percentile of each trial (from the workload's own per-request "
                   "latencies) paired by block like the primary metric; 'faster' = a lower "
                   "latency")
    t.notes += no_interval_note(tl.entries)
    return [t]


def _daemon_cpu(d: DaemonCpu) -> str:
    return ", ".join(f"{name} {v:.3g} s" for name, v in d.median_cpu_s.items())


def _daemon_note(ds: list[DaemonCpu]) -> list[str]:
    """khugepaged's and kcompactd's CPU: once when every arm saw the same (the arms of a
    request-level trial share it), else per arm."""
    if not ds:
        return []
    head = ("khugepaged and kcompactd CPU over the trials (THP's background work, in no "
            "server's tree), median per trial")
    if all(d.median_cpu_s == ds[0].median_cpu_s for d in ds):
        return [f"{head}: {_daemon_cpu(ds[0])} (the same for every arm: the arms of a trial "
                "run at once)"]
    return [f"{head} and arm: " + "; ".join(f"{d.series}: {_daemon_cpu(d)}" for d in ds)]


def _server_row(result: Result, e: ServerCpuEntry) -> list[str]:
    trip = next((c for c in result.comparisons if c.name == e.comparison), None)
    return [e.comparison, effect(e), verdict_text(e), "-" if trip is None else effect(trip),
            settled_text(e), num(e.baseline_us_per_op, ".3g"), num(e.candidate_us_per_op, ".3g"),
            num(e.client_cpu_share, ".2f"), f"{e.n_units:,}"]


def settled_text(e: ServerCpuEntry) -> str:
    """'+4.6% [+3.9, +5.3]' for the round trip after each trial's first second, '-' without."""
    if e.settled_effect_pct is None or e.settled_ci_low_pct is None \
            or e.settled_ci_high_pct is None:
        return "-"
    return (f"{e.settled_effect_pct:+.1f}% [{e.settled_ci_low_pct:+.1f}, "
            f"{e.settled_ci_high_pct:+.1f}]")


def _server_notes(metric: str, conf: float) -> list[str]:
    return [
        "server CPU/op: the server's own cost of a request, its process tree's CPU time over "
        "the trial / the trial's operations, paired by block like the primary metric; "
        "'faster' = less CPU per operation",
        f"round trip: the comparison's primary effect on {metric} with its {conf:g}% CI (as "
        "in the verdicts), which also holds the client and the network stack: a server effect "
        "larger than the round trip's means the client dilutes it (a rate's +x% is a time per "
        "operation of 1/(1+x) - 1)",
        "after 1st s: the round trip's effect over each trial's blocks after its first second, "
        "with its interval: a trial's new connections first touch the server's memory then (a "
        "4 KiB server's backends fault in its shared buffers), which a long-lived connection "
        "pays once; where it differs little, the first touches go on all trial long (a large "
        "buffer pool) or cost little",
        "baseline/candidate µs: server CPU µs per operation, medians over the pairs' trials; "
        "client CPU: the client's CPU time over its windows' wall time (summed over its "
        "threads), median over both arms' trials"]


def server_cpu(result: Result) -> list[Table]:
    """Server CPU per operation beside the round-trip effect (report/servercpu.py), for
    request-level interleaved trials."""
    sc = result.server_cpu
    if not sc or not sc.entries:
        return []
    conf = confidence(result.options.alpha)
    metric = next((e.round_trip_metric for e in sc.entries if e.round_trip_metric), "primary")
    t = Table("server_cpu", "Server CPU per operation (request-level trials; lower is better; "
              f"Holm across {sc.holm_family} comparison(s))",
              ["comparison", ci_column(result.options.alpha, "server CPU/op"), "verdict", "round trip",
               "after 1st s", "baseline µs", "candidate µs", "client CPU", "n"],
              [_server_row(result, e) for e in sc.entries], right={1, 3, 4, 5, 6, 7, 8})
    t.notes += _server_notes(metric, conf) + _daemon_note(sc.thp_daemons)
    t.notes += no_interval_note(sc.entries)
    return [t]
