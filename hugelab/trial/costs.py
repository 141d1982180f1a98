"""The price of huge pages, per trial: what the workload's memory and the host's background work
cost while it ran, beside the speed the trial measured.

Every trial of every kind and place gets `monitors["costs"]`, a flat record of numbers built
here (pure) from what the trial already measured:

- **the workload's own memory**, from its process tree sampled during the trial
  (:mod:`hugelab.trial.procscan`): peak and mean RSS and PSS, page tables (VmPTE), THP
  (AnonHugePages, ShmemPmdMapped, FilePmdMapped) and hugetlb pages mapped. In a guest these
  are the guest's view of the workload's processes; QEMU's own RSS and page tables (the host's
  view) are `qemu_*`.
- **hugetlb pages reserved against pages used**: the pool pages kept free for the arm
  (`pool_held_kb`: what the arm's pool need was, the pages the host paid for) and those its
  processes mapped (`hugetlb_faulted_kb`); the difference is `pool_unused_kb`.
- **the footprint** (`footprint_kb`): what the host pays for the workload: its RSS, with every
  shared memory object counted once at its allocated size (`unique_kb` of the tree: a server's
  shared buffers are in every backend's RSS, and hold pages no live process maps), plus the
  pool pages held for it (hugetlb memory is not in RSS); for a guest, QEMU's RSS plus its pool.
- **the host's background price** (host-wide, every process's): the deltas of /proc/vmstat's
  compaction and THP counters, the share of THP faults that fell back to small pages, the
  per-size mTHP counters, khugepaged's and kcompactd's CPU seconds, and PSI memory pressure.
- **the application's own figures** (`app_<name>`), where a kind reports them in
  `evidence["app_costs"]` (Redis's fork time and copy-on-write size, a JVM's NMT).

`CATALOGUE` says for each figure its label, unit, scope (the workload's own, host-wide, the
application's report, QEMU's) and whether the report weighs it (a paired effect in the Holm
family "What it costs") or only shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Scale = Literal["ratio", "difference"]

WORKLOAD, HOST, APP, QEMU = "workload", "host-wide", "application", "QEMU (host view)"


@dataclass(frozen=True)
class Cost:
    """One figure of the cost record: how it is named, measured and weighed."""

    key: str
    label: str
    unit: str  # "KiB", "s", "count", "share", or an application's unit
    scope: str
    scale: Scale  # "ratio": effects as percent of the baseline; "difference": in its unit
    weighed: bool = False  # in the report's Holm family, with a paired interval
    memory: bool = False  # a memory amount: the trade the recommendation states


CATALOGUE: tuple[Cost, ...] = (
    Cost("footprint_kb", "footprint (memory + pool)", "KiB", WORKLOAD, "ratio",
         weighed=True, memory=True),
    Cost("rss_peak_kb", "peak RSS", "KiB", WORKLOAD, "ratio", weighed=True),
    Cost("rss_mean_kb", "mean RSS", "KiB", WORKLOAD, "ratio"),
    Cost("pss_peak_kb", "peak PSS", "KiB", WORKLOAD, "ratio", weighed=True),
    Cost("pss_mean_kb", "mean PSS", "KiB", WORKLOAD, "ratio"),
    Cost("pte_peak_kb", "page tables", "KiB", WORKLOAD, "ratio", weighed=True),
    Cost("anon_huge_peak_kb", "AnonHugePages", "KiB", WORKLOAD,
         "difference"),
    Cost("shmem_pmd_peak_kb", "ShmemPmdMapped", "KiB", WORKLOAD,
         "difference"),
    Cost("file_pmd_peak_kb", "FilePmdMapped", "KiB", WORKLOAD,
         "difference"),
    Cost("shmem_objects_peak_kb", "shared memory objects", "KiB", WORKLOAD, "ratio"),
    Cost("hugetlb_faulted_kb", "hugetlb pages mapped", "KiB", WORKLOAD, "difference"),
    Cost("pool_held_kb", "pool pages held", "KiB", WORKLOAD, "difference"),
    Cost("pool_unused_kb", "pool pages held unused", "KiB", WORKLOAD, "difference",
         weighed=True),
    Cost("qemu_rss_peak_kb", "QEMU's peak RSS", "KiB", QEMU, "ratio", weighed=True),
    Cost("qemu_pte_peak_kb", "QEMU's page tables", "KiB", QEMU, "ratio"),
    Cost("thp_fallback_share", "THP fallback share", "share", HOST,
         "difference", weighed=True),
    Cost("compact_stall", "compaction stalls", "count", HOST, "difference", weighed=True),
    Cost("compact_fail", "compaction failures", "count", HOST, "difference"),
    Cost("thp_fault_alloc", "THP faults served", "count", HOST, "difference"),
    Cost("thp_fault_fallback", "THP faults fallen back", "count", HOST, "difference"),
    Cost("thp_split_page", "THPs split", "count", HOST, "difference"),
    Cost("thp_deferred_split_page", "THPs deferred split", "count", HOST,
         "difference"),
    Cost("thp_underused_split_page", "underused THPs split", "count", HOST,
         "difference"),
    Cost("thp_collapse_alloc", "khugepaged collapses", "count", HOST, "difference"),
    Cost("khugepaged_cpu_s", "khugepaged CPU", "s", HOST, "difference", weighed=True),
    Cost("kcompactd_cpu_s", "kcompactd CPU", "s", HOST, "difference", weighed=True),
    Cost("psi_memory_some_share", "memory pressure (PSI)", "share",
         HOST, "difference"),
    Cost("memcg_peak_kb", "memory cgroup's peak (memory_limit)", "KiB", WORKLOAD, "ratio"),
    Cost("memcg_limit_hits", "memory limit hits", "count", WORKLOAD, "difference"),
    Cost("memcg_oom_kill", "OOM kills under the limit", "count", WORKLOAD, "difference"),
    Cost("host_unusable", "fragmentation (free memory unusable for 2M)", "share", HOST,
         "difference"),
)
BY_KEY = {c.key: c for c in CATALOGUE}
VMSTAT = ("compact_stall", "compact_fail", "thp_fault_alloc", "thp_fault_fallback",
          "thp_split_page", "thp_deferred_split_page", "thp_underused_split_page",
          "thp_collapse_alloc")
MTHP_STATS = ("anon_fault_alloc", "anon_fault_fallback", "split_deferred")
APP_UNITS = (("_kb", "KiB"), ("_ms", "ms"), ("_us", "µs"), ("_s", "s"), ("_ratio", "ratio"))
PREFIX_APP, PREFIX_MTHP = "app_", "mthp_"


def describe(key: str) -> Cost:
    """The catalogue's entry for a key, or one made for a per-size mTHP counter
    (`mthp_64kB_anon_fault_alloc`) or an application's figure (`app_fork_ms`)."""
    if key in BY_KEY:
        return BY_KEY[key]
    if key.startswith(PREFIX_APP):
        name = key[len(PREFIX_APP):]
        unit = next((u for suffix, u in APP_UNITS if name.endswith(suffix)), "")
        return Cost(key, name.replace("_", " "), unit, APP, "difference", weighed=True,
                    memory=False)
    if key.startswith(PREFIX_MTHP):
        size, _, stat = key[len(PREFIX_MTHP):].partition("_")
        return Cost(key, f"{size} mTHP {stat.replace('_', ' ')}", "count", HOST, "difference")
    return Cost(key, key.replace("_", " "), "", WORKLOAD, "difference")


def _num(m: Mapping[str, Any] | None, key: str) -> float | None:
    v = (m or {}).get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _tree_costs(tree: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for src, dst in (("rss_kb", "rss_peak_kb"), ("rss_kb_mean", "rss_mean_kb"),
                     ("pss_kb", "pss_peak_kb"), ("pss_kb_mean", "pss_mean_kb"),
                     ("pte_kb", "pte_peak_kb"), ("anon_huge_kb", "anon_huge_peak_kb"),
                     ("shmem_pmd_kb", "shmem_pmd_peak_kb"), ("file_pmd_kb", "file_pmd_peak_kb"),
                     ("shmem_objects_kb", "shmem_objects_peak_kb")):
        if (v := _num(tree, src)) is not None:
            out[prefix + dst] = v
    by_size = tree.get("hugetlb_by_page_kb")
    if isinstance(by_size, Mapping) and not prefix:
        out["hugetlb_faulted_kb"] = float(sum(v for v in by_size.values()
                                              if isinstance(v, int | float)))
    return out


def _vmstat_costs(mon: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    vmstat = mon.get("vmstat")
    if isinstance(vmstat, Mapping):
        out.update({k: float(vmstat.get(k, 0)) for k in VMSTAT})
        tried = out["thp_fault_alloc"] + out["thp_fault_fallback"]
        if tried:
            out["thp_fallback_share"] = out["thp_fault_fallback"] / tried
    mthp = mon.get("mthp_stats")
    if isinstance(mthp, Mapping):
        for size, stats in sorted(mthp.items()):
            for stat in MTHP_STATS:
                if isinstance(stats, Mapping) and stat in stats:
                    out[f"{PREFIX_MTHP}{size.removeprefix('hugepages-')}_{stat}"] = \
                        float(stats[stat])
    return out


def _memcg_costs(cgroup: Any) -> dict[str, float]:
    """The trial's own memory cgroup's figures, under the arm's memory_limit."""
    out: dict[str, float] = {}
    if isinstance(cgroup, Mapping):
        if (v := _num(cgroup, "memcg_peak_bytes")) is not None:
            out["memcg_peak_kb"] = v / 1024
        for key in ("memcg_limit_hits", "memcg_oom_kill"):
            if (v := _num(cgroup, key)) is not None:
                out[key] = v
    return out


def _host_costs(mon: Mapping[str, Any]) -> dict[str, float]:
    out = _vmstat_costs(mon)
    daemons = mon.get("thp_daemons_cpu_s")
    if isinstance(daemons, Mapping):
        for name in ("khugepaged", "kcompactd"):
            if (v := _num(daemons, name)) is not None:
                out[f"{name}_cpu_s"] = v
    if (v := _num(mon.get("load"), "psi_memory_some_share")) is not None:
        out["psi_memory_some_share"] = v
    out.update(_memcg_costs(mon.get("memcg")))
    if (v := _num(mon.get("host_state"), "unusable")) is not None:
        out["host_unusable"] = v  # the host state the trial ran in (hugelab.host.hoststate)
    return out


def _qemu_costs(qemu: Mapping[str, Any]) -> dict[str, float]:
    """QEMU's guest-RAM mapping as a tree's figures (its RSS, its hugetlb pages)."""
    out = {}
    if (v := _num(qemu, "rss_kb")) is not None:
        out["rss_peak_kb"] = v
    if (v := _num(qemu, "hugetlb_kb")) is not None:
        out["hugetlb_faulted_kb"] = v
    return out


def _shared_tree_record(mon: Mapping[str, Any], pool_held_kb: float,
                        app: Mapping[str, Any] | None) -> dict[str, float]:
    """The record of an arm whose tree holds every arm's processes (an interleaved block
    without its server's own tree): its memory is not its own, so no workload memory, pages
    mapped or footprint; the pool pages held for it, the host's costs and its application's
    own figures are."""
    out = {"pool_held_kb": float(pool_held_kb), **_host_costs(mon)}
    out.update(_app_costs(app))
    return out


def _app_costs(app: Mapping[str, Any] | None) -> dict[str, float]:
    return {f"{PREFIX_APP}{key}": v for key, value in (app or {}).items()
            if (v := _num(app, key)) is not None and isinstance(value, int | float)}


def record(tree: Mapping[str, Any] | None, mon: Mapping[str, Any], *, pool_held_kb: float,
           host_tree: Mapping[str, Any] | None = None, qemu: Mapping[str, Any] | None = None,
           app: Mapping[str, Any] | None = None, guest: bool = False) -> dict[str, float]:
    """One trial's cost record (pure). `tree`: the workload's process tree summary (the
    guest's view in a guest); `mon`: the trial's monitors (vmstat, mthp_stats,
    thp_daemons_cpu_s, load); `pool_held_kb`: the hugetlb pages kept for the arm;
    `host_tree`: in a guest, the host-side tree (QEMU, when hugelab started it); `qemu`: the
    guest's QEMU-side evidence (its guest-RAM mapping, read from QEMU's smaps), used where no
    host-side tree holds QEMU (libvirtd started it); `app`: the kind's own figures."""
    if tree and tree.get("shared_by_arms") and not guest:
        return _shared_tree_record(mon, pool_held_kb, app)
    out = _tree_costs(tree or {})
    if guest:  # the guest's own hugetlb is not the host's pool
        out.pop("hugetlb_faulted_kb", None)
    mapper = (_tree_costs(host_tree) if host_tree and host_tree.get("samples")
              else _qemu_costs(qemu or {})) if guest else out  # who maps the pool's pages
    faulted = mapper.get("hugetlb_faulted_kb", 0.0)
    out["hugetlb_faulted_kb"] = faulted
    out["pool_held_kb"] = float(pool_held_kb)
    out["pool_unused_kb"] = max(float(pool_held_kb) - faulted, 0.0)
    if guest:
        for key in ("rss_peak_kb", "pte_peak_kb"):
            if key in mapper:
                out[f"qemu_{key}"] = mapper[key]
    base = out.get("qemu_rss_peak_kb" if guest else "rss_peak_kb")
    if not guest and (once := _num(tree, "unique_kb")) is not None:
        base = once  # shared memory objects counted once, not once per sharer
    if base is not None:
        out["footprint_kb"] = base + max(float(pool_held_kb), faulted)
    out.update(_host_costs(mon))
    out.update(_app_costs(app))
    return out
