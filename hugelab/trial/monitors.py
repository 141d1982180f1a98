"""Counters read before and after each trial; the deltas explain why an arm was faster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hugelab.host.paths import (
    NODE_DIR,
    REAL,
    THP_DIR,
    HostPaths,
    parse_kv_kb,
    parse_vmstat,
    read_text,
)
from hugelab.trial import load as machine_load
from hugelab.trial.folios import mthp_stats, stats_delta
from hugelab.workloads.servercpu import daemons_cpu_s

VMSTAT_PREFIXES = ("thp_", "compact_", "numa_", "pswp", "pgfault", "pgmajfault", "htlb_")
MEMINFO_KEYS = ("MemFree", "AnonHugePages", "HugePages_Total", "HugePages_Free",
                "HugePages_Rsvd", "HugePages_Surp", "Hugetlb")


@dataclass(frozen=True)
class Snapshot:
    vmstat: dict[str, int]
    meminfo: dict[str, int]
    numastat: dict[int, dict[str, int]] = field(default_factory=dict)
    mthp: dict[str, dict[str, int]] = field(default_factory=dict)  # per-size THP stats
    load: machine_load.LoadSnapshot | None = None  # CPU steal, other processes' CPU, PSI
    daemons: dict[str, float] = field(default_factory=dict)  # khugepaged, kcompactd CPU s


def numastat(paths: HostPaths = REAL) -> dict[int, dict[str, int]]:
    """Per-node numa_hit/miss/foreign/local_node/other_node (what `numastat` prints)."""
    out = {}
    for node in paths.numa_nodes():
        text = read_text(paths.p(f"{NODE_DIR}/node{node}/numastat"))
        if text is not None:
            out[node] = parse_vmstat(text)
    return out


def _daemons(paths: HostPaths) -> dict[str, float]:
    try:
        return daemons_cpu_s(paths.p("proc"))
    except OSError:  # a fake host without /proc
        return {}


def snapshot(paths: HostPaths = REAL) -> Snapshot:
    vm = parse_vmstat(read_text(paths.vmstat, "") or "")
    mi = parse_kv_kb(read_text(paths.meminfo, "") or "")
    return Snapshot({k: v for k, v in vm.items() if k.startswith(VMSTAT_PREFIXES)},
                    {k: mi[k] for k in MEMINFO_KEYS if k in mi}, numastat(paths),
                    mthp_stats(paths.p(THP_DIR)), machine_load.snapshot(paths),
                    _daemons(paths))


def _moved(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - v for k, v in before.items() if k in after and after[k] != v}


def delta(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """vmstat counter deltas (only those that moved), meminfo before/after, numastat per node,
    the per-size THP stats that moved (hugepages-<N>kB/stats: anon_fault_alloc, ...) and the
    machine's load during the trial (:mod:`hugelab.trial.load`) and the CPU seconds khugepaged
    and kcompactd spent during it (`thp_daemons_cpu_s`: THP's background work, host-wide)."""
    numa = {str(n): _moved(v, after.numastat.get(n, {})) for n, v in before.numastat.items()}
    out = {"vmstat": _moved(before.vmstat, after.vmstat), "meminfo_before": before.meminfo,
           "meminfo_after": after.meminfo, "numastat": numa}
    if before.mthp:
        out["mthp_stats"] = stats_delta(before.mthp, after.mthp)
    if before.load is not None and after.load is not None:
        out["load"] = machine_load.load_delta(before.load, after.load)
    if before.daemons:
        out["thp_daemons_cpu_s"] = {k: round(after.daemons.get(k, v) - v, 3)
                                    for k, v in before.daemons.items()}
    return out


def thp_fault_share(vmstat_delta: dict[str, int]) -> float | None:
    """Share of THP fault attempts served by a huge page (None when THP was never tried)."""
    alloc = vmstat_delta.get("thp_fault_alloc", 0)
    fallback = vmstat_delta.get("thp_fault_fallback", 0)
    return alloc / (alloc + fallback) if alloc + fallback else None
