"""The fleet report's analysis: per-host verdicts, pooled across hosts and across groups of alike
hosts.

``from_store`` takes any store with ``.runs()``, ``.values(run_id)`` and ``.trials(run_id)``
(an ``hugelab.store.SqlStore``, SQLite or PostgreSQL, is read through ``report.runload.load_run``,
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

The same analysis pools separate runs of one experiment (``from_runs``, `hugelab report --across`):
each run is then the unit (``unit = "run"``) instead of each host, so the pooled interval and
the prediction interval carry the spread of the effect from run to run that one run's
interval cannot show.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hugelab.errors import UsageError
from hugelab.report.analysis import (
    TCG_WARNING,
    Matrix,
    Options,
    Paired,
    comparisons,
    factorial_section,
)
from hugelab.report.fleet.hostload import (
    FleetStore,
    HostInfo,
    HostRun,
    host_info,
    load,
    pick_runs,
    run_label,
    select_runs,
)
from hugelab.report.runload import RunData
from hugelab.report.startorder import StartOrder, start_order
from hugelab.report.table import pct
from hugelab.stats import meta, multiple, paired


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
    unit: str = "host"  # what each pooled estimate is: a host's run, or a run ("run")

    @classmethod
    def from_store(cls, store: FleetStore, name: str, opts: Options | None = None
                   ) -> FleetReport:
        """The fleet report of experiment `name` from every host's run in `store`."""
        chosen, notes = select_runs(store.runs(), name)
        hosts = [HostRun(lab, run, load(store, run)) for lab, run in chosen]
        report = build(name, hosts, opts or Options())
        return replace(report, notes=(*notes, *report.notes))

    @classmethod
    def from_runs(cls, store: FleetStore, ids: Sequence[int], opts: Options | None = None
                  ) -> FleetReport:
        """Separate runs of one experiment (by id), each run a unit of the pooling."""
        chosen, notes = pick_runs(store.runs(), ids)
        names = list(dict.fromkeys(str(r.get("name")) for r in chosen))
        hosts = [HostRun(run_label(r), r, load(store, r)) for r in chosen]
        others = len(names) - 1
        name = names[0] if not others else \
            f"{names[0]} (and {others} other name{'s' if others > 1 else ''})"
        report = build(name, hosts, opts or Options(), unit="run")
        return replace(report, notes=(*notes, *report.notes))


# --- per host ---------------------------------------------------------------------------------

@dataclass
class _Comp:
    """A comparison seen on some hosts, while the report is assembled."""

    name: str
    baseline: str
    candidate: str
    better: str
    est: list[HostEstimate] = field(default_factory=list)


def _collect(hosts: Sequence[HostRun], opts: Options, unit: str = "host"
             ) -> tuple[dict[str, _Comp], list[str]]:
    found: dict[str, _Comp] = {}
    notes = []
    who = _who(unit)
    for h in hosts:
        for comp, est in host_results(h, opts):
            other = None if comp.name in found else next(
                (c for c in found.values()
                 if (c.baseline, c.candidate) == (comp.candidate, comp.baseline)), None)
            if other is not None:  # this run's baseline is the others' candidate
                notes.append(f"{comp.name}: {who}{h.label} had {comp.baseline} as its baseline: "
                             f"its result is read the other way round, as {other.name}")
                comp, est = other, turned(est, comp.baseline)
            seen = found.setdefault(comp.name, comp)
            if seen.better != comp.better:
                notes.append(f"{comp.name}: {who}{h.label} says {comp.better} is better, "
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
    order = start_order(h.data, m.blocks, m.values)  # request-interleaved runs only
    out = []
    for p, c in zip(ps, comps, strict=True):
        y, v = meta.hl_estimates(_own_ratios(p, h.data, order)[None, :])
        usable = c.n_units >= paired.MIN_UNITS and bool(np.isfinite(v[0]))
        notes = [*c.notes]
        if c.drift is not None and c.drift.drifting:
            notes.append(c.drift.reading)
        est = HostEstimate(
            h.label, int(h.run["id"]), c.verdict, _f(c.effect_pct),
            _f(c.ci_low_pct), _f(c.ci_high_pct), c.n_units, _f(c.p_adjusted),
            float(y[0]), float(np.sqrt(v[0])), usable, None, tuple(notes))
        out.append((_Comp(p.name, p.baseline, p.candidate, p.better), est))
    return out


def turned(est: HostEstimate, baseline: str) -> HostEstimate:
    """One unit's result read the other way round: its candidate as the baseline (pure)."""
    def inverse(pct: float) -> float:
        return 100.0 * (1.0 / (1.0 + pct / 100.0) - 1.0)
    verdict = {"faster": "slower", "slower": "faster"}.get(est.verdict, est.verdict)
    return replace(est, verdict=verdict, effect_pct=inverse(est.effect_pct),
                   ci_low_pct=inverse(est.ci_high_pct), ci_high_pct=inverse(est.ci_low_pct),
                   log_estimate=-est.log_estimate,
                   notes=(*est.notes, f"its baseline was {baseline}: read the other way round"))


def _own_ratios(p: Paired, data: RunData, order: StartOrder | None) -> np.ndarray:
    """The per-block log-ratios the run's own row rests on: start-order adjusted in a
    request-interleaved run (as `analysis._compare` adjusts them), else the raw ones."""
    if order is None:
        return p.log_ratio
    c = order.candidate(data.index(p.baseline), data.index(p.candidate), p.b)
    return np.asarray(np.log(c / p.b), dtype=float)


def _f(v: Any) -> float:
    return float("nan") if v is None else float(v)


# --- pooling ----------------------------------------------------------------------------------

def pool_hosts(est: Sequence[HostEstimate], alpha: float, unit: str = "host"
               ) -> meta.Pooled | None:
    """Random-effects pooling of the usable hosts (or runs); None with fewer than two."""
    use = [e for e in est if e.pooled]
    if len(use) < 2:
        return None
    return meta.pool([e.log_estimate for e in use], [e.log_se ** 2 for e in use], alpha=alpha,
                     unit=unit)


def _with_weights(est: Sequence[HostEstimate], p: meta.Pooled | None) -> tuple[HostEstimate, ...]:
    if p is None:
        return tuple(est)
    ws = iter(p.weights)
    return tuple(replace(e, weight=next(ws)) if e.pooled else e for e in est)


def _pct_ci(p: meta.Pooled) -> tuple[float, float, float]:
    return p.effect_pct, float(paired.pct(p.ci_low)), float(paired.pct(p.ci_high))


def _adjusted(claims: dict[Any, meta.Pooled], margin: float) -> dict[Any, tuple[float, float]]:
    keys = list(claims)
    if not keys:
        return {}
    p, t = multiple.exclusive([claims[k].p_value for k in keys],
                              [meta.tost_pvalue(claims[k], margin) for k in keys])
    return {k: (float(p[i]), float(t[i])) for i, k in enumerate(keys)}


def _pooled_verdict(p: meta.Pooled, adj: tuple[float, float], better: str, margin: float) -> str:
    return meta.verdict(p, better=better, margin=margin, p_value=adj[0], tost_p=adj[1])


def _single(est: Sequence[HostEstimate]) -> HostEstimate | None:
    usable = [e for e in est if e.pooled]
    if len(usable) == 1:
        return usable[0]
    return est[0] if len(est) == 1 else None


def _group_claims(name: str, est: Sequence[HostEstimate], infos: dict[str, HostInfo],
                  alpha: float, unit: str) -> dict[tuple[str, str], tuple[list[HostEstimate], Any]]:
    by_group: dict[str, list[HostEstimate]] = {}
    for e in est:
        by_group.setdefault(infos[e.label].group, []).append(e)
    return {(name, g): (members, pool_hosts(members, alpha, unit))
            for g, members in by_group.items()}


def _who(unit: str, plural: bool = False) -> str:
    """What goes before units' labels: 'host ', 'hosts ', or nothing for runs, whose labels
    already say run ('run 3')."""
    return "" if unit == "run" else f"{unit}{'s' if plural else ''} "


def _own(unit: str, label: str) -> str:
    """'host a's own', 'run 3's own' (a run's label already says run)."""
    return f"{_who(unit)}{label}'s own"


def _group_verdict(group: str, members: list[HostEstimate], p: meta.Pooled | None,
                   adj: tuple[float, float] | None, better: str, margin: float,
                   unit: str = "host") -> GroupVerdict:
    labels = tuple(e.label for e in members)
    if p is not None and adj is not None:
        of = f" of {len(members)}" if p.k < len(members) else ""
        return GroupVerdict(group, labels, _pooled_verdict(p, adj, better, margin),
                            *_pct_ci(p), f"pooled over {p.k}{of} {unit}s")
    one = _single(members)
    if one is None:
        nan = float("nan")
        return GroupVerdict(group, labels, "inconclusive", nan, nan, nan,
                            f"no {unit} with enough pairs")
    return GroupVerdict(group, labels, one.verdict, one.effect_pct, one.ci_low_pct,
                        one.ci_high_pct, _own(unit, one.label))


def _fleet_comparison(name: str, base: str, cand: str, better: str,
                      est: tuple[HostEstimate, ...], p: meta.Pooled | None,
                      adj: tuple[float, float] | None, margin: float,
                      unit: str = "host") -> FleetComparison:
    who = _who(unit)
    notes = [f"{who}{e.label}: {e.n_units} pair(s), fewer than {paired.MIN_UNITS}: not pooled"
             for e in est if not e.pooled]
    if p is not None and adj is not None:
        notes += list(p.notes)
        return FleetComparison(name, base, cand, better, est,
                               _pooled_verdict(p, adj, better, margin), *_pct_ci(p),
                               f"pooled over {p.k} {unit}s (random effects, HKSJ)", p, *adj,
                               notes=tuple(notes))
    one = _single(est)
    if one is None:
        nan = float("nan")
        return FleetComparison(name, base, cand, better, est, "inconclusive", nan, nan, nan,
                               f"no {unit} with enough pairs", notes=tuple(notes))
    notes.append(f"one usable {unit} ({one.label}): its own result, nothing pooled")
    return FleetComparison(name, base, cand, better, est, one.verdict, one.effect_pct,
                           one.ci_low_pct, one.ci_high_pct, _own(unit, one.label),
                           notes=tuple(notes))


def _check_asked_pairs(hosts: Sequence[HostRun], opts: Options) -> None:
    have = {s for h in hosts for s in h.data.series}
    for a, b in opts.pairs:
        for s in (a, b):
            if s not in have:
                raise UsageError(f"--pair names '{s}', which is no host's arm",
                                 hint=f"arms: {', '.join(sorted(have))}")


def _warnings(infos: Sequence[HostInfo], comps: Sequence[FleetComparison],
              unit: str = "host") -> list[str]:
    out = []
    who = _who(unit, plural=True)
    tcg = [i.label for i in infos if "tcg" in i.facts["accel"]]
    if tcg:
        out.append(f"{who}{', '.join(tcg)}: {TCG_WARNING}")
    for c in comps:
        skipped = [e.label for e in c.hosts if not e.pooled]
        if skipped:
            have = "has" if len(skipped) == 1 and unit == "run" else "have"
            out.append(f"{c.name}: {who}{', '.join(skipped)} {have} too few pairs to be pooled")
        if c.pooled is not None and c.pooled.k >= 3 and c.pooled.q_p < 0.05:
            read = ("the prediction interval (the next run)" if unit == "run" else
                    "the groups and the prediction interval")
            out.append(f"{c.name}: {unit}s differ (heterogeneity Q p = {c.pooled.q_p:.2g}, "
                       f"tau {pct(float(paired.pct(c.pooled.tau)), 1)}): read {read}, not only "
                       "the pooled effect")
    return out


# what may differ between runs of one experiment without making them different experiments
RUN_ONLY = ("name", "seed", "blocks")


def _experiment_notes(hosts: Sequence[HostRun], unit: str = "host") -> list[str]:
    def kind(h: HostRun) -> str:
        exp = dict(h.run.get("experiment") or {})
        if unit == "run":
            exp = {k: v for k, v in exp.items() if k not in RUN_ONLY}
        return json.dumps(exp, sort_keys=True)
    kinds = Counter(kind(h) for h in hosts)
    if len(kinds) < 2:
        return []
    common = kinds.most_common(1)[0][0]
    odd = [h.label for h in hosts if kind(h) != common]
    who = _who(unit, plural=True)
    return [f"{who}{', '.join(odd)} ran a different version of the experiment (other "
            "settings): their results may not be comparable"]


def _assemble(found: dict[str, _Comp], infos: dict[str, HostInfo], opts: Options,
              unit: str = "host") -> list[FleetComparison]:
    """Pool each comparison over the fleet and over each group; within each family, both
    claims of every comparison adjusted together (multiple.exclusive)."""
    pooled = {n: pool_hosts(c.est, opts.alpha, unit) for n, c in found.items()}
    adj = _adjusted({n: p for n, p in pooled.items() if p is not None}, opts.margin)
    claims: dict[tuple[str, str], tuple[list[HostEstimate], Any]] = {}
    for n, c in found.items():
        claims.update(_group_claims(n, c.est, infos, opts.alpha, unit))
    gadj = _adjusted({k: p for k, (_, p) in claims.items() if p is not None}, opts.margin)
    out = []
    for n, c in found.items():
        verdicts = tuple(_group_verdict(g, members, p, gadj.get((n, g)), c.better, opts.margin,
                                        unit)
                         for (n2, g), (members, p) in claims.items() if n2 == n)
        fc = _fleet_comparison(n, c.baseline, c.candidate, c.better,
                               _with_weights(c.est, pooled[n]), pooled[n], adj.get(n),
                               opts.margin, unit)
        out.append(replace(fc, groups=verdicts))
    return out


def _missing(comps: Sequence[FleetComparison], labels: Iterable[str], unit: str = "host"
             ) -> list[str]:
    every = set(labels)
    where = "in" if unit == "run" else f"on {unit}s"
    return [f"{c.name}: no result {where} {', '.join(sorted(every - {e.label for e in c.hosts}))}"
            " (the arm was skipped or never ran there)"
            for c in comps if len(c.hosts) < len(every)]


def build(name: str, hosts: Sequence[HostRun], opts: Options | None = None,
          unit: str = "host") -> FleetReport:
    """The fleet report over loaded runs (one per unit, labels unique): a host's run each, or
    with unit "run" separate runs of one experiment."""
    opts = opts or Options()
    _check_asked_pairs(hosts, opts)
    infos = {h.label: host_info(h) for h in hosts}
    found, better_notes = _collect(hosts, opts, unit)
    comps = _assemble(found, infos, opts, unit)
    groups: dict[str, tuple[str, ...]] = {}
    for i in infos.values():
        groups[i.group] = (*groups.get(i.group, ()), i.label)
    return FleetReport(name, opts, tuple(infos.values()), tuple(comps), groups,
                       notes=tuple(_experiment_notes(hosts, unit) + better_notes
                                   + _missing(comps, infos, unit)),
                       warnings=tuple(_warnings(list(infos.values()), comps, unit)), unit=unit)
