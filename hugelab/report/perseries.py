"""Per series (an arm on a target): trial counts and their reasons, the classic table, and
what the sampled trials' monitors and mapping evidence say. Pure over a loaded run."""

from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hugelab.report.model.base import clean
from hugelab.report.model.series import (
    Classic,
    Counts,
    Evidence,
    MachineLoad,
    Monitors,
    Reason,
    Series,
)
from hugelab.report.runload import RunData
from hugelab.stats import classic
from hugelab.trial.load import HIGH, high_load

VMSTAT_KEYS = ("thp_fault_alloc", "thp_fault_fallback", "thp_collapse_alloc",
               "thp_split_page", "compact_stall", "compact_fail", "compact_success",
               "pgfault", "pgmajfault", "htlb_buddy_alloc_success", "htlb_buddy_alloc_fail")


def _classic(values: NDArray[np.float64], confidence: float) -> Classic | None:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None
    return Classic.from_json(classic.classic_table(v, confidence=confidence).to_dict())


def monitors(mons: list[dict[str, Any]]) -> Monitors:
    """The sampled trials' vmstat medians and THP fault share (host-wide), and their load."""
    vms = [m.get("vmstat") or {} for m in mons]
    med = {k: median(float(v.get(k, 0)) for v in vms)
           for k in VMSTAT_KEYS if any(k in v for v in vms)}
    alloc = sum(float(v.get("thp_fault_alloc", 0)) for v in vms)
    fallback = sum(float(v.get("thp_fault_fallback", 0)) for v in vms)
    share = alloc / (alloc + fallback) if alloc + fallback else None
    # /proc/vmstat is host-wide: other processes' faults are in it too, so the reading says so
    # and the per-trial mapping evidence beside it is the proof for the workload itself.
    reading = ("no THP page faults recorded (host-wide)" if share is None else
               f"host-wide: {share:.0%} of THP faults served by huge pages "
               f"(median {med.get('thp_fault_alloc', 0):.0f} allocated, "
               f"{med.get('thp_fault_fallback', 0):.0f} fell back per trial)")
    load = machine_load(mons)
    if load and load.high:
        reading += f"; {load.reading}"
    return Monitors(len(vms), clean(med), clean(share), load,
                    reading if vms else "no monitor data")


def machine_load(mons: list[dict[str, Any]]) -> MachineLoad | None:
    """The machine's load over sampled trials (hugelab.trial.load): medians, the trials at or
    above its HIGH thresholds and their commonest readings; None when no trial recorded it."""
    loads = [m["load"] for m in mons if isinstance(m.get("load"), dict) and m["load"]]
    if not loads:
        return None
    keys = sorted({k for ld in loads for k in ld})
    med = {k: median(float(ld[k]) for ld in loads if k in ld) for k in keys}
    flagged = [h for ld in loads if (h := high_load(ld))]
    kinds = Counter(r.rsplit(" ", 1)[0] for h in flagged for r in h)
    worst = {k: max(float(ld.get(k, 0)) for ld in loads) for k in HIGH if k in keys}
    reading = (f"{len(flagged)} of {len(loads)} trials under high machine load ("
               + ", ".join(f"{kind} in {n}" for kind, n in kinds.most_common()) + ")"
               if flagged else f"machine load low in all {len(loads)} trials")
    return MachineLoad(len(loads), len(flagged), clean(med), clean(worst), dict(kinds),
                       dict(HIGH), reading)


def _layer_reading(layers: dict[str, Counter[tuple[str, str]]]) -> list[str]:
    parts = []
    for layer, cnt in layers.items():
        statuses = Counter[str]()
        for (status, _), n in cnt.items():
            statuses[status] += n
        (_, reason), _ = cnt.most_common(1)[0]
        counts = ", ".join(f"{st} {n}/{sum(statuses.values())}" for st, n in statuses.items())
        parts.append(f"{layer}: {counts} (e.g. {reason})")
    return parts


def evidence(evs: list[dict[str, Any]]) -> Evidence:
    """Per layer (workload; vm for guest arms): how many sampled trials each verdict had, and
    the commonest reason, so a guest arm shows both sides' evidence."""
    pages = Counter(str(e["KernelPageSize_kB"]) for e in evs if "KernelPageSize_kB" in e)
    shares = [float(e.get("AnonHugePages_kB") or 0) / float(e["Rss_kB"])
              for e in evs if e.get("Rss_kB")]
    checks = Counter(str(e.get("check")) for e in evs if e.get("check"))
    share = median(shares) if shares else None
    layers: dict[str, Counter[tuple[str, str]]] = {}
    for e in evs:
        for layer, c in (e.get("checks") or {}).items():
            layers.setdefault(layer, Counter())[(str(c.get("status")), str(c.get("reason")))] += 1
    parts = _layer_reading(layers)
    if not parts and pages:
        top, cnt_ = pages.most_common(1)[0]
        parts.append(f"page size {top} KiB in {cnt_ / sum(pages.values()):.0%} of sampled trials")
    if not layers and share is not None:
        parts.append(f"median {share:.0%} of RSS in transparent huge pages")
    return Evidence(len(evs), dict(pages), clean(share), dict(checks),
                    {k: {f"{st}": n for (st, _), n in v.items()} for k, v in layers.items()},
                    "; ".join(parts) or "no mapping evidence")


def _reasons(c: Counter[str]) -> list[Reason]:
    return [Reason(r, n) for r, n in c.most_common()]


def series_rows(data: RunData, nonpositive: NDArray[np.int64], confidence: float
                ) -> list[Series]:
    """Every series of the run; `nonpositive`: its values <= 0 per series (left out)."""
    counts = np.zeros((len(data.series), 3), dtype=np.int64)
    np.add.at(counts, (data.code, data.status), 1)
    rows = []
    for i, name in enumerate(data.series):
        d = data.details[i]
        ok_vals = data.value[(data.code == i) & (data.status == 0)]
        rows.append(Series(
            name, data.series_arm[i], data.series_target[i], d.better, d.metric, d.unit,
            Counts(*(int(counts[i, k]) for k in range(3))), int(nonpositive[i]),
            _reasons(d.flag_reasons), _reasons(d.error_reasons), sum(d.retry_reasons.values()),
            _reasons(d.retry_reasons), _classic(ok_vals, confidence),
            clean(float(np.median(ok_vals))) if ok_vals.size else None,
            monitors(d.monitors), evidence(d.evidence), d.sampled))
    return rows
