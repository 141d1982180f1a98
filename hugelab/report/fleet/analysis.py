"""One experiment run on many hosts (a fleet): per-host verdicts, pooled across hosts.

Entry point (for ``hugelab report --experiment NAME``)::

    report = FleetReport.from_store(store, name, opts)   # opts: analysis.Options, optional
    render_text(report) -> str      render_markdown(report) -> str
    to_json(report) -> dict         render_html(report) -> str   (forest plots embedded)

``from_store`` takes any store with ``.runs()``, ``.values(run_id)`` and ``.trials(run_id)``
(an ``hugelab.store.SqlStore``, SQLite or PostgreSQL, is read through ``report.load.load_run``,
others trial by trial) and is the only part that reads one; ``build(name, hosts, opts)`` is pure
over loaded runs (``HostRun``: label, run row, ``RunData``).

- Hosts: the runs whose ``name`` is the experiment's, one per host label (the run's ``label``,
  else the host facts' hostname, else ``run ID``); when several runs share a label the latest
  finished one is used, else the latest, and a note says so.
- Per host and comparison: the single-run analysis (`analysis.comparisons`: Hodges-Lehmann
  effect, signed-rank interval, Holm across that run's comparisons), so a host's verdict is the
  one ``hugelab report RUN`` gives.
- Pooled: `hugelab.stats.meta` (random effects, Paule-Mandel tau^2, HKSJ interval with t_{k-1}
  and max(1, q*), prediction interval for a new host) over the hosts with at least 6 pairs, each
  contributing its Hodges-Lehmann shift with the SE from its signed-rank interval. Pooled
  verdicts are Holm-adjusted across the comparisons; with one host it is that host's result.
- Groups of alike hosts (same CPU model, pdpe1gb, kernel major.minor and accelerator): a verdict
  per group, pooled when it has two or more hosts (Holm across every group claim), else its one
  host's own.
"""

from __future__ import annotations

import base64
import io
import json
import re
import textwrap
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from hugelab.errors import UsageError
from hugelab.report import html as html_report
from hugelab.report import markdown as md_report
from hugelab.report.analysis import (
    TCG_WARNING,
    Matrix,
    Options,
    clean,
    comparisons,
    factorial_section,
)
from hugelab.report.load import RunData, SeriesDetails, from_rows, load_run
from hugelab.report.plots import label as plot_label
from hugelab.report.tables import SAID_AS_WARNING, Table, pct, pval
from hugelab.stats import meta, multiple, paired
from hugelab.store import SqlStore

UNKNOWN = "unknown"
FACTS = ("cpu_model", "pdpe1gb", "kernel", "memory", "numa_nodes", "thp", "accel", "cpus", "arch")
FACT_TITLES = {"cpu_model": "CPU model", "pdpe1gb": "pdpe1gb", "kernel": "kernel",
               "memory": "memory", "numa_nodes": "NUMA nodes", "thp": "THP enabled/defrag",
               "accel": "accel", "cpus": "CPUs", "arch": "arch"}
GROUP_FACTS = ("cpu_model", "pdpe1gb", "kernel_minor", "accel")
PROVENANCE_SAMPLE = 50  # ok trials per series read for provenance by the generic loader
DPI = 90


class FleetStore(Protocol):
    """What the fleet report reads from a store."""

    def runs(self) -> list[dict[str, Any]]: ...
    def values(self, run_id: int) -> list[tuple[int, int, str, str, str, float | None]]: ...
    def trials(self, run_id: int) -> Iterable[dict[str, Any]]: ...


# --- data -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HostRun:
    """One host's run of the experiment, loaded."""

    label: str
    run: dict[str, Any]  # a row of Store.runs(): id, status, host, trials, flagged, failed...
    data: RunData


@dataclass(frozen=True)
class HostInfo:
    label: str
    run_id: int
    status: str
    ok: int
    flagged: int
    failed: int
    facts: dict[str, str]
    group: str


@dataclass(frozen=True)
class HostEstimate:
    """One host's result for one comparison (percent = candidate vs baseline)."""

    label: str
    run_id: int
    verdict: str
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    n_units: int
    p_adjusted: float
    log_estimate: float  # Hodges-Lehmann shift (log scale), what the pooling uses
    log_se: float  # from its signed-rank interval (meta.hl_estimates); NaN: too few pairs
    pooled: bool  # included in the pooled estimate
    weight: float | None = None  # random-effects weight in the pooled estimate
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupVerdict:
    group: str
    labels: tuple[str, ...]
    verdict: str
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    how: str


@dataclass(frozen=True)
class FleetComparison:
    """One comparison across the fleet: per host, pooled, per group."""

    name: str
    baseline: str
    candidate: str
    better: str
    hosts: tuple[HostEstimate, ...]
    verdict: str
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    how: str
    pooled: meta.Pooled | None = None  # None unless two or more hosts were pooled
    p_adjusted: float = float("nan")
    tost_p_adjusted: float = float("nan")
    groups: tuple[GroupVerdict, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FleetReport:
    experiment: str
    options: Options
    hosts: tuple[HostInfo, ...]
    comparisons: tuple[FleetComparison, ...]
    groups: dict[str, tuple[str, ...]]  # group name -> host labels
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_store(cls, store: FleetStore, name: str, opts: Options | None = None
                   ) -> FleetReport:
        """The fleet report of experiment `name` from every host's run in `store`."""
        chosen, notes = select_runs(store.runs(), name)
        hosts = [HostRun(lab, run, load(store, run)) for lab, run in chosen]
        report = build(name, hosts, opts or Options())
        return replace(report, notes=(*notes, *report.notes))


# --- choosing and loading runs ----------------------------------------------------------------

def host_label(run: dict[str, Any]) -> str:
    """The run's fleet label, else its host facts' hostname, else ``run ID``."""
    host = run.get("host") or {}
    for v in (run.get("label"), host.get("hostname"), host.get("node")):
        if isinstance(v, str) and v.strip():
            return v.strip()
    return f"run {run.get('id')}"


def _latest(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    finished = [r for r in runs if r.get("status") == "finished"]
    if finished:
        return max(finished, key=lambda r: int(r["id"])), "the latest finished"
    return max(runs, key=lambda r: int(r["id"])), "the latest; none finished"


def select_runs(runs: Sequence[dict[str, Any]], name: str
                ) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(label, run) per host for experiment `name`, in label order, and notes on choices."""
    mine = [r for r in runs if r.get("name") == name]
    if not mine:
        names = sorted({str(r.get("name")) for r in runs})
        raise UsageError(f"no run of experiment '{name}' in the store",
                         hint=f"experiments: {', '.join(names)}" if names else "the store is empty")
    by_label: dict[str, list[dict[str, Any]]] = {}
    for r in mine:
        by_label.setdefault(host_label(r), []).append(r)
    out, notes = [], []
    for lab in sorted(by_label):
        group = by_label[lab]
        run, why = _latest(group)
        if len(group) > 1:
            ids = ", ".join(str(r["id"]) for r in sorted(group, key=lambda r: int(r["id"])))
            notes.append(f"host {lab}: {len(group)} runs (ids {ids}); using run {run['id']} "
                         f"({why})")
        if run.get("status") != "finished":
            notes.append(f"host {lab}: run {run['id']} has not finished (still running, or "
                         f"stopped before its last trial: `hugelab fleet run` again resumes it); "
                         f"its blocks so far are pooled")
        out.append((lab, run))
    return out, notes


def load(store: FleetStore, run: dict[str, Any]) -> RunData:
    """The run's arrays and details: `load_run` (sampled details) for an SQL store (SQLite or
    PostgreSQL), else from every trial of `trials()`."""
    if isinstance(store, SqlStore):
        return load_run(store, int(run["id"]))
    data = from_rows(run, store.values(int(run["id"])))
    details_from_trials(data, store.trials(int(run["id"])))
    return data


def details_from_trials(data: RunData, trials: Iterable[dict[str, Any]]) -> None:
    """Fill `data`'s better/metric/unit, reasons, accelerators and a provenance sample."""
    where = {(a, t): i for i, (a, t) in enumerate(zip(data.series_arm, data.series_target,
                                                      strict=True))}
    kinds: dict[int, Counter[tuple[Any, Any, Any]]] = {}
    accel: dict[str, set[str]] = {}
    for t in trials:
        i = where.get((str(t.get("arm")), str(t.get("target") or "native")))
        if i is None:
            continue
        d, prov = data.details[i], t.get("provenance") or {}
        if t.get("better") or t.get("metric"):
            kinds.setdefault(i, Counter())[(t.get("better"), t.get("metric"), t.get("unit"))] += 1
        if prov.get("accel") is not None:
            accel.setdefault(str(t.get("target", "native")), set()).add(str(prov["accel"]))
        _count_trial(d, t, prov)
    for i, c in kinds.items():
        d = data.details[i]
        d.better, d.metric, d.unit = c.most_common(1)[0][0]
    data.accel = {t: sorted(a) for t, a in sorted(accel.items())}


def _count_trial(d: SeriesDetails, t: dict[str, Any], prov: dict[str, Any]) -> None:
    if t.get("status") == "flagged":
        d.flag_reasons[t.get("flag") or "(no reason recorded)"] += 1
    elif t.get("status") == "failed":
        d.error_reasons[t.get("error") or "(no error recorded)"] += 1
    elif d.sampled < PROVENANCE_SAMPLE:
        d.sampled += 1
        d.provenance.append(prov)


# --- host facts -------------------------------------------------------------------------------

def _dig(d: dict[str, Any], *paths: str) -> Any:
    """The first of the dotted `paths` present (not None, not '') in `d`."""
    for path in paths:
        cur: Any = d
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur not in (None, ""):
            return cur
    return None


def _provenance(data: RunData, key: str) -> Any:
    seen = Counter(str(p[key]) for d in data.details for p in d.provenance if p.get(key))
    return seen.most_common(1)[0][0] if seen else None


def _yes_no(v: Any) -> str:
    return UNKNOWN if v is None else ("yes" if v else "no")


def _memory(kb: Any) -> str:
    try:
        return f"{float(kb) / 1048576:.1f} GiB"
    except (TypeError, ValueError):
        return UNKNOWN


def _numa(nodes: Any) -> str:
    if isinstance(nodes, list | tuple | dict):
        return str(len(nodes))
    return UNKNOWN if nodes is None else str(nodes)


def _thp(thp: Any) -> str:
    if not isinstance(thp, dict) or not thp:
        return UNKNOWN
    if thp.get("supported") is False:
        return "unsupported"
    return f"{thp.get('enabled') or UNKNOWN}/{thp.get('defrag') or UNKNOWN}"


def host_facts(run: dict[str, Any], data: RunData) -> dict[str, str]:
    """Facts that may explain why hosts differ, as strings ('unknown' when not recorded)."""
    host = run.get("host") or {}
    accel = sorted({a for acc in data.accel.values() for a in acc})
    facts = {
        "cpu_model": _dig(host, "cpu.model", "cpu.model_name", "cpu_model", "model_name")
        or _provenance(data, "cpu_model"),
        "pdpe1gb": _yes_no(_dig(host, "cpu.pdpe1gb")),
        "kernel": _dig(host, "kernel") or _provenance(data, "kernel"),
        "memory": _memory(_dig(host, "meminfo_kb.MemTotal")),
        "numa_nodes": _numa(host.get("numa_nodes")),
        "thp": _thp(host.get("thp")),
        "accel": "+".join(accel) if accel else _provenance(data, "accel"),
        "cpus": _dig(host, "cpu.cpus"),
        "arch": _dig(host, "machine"),
    }
    return {k: UNKNOWN if v is None else str(v) for k, v in facts.items()}


def kernel_minor(kernel: str) -> str:
    """'6.1.0-18-amd64' -> '6.1'; anything else as it is."""
    m = re.match(r"(\d+)\.(\d+)", kernel)
    return f"{m.group(1)}.{m.group(2)}" if m else kernel


def group_name(facts: dict[str, str]) -> str:
    """Hosts alike in CPU model, pdpe1gb, kernel major.minor and accelerator share a group."""
    return (f"{facts['cpu_model']}, pdpe1gb {facts['pdpe1gb']}, kernel "
            f"{kernel_minor(facts['kernel'])}, {facts['accel']}")


def host_info(h: HostRun) -> HostInfo:
    counts = Counter(int(s) for s in h.data.status)
    facts = host_facts(h.run, h.data)
    return HostInfo(h.label, int(h.run["id"]), str(h.run.get("status")), counts[0], counts[1],
                    counts[2], facts, group_name(facts))


# --- per host ---------------------------------------------------------------------------------

@dataclass
class _Comp:
    """A comparison seen on some hosts, while the report is assembled."""

    name: str
    baseline: str
    candidate: str
    better: str
    est: list[HostEstimate] = field(default_factory=list)


def _collect(hosts: Sequence[HostRun], opts: Options) -> tuple[dict[str, _Comp], list[str]]:
    found: dict[str, _Comp] = {}
    notes = []
    for h in hosts:
        for comp, est in host_results(h, opts):
            seen = found.setdefault(comp.name, comp)
            if seen.better != comp.better:
                notes.append(f"{comp.name}: host {h.label} says {comp.better} is better, "
                             f"others {seen.better}; using {seen.better}")
            seen.est.append(est)
    return found, notes


def _host_pairs(data: RunData, opts: Options) -> Options | None:
    """The options for one host: the asked pairs this host has (None: it has none of them)."""
    if not opts.pairs:
        return opts
    have = set(data.series)
    mine = tuple(p for p in opts.pairs if p[0] in have and p[1] in have)
    return replace(opts, pairs=mine) if mine else None


def host_results(h: HostRun, opts: Options) -> list[tuple[_Comp, HostEstimate]]:
    """Per comparison, this host's own result (the single-run analysis)."""
    mine = _host_pairs(h.data, opts)
    if mine is None or not h.data.n_trials:
        return []
    m = Matrix(h.data)
    _, claims, _ = factorial_section(h.data, m, mine)
    ps, comps, _ = comparisons(h.data, m, mine, {c.name: c.comparison for c in claims})
    out = []
    for p, c in zip(ps, comps, strict=True):
        y, v = meta.hl_estimates(p.log_ratio[None, :])
        usable = c["n_units"] >= paired.MIN_UNITS and bool(np.isfinite(v[0]))
        notes = [*c["notes"]]
        if (c.get("drift") or {}).get("drifting"):
            notes.append(str(c["drift"]["reading"]))
        est = HostEstimate(
            h.label, int(h.run["id"]), str(c["verdict"]), _f(c["effect_pct"]),
            _f(c["ci_low_pct"]), _f(c["ci_high_pct"]), int(c["n_units"]), _f(c["p_adjusted"]),
            float(y[0]), float(np.sqrt(v[0])), usable, None, tuple(notes))
        out.append((_Comp(p.name, p.baseline, p.candidate, p.better), est))
    return out


def _f(v: Any) -> float:
    return float("nan") if v is None else float(v)


# --- pooling ----------------------------------------------------------------------------------

def pool_hosts(est: Sequence[HostEstimate], alpha: float) -> meta.Pooled | None:
    """Random-effects pooling of the usable hosts; None with fewer than two."""
    use = [e for e in est if e.pooled]
    if len(use) < 2:
        return None
    return meta.pool([e.log_estimate for e in use], [e.log_se ** 2 for e in use], alpha=alpha)


def _with_weights(est: Sequence[HostEstimate], p: meta.Pooled | None) -> tuple[HostEstimate, ...]:
    if p is None:
        return tuple(est)
    ws = iter(p.weights)
    return tuple(replace(e, weight=next(ws)) if e.pooled else e for e in est)


def _pct_ci(p: meta.Pooled) -> tuple[float, float, float]:
    return p.effect_pct, float(paired.pct(p.ci_low)), float(paired.pct(p.ci_high))


def _holm(claims: dict[Any, meta.Pooled], margin: float) -> dict[Any, tuple[float, float]]:
    keys = list(claims)
    if not keys:
        return {}
    p = multiple.holm([claims[k].p_value for k in keys])
    t = multiple.holm([meta.tost_pvalue(claims[k], margin) for k in keys])
    return {k: (float(p[i]), float(t[i])) for i, k in enumerate(keys)}


def _pooled_verdict(p: meta.Pooled, adj: tuple[float, float], better: str, margin: float) -> str:
    return meta.verdict(p, better=better, margin=margin, p_value=adj[0], tost_p=adj[1])


def _single(est: Sequence[HostEstimate]) -> HostEstimate | None:
    usable = [e for e in est if e.pooled]
    if len(usable) == 1:
        return usable[0]
    return est[0] if len(est) == 1 else None


def _group_claims(name: str, est: Sequence[HostEstimate], infos: dict[str, HostInfo],
                  alpha: float) -> dict[tuple[str, str], tuple[list[HostEstimate], Any]]:
    by_group: dict[str, list[HostEstimate]] = {}
    for e in est:
        by_group.setdefault(infos[e.label].group, []).append(e)
    return {(name, g): (members, pool_hosts(members, alpha)) for g, members in by_group.items()}


def _group_verdict(group: str, members: list[HostEstimate], p: meta.Pooled | None,
                   adj: tuple[float, float] | None, better: str, margin: float) -> GroupVerdict:
    labels = tuple(e.label for e in members)
    if p is not None and adj is not None:
        of = f" of {len(members)}" if p.k < len(members) else ""
        return GroupVerdict(group, labels, _pooled_verdict(p, adj, better, margin),
                            *_pct_ci(p), f"pooled over {p.k}{of} hosts")
    one = _single(members)
    if one is None:
        nan = float("nan")
        return GroupVerdict(group, labels, "inconclusive", nan, nan, nan,
                            "no host with enough pairs")
    return GroupVerdict(group, labels, one.verdict, one.effect_pct, one.ci_low_pct,
                        one.ci_high_pct, f"host {one.label}'s own")


def _fleet_comparison(name: str, base: str, cand: str, better: str,
                      est: tuple[HostEstimate, ...], p: meta.Pooled | None,
                      adj: tuple[float, float] | None, margin: float) -> FleetComparison:
    notes = [f"host {e.label}: {e.n_units} pair(s), fewer than {paired.MIN_UNITS}: not pooled"
             for e in est if not e.pooled]
    if p is not None and adj is not None:
        notes += list(p.notes)
        return FleetComparison(name, base, cand, better, est,
                               _pooled_verdict(p, adj, better, margin), *_pct_ci(p),
                               f"pooled over {p.k} hosts (random effects, HKSJ)", p, *adj,
                               notes=tuple(notes))
    one = _single(est)
    if one is None:
        nan = float("nan")
        return FleetComparison(name, base, cand, better, est, "inconclusive", nan, nan, nan,
                               "no host with enough pairs", notes=tuple(notes))
    notes.append(f"one usable host ({one.label}): its own result, nothing pooled")
    return FleetComparison(name, base, cand, better, est, one.verdict, one.effect_pct,
                           one.ci_low_pct, one.ci_high_pct, f"host {one.label}'s own",
                           notes=tuple(notes))


def _check_asked_pairs(hosts: Sequence[HostRun], opts: Options) -> None:
    have = {s for h in hosts for s in h.data.series}
    for a, b in opts.pairs:
        for s in (a, b):
            if s not in have:
                raise UsageError(f"--pair names '{s}', which is no host's arm",
                                 hint=f"arms: {', '.join(sorted(have))}")


def _warnings(infos: Sequence[HostInfo], comps: Sequence[FleetComparison]) -> list[str]:
    out = []
    tcg = [i.label for i in infos if "tcg" in i.facts["accel"]]
    if tcg:
        out.append(f"hosts {', '.join(tcg)}: {TCG_WARNING}")
    for c in comps:
        skipped = [e.label for e in c.hosts if not e.pooled]
        if skipped:
            out.append(f"{c.name}: hosts {', '.join(skipped)} have too few pairs to be pooled")
        if c.pooled is not None and c.pooled.k >= 3 and c.pooled.q_p < 0.05:
            out.append(f"{c.name}: hosts differ (heterogeneity Q p = {c.pooled.q_p:.2g}, "
                       f"tau {pct(float(paired.pct(c.pooled.tau)), 1)}): read the groups and "
                       "the prediction interval, not only the pooled effect")
    return out


def _experiment_notes(hosts: Sequence[HostRun]) -> list[str]:
    kinds = Counter(json.dumps(h.run.get("experiment") or {}, sort_keys=True) for h in hosts)
    if len(kinds) < 2:
        return []
    common = kinds.most_common(1)[0][0]
    odd = [h.label for h in hosts
           if json.dumps(h.run.get("experiment") or {}, sort_keys=True) != common]
    return [f"hosts {', '.join(odd)} ran a different version of the experiment (other "
            "settings): their results may not be comparable"]


def _assemble(found: dict[str, _Comp], infos: dict[str, HostInfo], opts: Options
              ) -> list[FleetComparison]:
    """Pool each comparison over the fleet and over each group; Holm within each family."""
    pooled = {n: pool_hosts(c.est, opts.alpha) for n, c in found.items()}
    adj = _holm({n: p for n, p in pooled.items() if p is not None}, opts.margin)
    claims: dict[tuple[str, str], tuple[list[HostEstimate], Any]] = {}
    for n, c in found.items():
        claims.update(_group_claims(n, c.est, infos, opts.alpha))
    gadj = _holm({k: p for k, (_, p) in claims.items() if p is not None}, opts.margin)
    out = []
    for n, c in found.items():
        verdicts = tuple(_group_verdict(g, members, p, gadj.get((n, g)), c.better, opts.margin)
                         for (n2, g), (members, p) in claims.items() if n2 == n)
        fc = _fleet_comparison(n, c.baseline, c.candidate, c.better,
                               _with_weights(c.est, pooled[n]), pooled[n], adj.get(n),
                               opts.margin)
        out.append(replace(fc, groups=verdicts))
    return out


def _missing(comps: Sequence[FleetComparison], labels: Iterable[str]) -> list[str]:
    every = set(labels)
    return [f"{c.name}: no result on hosts {', '.join(sorted(every - {e.label for e in c.hosts}))}"
            " (the arm was skipped or never ran there)"
            for c in comps if len(c.hosts) < len(every)]


def build(name: str, hosts: Sequence[HostRun], opts: Options | None = None) -> FleetReport:
    """The fleet report over loaded runs (one per host, labels unique)."""
    opts = opts or Options()
    _check_asked_pairs(hosts, opts)
    infos = {h.label: host_info(h) for h in hosts}
    found, better_notes = _collect(hosts, opts)
    comps = _assemble(found, infos, opts)
    groups: dict[str, tuple[str, ...]] = {}
    for i in infos.values():
        groups[i.group] = (*groups.get(i.group, ()), i.label)
    return FleetReport(name, opts, tuple(infos.values()), tuple(comps), groups,
                       notes=tuple(_experiment_notes(hosts) + better_notes
                                   + _missing(comps, infos)),
                       warnings=tuple(_warnings(list(infos.values()), comps)))


# --- tables -----------------------------------------------------------------------------------

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
    conf = 100 * (1 - r.options.alpha)
    family = sum(c.pooled is not None for c in r.comparisons)
    t = Table("pooled", f"Across hosts (random effects; Holm across {family} pooled "
              f"comparison(s), alpha {r.options.alpha:g}, equivalence margin "
              f"±{100 * r.options.margin:g}%)",
              ["comparison", "verdict", f"effect [{conf:g}% CI]", "hosts", "tau", "I²",
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
    conf = 100 * (1 - alpha)
    t = Table(f"per-host-{index}", f"Per host: {c.name}",
              ["host", "verdict", f"effect [{conf:g}% CI]", "n", "weight", "p (Holm)"], [],
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
    conf = 100 * (1 - r.options.alpha)
    t = Table("groups", "Groups of alike hosts (CPU model, pdpe1gb, kernel major.minor, accel)",
              ["group", "comparison", "verdict", f"effect [{conf:g}% CI]", "hosts", "how"], [],
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


# --- renderers --------------------------------------------------------------------------------

def _widths(t: Table) -> list[int]:
    return [max([len(t.headers[i]), *(len(row[i]) for row in t.rows)])
            for i in range(len(t.headers))]


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False) or [indent]


def _text_table(t: Table, width: int) -> list[str]:
    out = _wrap(t.title, width)
    w = _widths(t)
    if sum(w) + 2 * (len(w) - 1) > width:  # too wide: one block per row, a line per cell
        for row in t.rows:
            out.append(" " + row[0])
            out += [f"   {t.headers[i]}: {row[i]}" for i in range(1, len(row))]
    else:
        def line(cells: list[str]) -> str:
            return "  ".join(c.rjust(w[i]) if i in t.right else c.ljust(w[i])
                             for i, c in enumerate(cells)).rstrip()
        out += [line(t.headers), line(["-" * x for x in w]), *(line(r) for r in t.rows)]
    for n in dict.fromkeys(t.notes):
        out += _wrap(n, width, "  ")
    return out


def render_text(report: FleetReport, width: int = 100) -> str:
    """The report as plain text; a table wider than `width` is stacked (a line per cell), never
    cut, and notes are wrapped at `width`."""
    out = _wrap(header(report), width)
    for w in report.warnings:
        out += _wrap(f"WARNING: {w}", width)
    for t in all_tables(report):
        out += ["", *_text_table(t, width)]
    if report.notes:
        out += ["", "Notes"]
        for n in report.notes:
            out += _wrap(n, width, "  ")
    return "\n".join(out) + "\n"


def _md_table(t: Table) -> list[str]:
    esc = md_report.esc
    out = [f"### {esc(t.title)}", ""]
    if t.rows:
        out.append("| " + " | ".join(esc(h) for h in t.headers) + " |")
        out.append("|" + "|".join("---:" if i in t.right else "---"
                                  for i in range(len(t.headers))) + "|")
        out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in t.rows]
        out.append("")
    out += [f"- {esc(n)}" for n in dict.fromkeys(t.notes)]
    return [*out, ""]


def render_markdown(report: FleetReport) -> str:
    esc = md_report.esc
    out = [f"# hugelab fleet report: {esc(report.experiment)}", "", esc(header(report)), ""]
    for w in report.warnings:
        out += [f"> **WARNING:** {esc(w)}", ""]
    for t in all_tables(report):
        out += _md_table(t)
    if report.notes:
        out += ["### Notes", "", *(f"- {esc(n)}" for n in report.notes), ""]
    return "\n".join(out)


def _html_table(t: Table) -> str:
    esc = html_report.esc
    out = [f'<h2 id="{esc(t.key)}">{esc(t.title)}</h2>']
    if t.rows:
        out.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in t.headers) + "</tr>")
        verdict_col = t.headers.index("verdict") if "verdict" in t.headers else -1
        for row in t.rows:
            cells = []
            for i, c in enumerate(row):
                cls = ' class="r"' if i in t.right else ""
                if i == verdict_col:
                    cls = f' class="{esc(c.split(" ")[0])}"'
                cells.append(f"<td{cls}>{esc(c)}</td>")
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</table>")
    if t.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>"
                                                  for n in dict.fromkeys(t.notes)) + "</ul>")
    return "\n".join(out)


def _figure(caption: str, png: bytes) -> str:
    esc = html_report.esc
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{esc(caption)}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def render_html(report: FleetReport, figures: bool = True) -> str:
    """One self-contained page: every store string escaped, forest plots inline."""
    esc = html_report.esc
    name = esc(report.experiment)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>hugelab fleet report: {name}</title>",
           f"<style>{html_report.CSS}</style></head><body>",
           f"<h1>hugelab fleet report: {name}</h1>", f"<p>{esc(header(report))}</p>"]
    for w in report.warnings:
        out.append(f'<div class="{"tcg" if "TCG" in w else "warn"}">WARNING: {esc(w)}</div>')
    out += [_html_table(t) for t in all_tables(report)]
    if report.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in report.notes)
                   + "</ul>")
    if figures and report.comparisons:
        out.append("<h2>Forest plots</h2>")
        out += [_figure(f"Per host and pooled: {c.name}", forest(c, report.options))
                for c in report.comparisons]
    out.append("<h2>All numbers</h2><details><summary>the report as JSON</summary><pre>"
               + esc(json.dumps(to_json(report), indent=1)) + "</pre></details>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def to_json(report: FleetReport) -> dict[str, Any]:
    """Everything in the report, JSON-safe (non-finite numbers become null)."""
    def comp(c: FleetComparison) -> dict[str, Any]:
        d = {k: getattr(c, k) for k in ("name", "baseline", "candidate", "better", "verdict",
                                         "effect_pct", "ci_low_pct", "ci_high_pct", "how",
                                         "p_adjusted", "tost_p_adjusted", "notes")}
        d["pooled"] = None if c.pooled is None else c.pooled.to_dict()
        d["hosts"] = [vars(e) for e in c.hosts]
        d["groups"] = [vars(g) for g in c.groups]
        return d
    out: dict[str, Any] = clean({
        "experiment": report.experiment,
        "options": {"alpha": report.options.alpha, "margin": report.options.margin,
                    "pairs": report.options.pairs},
        "hosts": [vars(h) for h in report.hosts],
        "comparisons": [comp(c) for c in report.comparisons],
        "groups": report.groups, "notes": report.notes, "warnings": report.warnings})
    return out


# --- forest plot ------------------------------------------------------------------------------

def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


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


def _pooled_row(ax: Any, c: FleetComparison) -> None:
    if not np.isfinite(c.effect_pct):
        return
    p = c.pooled
    if p is not None and p.k >= 3:
        ax.hlines(0.5, float(paired.pct(p.pred_low)), float(paired.pct(p.pred_high)),
                  colors="#c44e52", linewidth=2, zorder=1,
                  label="prediction interval (a new host)")
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


def forest(c: FleetComparison, opts: Options) -> bytes:
    """One row per host (effect with its own interval; marker size by weight, hollow grey: not
    pooled) and the pooled diamond with the prediction interval for a new host in red."""
    n = len(c.hosts)
    fig = Figure(figsize=(8, 1.6 + 0.28 * (n + 2)), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(n)[::-1] + 2.0
    _host_rows(ax, c, y)
    _pooled_row(ax, c)
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
    ax.set_title(plot_label(f"Across hosts: {c.name}{tau}"), fontsize=10)
    return _png(fig)
