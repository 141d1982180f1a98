"""Read-only description of the host's huge-page state, with warnings that teach."""

from __future__ import annotations

import os
import platform
import shutil
from typing import Any

from hugelab import kernel
from hugelab.host import holders as pool_holders
from hugelab.host import memcg
from hugelab.host.control import max_ptes_none_limit, mthp_unsupported_message
from hugelab.host.paths import (
    REAL,
    HostPaths,
    parse_choices,
    parse_kv_kb,
    parse_selected,
    read_text,
)
from hugelab.units import page_label

POOL_FIELDS = ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
               "nr_overcommit_hugepages")
NODE_POOL_FIELDS = ("nr_hugepages", "free_hugepages", "surplus_hugepages")
MEMINFO_KEYS = ("MemTotal", "MemFree", "MemAvailable", "AnonHugePages", "ShmemHugePages",
                "FileHugePages", "HugePages_Total", "HugePages_Free", "HugePages_Rsvd",
                "HugePages_Surp", "Hugepagesize", "Hugetlb")


def cpu_flags(paths: HostPaths) -> set[str]:
    text = read_text(paths.cpuinfo, "") or ""
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_model(paths: HostPaths) -> str | None:
    """The first CPU's model name (x86 'model name', arm64 'CPU part' has none: None)."""
    for line in (read_text(paths.cpuinfo, "") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip() or None
    return None


def cmdline_params(paths: HostPaths) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for word in (read_text(paths.cmdline, "") or "").split():
        if word == "--":
            break
        key, _, value = word.partition("=")
        out.setdefault(key, []).append(value)
    return out


def thp_state(paths: HostPaths, cmdline: dict[str, list[str]]) -> dict[str, Any]:
    if not paths.thp_enabled.exists():
        return {"supported": False}
    state: dict[str, Any] = {"supported": True}
    for name, path in (("enabled", paths.thp_enabled), ("defrag", paths.thp_defrag)):
        text = read_text(path, "") or ""
        state[name] = parse_selected(text)
        state[f"{name}_choices"] = parse_choices(text)
    kh = {}
    for key in ("defrag", "pages_to_scan", "scan_sleep_millisecs", "max_ptes_none",
                "pages_collapsed", "full_scans"):
        value = read_text(paths.khugepaged(key))
        if value is not None:
            kh[key] = int(value.strip()) if value.strip().isdigit() else value.strip()
    state["khugepaged"] = kh
    if "max_ptes_none" in kh:
        state["max_ptes_none_limit"] = max_ptes_none_limit(paths)
    shrink = read_text(paths.shrink_underused)
    if shrink is not None:  # Linux 6.12+: the THP shrinker for underused huge pages
        state["shrink_underused"] = shrink.strip() == "1"
    shmem = read_text(paths.shmem_enabled)
    if shmem is not None:
        state["shmem_enabled"] = parse_selected(shmem)
    state["cmdline"] = cmdline.get("transparent_hugepage", [None])[-1]
    return state


def mthp_state(paths: HostPaths) -> dict[str, Any]:
    """The folio sizes multi-size THP offers (Linux 6.8+) and each one's modes: `enabled`
    (anonymous memory; absent for sizes only shmem can have) and `shmem_enabled` (6.11+)."""
    sizes = paths.mthp_sizes_kb()
    if not sizes:
        return {"supported": False, "reason": mthp_unsupported_message(paths)}
    out = []
    for size_kb in sizes:
        entry: dict[str, Any] = {"size": page_label(size_kb), "size_kb": size_kb}
        for key, path in (("enabled", paths.mthp_enabled(size_kb)),
                          ("shmem_enabled", paths.mthp_shmem_enabled(size_kb))):
            text = read_text(path)
            entry[key] = parse_selected(text) if text is not None else None
        out.append(entry)
    return {"supported": True, "sizes": out}


def pools(paths: HostPaths) -> list[dict[str, Any]]:
    out = []
    for size_kb in paths.pool_sizes_kb():
        pool: dict[str, Any] = {"size": page_label(size_kb), "size_kb": size_kb}
        for f in POOL_FIELDS:
            v = read_text(paths.pool_file(size_kb, f))
            pool[f.removesuffix("_hugepages")] = int(v) if v is not None else None
        nodes = []
        for node in paths.numa_nodes():
            entry: dict[str, Any] = {"node": node}
            for f in NODE_POOL_FIELDS:
                v = read_text(paths.pool_file(size_kb, f, node=node))
                entry[f.removesuffix("_hugepages")] = int(v) if v is not None else None
            nodes.append(entry)
        pool["nodes"] = nodes
        out.append(pool)
    return out


def hugetlbfs_mounts(paths: HostPaths) -> list[dict[str, str]]:
    return [{"target": m.target, "pagesize": m.pagesize or "default"}
            for m in kernel.hugetlbfs_mounts(read_text(paths.mounts, "") or "")]


def fragmentation(paths: HostPaths) -> dict[str, Any]:
    """Free blocks per order summed over zones; how much free memory sits in 2 MiB+ blocks."""
    orders = [0] * 11
    for line in (read_text(paths.buddyinfo, "") or "").splitlines():
        counts = line.split()[4:]
        for i, c in enumerate(counts[: len(orders)]):
            orders[i] += int(c)
    free_kb = sum(c * 4 * (1 << i) for i, c in enumerate(orders))
    high_kb = sum(c * 4 * (1 << i) for i, c in enumerate(orders) if i >= 9)
    return {"free_blocks_per_order": orders, "free_kb": free_kb,
            "free_in_2M_blocks_kb": high_kb,
            "free_in_2M_blocks_pct": round(100.0 * high_kb / free_kb, 1) if free_kb else None}


def inspect_host(paths: HostPaths = REAL) -> dict[str, Any]:
    flags = cpu_flags(paths)
    cmdline = cmdline_params(paths)
    meminfo = parse_kv_kb(read_text(paths.meminfo, "") or "")
    info: dict[str, Any] = {
        "kernel": (read_text(paths.osrelease, platform.release()) or "").strip(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpu": {"model": cpu_model(paths), "pse": "pse" in flags, "pdpe1gb": "pdpe1gb" in flags,
                "cpus": os.cpu_count()},
        "thp": thp_state(paths, cmdline),
        "mthp": mthp_state(paths),
        "pools": pools(paths),
        "cmdline_hugepages": {k: v for k, v in cmdline.items()
                              if k in ("hugepages", "hugepagesz", "default_hugepagesz",
                                       "transparent_hugepage", "hugetlb_cma")},
        "numa_nodes": paths.numa_nodes(),
        "hugetlbfs_mounts": hugetlbfs_mounts(paths),
        "meminfo_kb": {k: meminfo[k] for k in MEMINFO_KEYS if k in meminfo},
        "fragmentation": fragmentation(paths),
        "hardware_counters": hardware_counters(paths),
        "memcg": memcg.state(paths),
    }
    found = pool_holders.scan(paths)
    info["holders"] = found
    info["pool_holders"] = pool_holders.pool_holders(info["pools"], found)
    info["warnings"] = warnings(info)
    return info


def warnings(info: dict[str, Any]) -> list[str]:
    out = []
    sizes = {p["size"]: p for p in info["pools"]}
    if not info["cpu"]["pdpe1gb"] or "1G" not in sizes:
        out.append("1 GiB pages unsupported: CPU lacks pdpe1gb (hugetlb-1G arms will be skipped)")
    if not info["cpu"]["pse"]:
        out.append("2 MiB pages unsupported: CPU lacks pse")
    for size in ("2M", "1G"):
        if size in sizes and not sizes[size]["nr"]:
            out.append(f"no {size} pool reserved: hugetlb-{size} arms need one "
                       f"(`hugelab host set --pool {size}=N`; `hugelab run` reserves it for you)")
    out += [pool_holders.describe(e) + ": a run grows the pool on top of them and leaves their "
            "pages alone" for e in info.get("pool_holders") or []]
    thp = info["thp"]
    if not thp.get("supported"):
        out.append("THP not supported by this kernel: thp arms will be skipped")
    elif thp.get("enabled") == "never":
        out.append("THP is 'never': thp arms get no huge pages until enabled is madvise or always")
    if thp.get("cmdline"):
        out.append(f"THP mode was fixed on the kernel command line "
                   f"(transparent_hugepage={thp['cmdline']}); hugelab changes it only until restore")
    frag = info["fragmentation"]
    if frag["free_in_2M_blocks_pct"] is not None and frag["free_in_2M_blocks_pct"] < 50:
        out.append(f"memory is fragmented: only {frag['free_in_2M_blocks_pct']}% of free memory is "
                   "in 2 MiB blocks; THP may fall back and pools may need compaction")
    for cg in (info.get("memcg") or {}).get("hugelab_cgroups") or []:
        out.append(f"memory cgroup {cg} was left by a hugelab run: `hugelab recover` removes "
                   "it when its run is gone")
    if len(info["numa_nodes"]) > 1:
        out.append(f"{len(info['numa_nodes'])} NUMA nodes: reserve pools per node "
                   "(`--pool 1G=4@0`) and pin workloads, or results mix local and remote memory")
    return out


PMU_DIRS = ("cpu", "cpu_core", "cpu_atom", "armv8_pmuv3_0")


def hardware_counters(paths: HostPaths = REAL) -> dict[str, Any]:
    """Whether dTLB-miss and page-walk counters can be read; the reason when not."""
    base = paths.p("sys/bus/event_source/devices")
    pmu = next((d for d in PMU_DIRS if (base / d).is_dir()), None)
    if pmu is None:
        return {"available": False,
                "reason": "no CPU PMU is exposed (common inside VMs): dTLB misses and page-walk "
                          "cycles are not available on this host"}
    if shutil.which("perf") is None:
        return {"available": False, "reason": "perf is not installed (apt-get install linux-perf)"}
    return {"available": True, "pmu": pmu}
