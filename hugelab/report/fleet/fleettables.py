"""The fleet report's tables (pure: a FleetReport in, Tables out), which every renderer shows."""

from __future__ import annotations

import numpy as np

from hugelab.report.fleet.pooling import FleetComparison, FleetReport
from hugelab.report.sections.labels import SAID_AS_WARNING
from hugelab.report.table import Table, ci_column, confidence, pct, pval
from hugelab.stats import paired

FACTS = ("cpu_model", "pdpe1gb", "kernel", "memory", "numa_nodes", "thp", "accel", "cpus", "arch")
FACT_TITLES = {"cpu_model": "CPU model", "pdpe1gb": "pdpe1gb", "kernel": "kernel",
               "memory": "memory", "numa_nodes": "NUMA nodes", "thp": "THP enabled/defrag",
               "accel": "accel", "cpus": "CPUs", "arch": "arch"}


def _effect(e: float, lo: float, hi: float) -> str:
    def cell(v: float) -> str:
        return pct(None if not np.isfinite(v) else v, 1)
    return f"{cell(e)} [{cell(lo)}, {cell(hi)}]"


def hosts_table(r: FleetReport) -> Table:
    t = Table("hosts", f"Hosts ({len(r.hosts)})",
              ["host", "run", "status", "ok", "flagged", "failed", "accel", "group"], [],
              right={1, 3, 4, 5})
    for h in r.hosts:
        t.rows.append([h.label, str(h.run_id), h.status, f"{h.ok:,}", f"{h.flagged:,}",
                       f"{h.failed:,}", h.facts["accel"], str(list(r.groups).index(h.group) + 1)])
    t.notes += [f"group {i}: {g}" for i, g in enumerate(r.groups, 1)]
    return t


def facts_table(r: FleetReport) -> Table:
    shown = [f for f in FACTS if f != "accel"]
    t = Table("facts", "Host facts that may explain differences",
              ["host", *(FACT_TITLES[f] for f in shown)], [])
    for h in r.hosts:
        t.rows.append([h.label, *(h.facts[f] for f in shown)])
    t.notes.append("from each run's host record and its trials' provenance; 'unknown': not "
                   "recorded")
    return t


def pooled_table(r: FleetReport) -> Table:
    conf = confidence(r.options.alpha)
    family = sum(c.pooled is not None for c in r.comparisons)
    t = Table("pooled", f"Across hosts (random effects; Holm across {family} pooled "
              f"comparison(s), alpha {r.options.alpha:g}, equivalence margin "
              f"±{100 * r.options.margin:g}%)",
              ["comparison", "verdict", ci_column(r.options.alpha), "hosts", "tau", "I²",
               "Q p", f"new host [{conf:g}% PI]"], [], right={2, 3, 4, 5, 6, 7})
    for c in r.comparisons:
        p = c.pooled
        het = ["-", "-", "-", "-"] if p is None else [
            pct(float(paired.pct(p.tau)), 1), f"{100 * p.i2:.0f}%", pval(p.q_p),
            "-" if p.k < 3 else _effect(float("nan"), float(paired.pct(p.pred_low)),
                                        float(paired.pct(p.pred_high))).split(" ", 1)[1]]
        t.rows.append([c.name, c.verdict, _effect(c.effect_pct, c.ci_low_pct, c.ci_high_pct),
                       str(p.k if p else sum(e.pooled for e in c.hosts)), *het])
        t.notes += [f"{c.name}: {n}" for n in c.notes]
        if p is None:
            t.notes.append(f"{c.name}: {c.how}")
    t.notes.append("effect: pooled Hodges-Lehmann shifts (each host weighted by 1/(SE² + tau²), "
                   "Paule-Mandel tau²), Hartung-Knapp-Sidik-Jonkman interval with t(k-1); tau: "
                   "spread of true effects between hosts; I²: share of the spread not due to "
                   "noise; Q p: test that hosts agree; new host: prediction interval for the "
                   "effect on a host not in the fleet (3+ hosts)")
    return t


def comparison_table(c: FleetComparison, alpha: float, index: int = 0) -> Table:
    t = Table(f"per-host-{index}", f"Per host: {c.name}",
              ["host", "verdict", ci_column(alpha), "n", "weight", "p (Holm)"], [],
              right={2, 3, 4, 5})
    for e in c.hosts:
        w = "-" if e.weight is None else f"{100 * e.weight:.0f}%"
        t.rows.append([e.label, e.verdict, _effect(e.effect_pct, e.ci_low_pct, e.ci_high_pct),
                       str(e.n_units), w if e.pooled else "not pooled",
                       pval(None if not np.isfinite(e.p_adjusted) else e.p_adjusted)])
        t.notes += [f"{e.label}: {n}" for n in e.notes if SAID_AS_WARNING not in n]
    t.notes.append("each host's own result, as `hugelab report RUN` gives it (Holm across that "
                   "run's comparisons)")
    return t


def groups_table(r: FleetReport) -> Table:
    t = Table("groups", "Groups of alike hosts (CPU model, pdpe1gb, kernel major.minor, accel)",
              ["group", "comparison", "verdict", ci_column(r.options.alpha), "hosts", "how"], [],
              right={3})
    for c in r.comparisons:
        for g in c.groups:
            t.rows.append([g.group, c.name, g.verdict,
                           _effect(g.effect_pct, g.ci_low_pct, g.ci_high_pct),
                           ", ".join(g.labels), g.how])
    t.notes.append("a group of two or more hosts is pooled like the fleet (Holm across every "
                   "group claim); a group of one shows its host's own result")
    return t


def all_tables(r: FleetReport) -> list[Table]:
    return [pooled_table(r), hosts_table(r), facts_table(r),
            *(comparison_table(c, r.options.alpha, i) for i, c in enumerate(r.comparisons, 1)),
            groups_table(r)]


def header(r: FleetReport) -> str:
    return (f"experiment '{r.experiment}' on {len(r.hosts)} host(s), "
            f"{len(r.groups)} group(s) of alike hosts, {len(r.comparisons)} comparison(s)")
