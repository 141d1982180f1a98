"""The fleet report's tables (pure: a FleetReport in, Tables out), which every renderer shows."""

from __future__ import annotations

from datetime import UTC, datetime

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


def _when(created: float | None) -> str:
    if created is None:
        return "unknown"
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%d %H:%M")


def _units(r: FleetReport) -> str:
    return f"{r.unit}s"


def hosts_table(r: FleetReport) -> Table:
    runs = r.unit == "run"  # a run's label is its id: say when it was made instead
    t = Table("hosts", f"{_units(r).capitalize()} ({len(r.hosts)})",
              [r.unit, "made (UTC)" if runs else "run", "status", "ok", "flagged", "failed",
               "accel", "group"], [], right={1, 3, 4, 5})
    for h in r.hosts:
        second = _when(h.created) if runs else str(h.run_id)
        t.rows.append([h.label, second, h.status, f"{h.ok:,}", f"{h.flagged:,}",
                       f"{h.failed:,}", h.facts["accel"], str(list(r.groups).index(h.group) + 1)])
    t.notes += [f"group {i}: {g}" for i, g in enumerate(r.groups, 1)]
    return t


def facts_table(r: FleetReport) -> Table:
    shown = [f for f in FACTS if f != "accel"]
    t = Table("facts", "Host facts that may explain differences",
              [r.unit, *(FACT_TITLES[f] for f in shown)], [])
    for h in r.hosts:
        t.rows.append([h.label, *(h.facts[f] for f in shown)])
    t.notes.append("from each run's host record and its trials' provenance; 'unknown': not "
                   "recorded")
    return t


def pooled_table(r: FleetReport) -> Table:
    conf = confidence(r.options.alpha)
    family = sum(c.pooled is not None for c in r.comparisons)
    new = "next run" if r.unit == "run" else f"new {r.unit}"
    t = Table("pooled", f"Across {_units(r)} (random effects; Holm across {family} pooled "
              f"comparison(s), alpha {r.options.alpha:g}, equivalence margin "
              f"±{100 * r.options.margin:g}%)",
              ["comparison", "verdict", ci_column(r.options.alpha), _units(r), "tau", "I²",
               "Q p", f"{new} [{conf:g}% PI]"], [], right={2, 3, 4, 5, 6, 7})
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
    beyond = ("a run not yet made (3+ runs)" if r.unit == "run" else
              f"a {r.unit} not in the fleet (3+ {_units(r)})")
    t.notes.append(f"effect: pooled Hodges-Lehmann shifts (each {r.unit} weighted by 1/(SE² + "
                   f"tau²), Paule-Mandel tau²), Hartung-Knapp-Sidik-Jonkman interval with "
                   f"t(k-1); tau: spread of true effects between {_units(r)}; I²: share of the "
                   f"spread not due to noise; Q p: test that {_units(r)} agree; {new}: "
                   f"prediction interval for the effect on {beyond}")
    if r.unit == "run":
        t.notes.append("each run's own interval describes its own minutes; across runs, tau is "
                       "how far the effect itself moved from run to run; the next run's interval "
                       "is for its true effect (what it reads adds its own noise)")
    return t


def comparison_table(c: FleetComparison, alpha: float, index: int = 0,
                     unit: str = "host") -> Table:
    t = Table(f"per-host-{index}", f"Per {unit}: {c.name}",
              [unit, "verdict", ci_column(alpha), "n", "weight", "p (Holm)"], [],
              right={2, 3, 4, 5})
    for e in c.hosts:
        w = "-" if e.weight is None else f"{100 * e.weight:.0f}%"
        t.rows.append([e.label, e.verdict, _effect(e.effect_pct, e.ci_low_pct, e.ci_high_pct),
                       str(e.n_units), w if e.pooled else "not pooled",
                       pval(None if not np.isfinite(e.p_adjusted) else e.p_adjusted)])
        t.notes += [f"{e.label}: {n}" for n in e.notes if SAID_AS_WARNING not in n]
    t.notes.append(f"each {unit}'s own result, as `hugelab report RUN` gives it (Holm across "
                   "that run's comparisons)")
    return t


def groups_table(r: FleetReport) -> Table:
    t = Table("groups", "Groups of alike hosts (CPU model, pdpe1gb, kernel major.minor, accel)",
              ["group", "comparison", "verdict", ci_column(r.options.alpha), _units(r), "how"],
              [], right={3})
    for c in r.comparisons:
        for g in c.groups:
            t.rows.append([g.group, c.name, g.verdict,
                           _effect(g.effect_pct, g.ci_low_pct, g.ci_high_pct),
                           ", ".join(g.labels), g.how])
    t.notes.append(f"a group of two or more {_units(r)} is pooled like the whole (Holm across "
                   f"every group claim); a group of one shows its {r.unit}'s own result")
    return t


def all_tables(r: FleetReport) -> list[Table]:
    """Every table; runs made on one kind of host leave out the host facts and the groups,
    which would repeat the pooled table."""
    alike = r.unit == "run" and len(r.groups) < 2
    return [pooled_table(r), hosts_table(r), *([] if alike else [facts_table(r)]),
            *(comparison_table(c, r.options.alpha, i, r.unit)
              for i, c in enumerate(r.comparisons, 1)),
            *([] if alike else [groups_table(r)])]


def title(r: FleetReport) -> str:
    """The page's title: a fleet's report, or one across runs."""
    return "hugelab report across runs" if r.unit == "run" else "hugelab fleet report"


def header(r: FleetReport) -> str:
    groups = ("" if r.unit == "run" and len(r.groups) < 2 else
              f"{len(r.groups)} group(s) of alike hosts, ")
    return (f"experiment '{r.experiment}' on {len(r.hosts)} {r.unit}(s), {groups}"
            f"{len(r.comparisons)} comparison(s)")
