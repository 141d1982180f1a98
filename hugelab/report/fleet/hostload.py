"""The fleet report's input: which run stands for each host, loaded from any store, and the
host facts that may explain why hosts differ."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hugelab.errors import UsageError
from hugelab.report.runload import RunData, SeriesDetails, from_rows, load_run
from hugelab.store import SqlStore

UNKNOWN = "unknown"
GROUP_FACTS = ("cpu_model", "pdpe1gb", "kernel_minor", "accel")
PROVENANCE_SAMPLE = 50  # ok trials per series read for provenance by the generic loader


class FleetStore(Protocol):
    """What the fleet report reads from a store."""

    def runs(self) -> list[dict[str, Any]]: ...
    def values(self, run_id: int) -> list[tuple[int, int, str, str, str, float | None]]: ...
    def trials(self, run_id: int) -> Iterable[dict[str, Any]]: ...



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
    created: float | None = None  # when the run was made (Unix seconds)



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
            notes.append(unfinished(f"host {lab}: run {run['id']}", "hugelab fleet run"))
        out.append((lab, run))
    return out, notes


def unfinished(who: str, resume: str) -> str:
    """The note on a run pooled before its last trial; `resume`: the command that resumes it."""
    return (f"{who} has not finished (still running, or stopped before its last trial: "
            f"`{resume}` again resumes it); its blocks so far are pooled")


def run_label(run: dict[str, Any]) -> str:
    """'run 3', or 'run 3 (tuesday)' for a run made with --label."""
    label = run.get("label")
    return f"run {run['id']} ({label})" if label else f"run {run['id']}"


def pick_runs(runs: Sequence[dict[str, Any]], ids: Sequence[int]
              ) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs named by id for `report --across`, in the order given, and notes on them;
    a usage error for fewer than two, an unknown id, or a run without a trial."""
    if len(set(ids)) < 2:
        raise UsageError("--across pools two or more runs: name them by id, e.g. --across 3,4,5",
                         hint="three or more give the next run's interval")
    rows = {int(r["id"]): r for r in runs}
    unknown = [i for i in ids if i not in rows]
    if unknown:
        raise UsageError(f"no run {', '.join(map(str, unknown))} in the store",
                         hint=f"runs: {', '.join(map(str, sorted(rows)))}" if rows
                         else "the store is empty")
    chosen = [rows[i] for i in dict.fromkeys(ids)]
    empty = [str(r["id"]) for r in chosen if not r.get("trials")]
    if empty:
        raise UsageError(f"run {', '.join(empty)} has no trial to pool",
                         hint="`hugelab show` lists each run's trials")
    notes = [unfinished(run_label(r), "hugelab run") for r in chosen
             if r.get("status") != "finished"]
    return chosen, notes


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
    where = data.where()
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


def _seconds(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def host_info(h: HostRun) -> HostInfo:
    counts = Counter(int(s) for s in h.data.status)
    facts = host_facts(h.run, h.data)
    return HostInfo(h.label, int(h.run["id"]), str(h.run.get("status")), counts[0], counts[1],
                    counts[2], facts, group_name(facts), _seconds(h.run.get("created")))
