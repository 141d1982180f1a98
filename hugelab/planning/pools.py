"""The hugetlb pages a run needs, per pool (page size, NUMA node), and what the host's pools
say about them now."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hugelab.experiment import Arm, Experiment
from hugelab.host.control import POOL_RESERVE_KB, size_kb_from_name
from hugelab.host.holders import describe
from hugelab.vm.trial import host_pool_need
from hugelab.workloads.base import Workload


def workload_bytes(workload: Workload, arm: Arm | None = None) -> int | None:
    """Bytes of huge pages one trial's workload maps, from its one hook
    `hugetlb_bytes_for(size)` with the arm's page size (None where the arm names none): e.g. a
    JVM's heap rounded to whole pages, PostgreSQL's own count, hugelab-mem's buffer; None for a
    workload with nothing to say for that size; without the hook, a `size_bytes` buffer."""
    size = arm.hugetlb_size if arm is not None else None  # a guest arm's: its guest's pool
    need_for = getattr(workload, "hugetlb_bytes_for", None)
    if callable(need_for):
        need = need_for(size)
        return None if need is None else int(need)
    buffer = getattr(workload, "size_bytes", None)
    return buffer if isinstance(buffer, int) else None


PoolKey = tuple[str, int | None]


def arm_pool_need(arm: Arm, nbytes: int | None) -> dict[PoolKey, int]:
    """Host pages one trial of `arm` takes per (size, node): the arm's own `pools`, else what
    its guests' RAM (vm layer, prealloc or not) or its native hugetlb buffer needs."""
    asked = {(p.size, p.node): p.pages for p in arm.pools}
    vm_need = host_pool_need(arm)
    if vm_need and not any(k[0] == vm_need[0] for k in asked):
        asked[(vm_need[0], arm.vm.numa_node if arm.vm else None)] = vm_need[1]
    size = arm.hugetlb_size if arm.vm is None else None
    if size and nbytes and not any(k[0] == size for k in asked):
        asked[(size, None)] = math.ceil(nbytes / (size_kb_from_name(size) * 1024))
    return asked


def pool_plan(exp: Experiment, workload: Workload, arms: list[Arm] | None = None,
              per_arm: Mapping[str, Workload] | None = None) -> dict[PoolKey, int]:
    """Pages each (size, node) pool needs: the largest any arm asks for, or in a duet (every arm
    of a block at once) the sum of all arms' needs. `per_arm`: a cell's own workload (its
    scenario's), where it differs from `workload`."""
    need: dict[PoolKey, int] = {}
    per_arm = per_arm or {}
    for arm in exp.arms if arms is None else arms:
        nbytes = workload_bytes(per_arm.get(arm.name, workload), arm)
        for key, pages in arm_pool_need(arm, nbytes).items():
            together = exp.design in ("duet", "interleaved")  # every arm of a block at once
            need[key] = need.get(key, 0) + pages if together else \
                max(need.get(key, 0), pages)
    return need


def global_first(plan: Mapping[PoolKey, int]) -> list[tuple[PoolKey, int]]:
    """A plan's pools, host-wide ones before per-node ones, by size."""
    return sorted(plan.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1]))


def pool_plan_warnings(host: dict[str, Any], pools: dict[PoolKey, int]
                       ) -> list[str]:
    """Per pool the run needs: who holds its pages now and what the run will set it to, and
    whether memory allows it to grow that far (all of the run's pools together)."""
    by_size = {p["size"]: p for p in host.get("pools", [])}
    held = {e["size"]: e for e in host.get("pool_holders") or []}
    out, extra_kb = [], 0
    for (size, node), pages in sorted(pools.items(), key=str):
        pool = by_size.get(size)
        if pool is None or node is not None:
            continue
        free = max(int(pool.get("free") or 0) - int(pool.get("resv") or 0), 0)
        if size in held:
            out.append(f"{describe(held[size])}: the run will set the pool to "
                       f"{held[size]['held']} + {pages} pages so that its own are free")
        extra_kb += max(pages - free, 0) * int(pool["size_kb"])
    avail = int((host.get("meminfo_kb") or {}).get("MemAvailable", 0))
    if extra_kb and extra_kb > avail - POOL_RESERVE_KB:
        out.append(f"the run's pools need {extra_kb / 1048576:.1f} GiB more memory than is free "
                   f"in them now, and only {avail / 1048576:.1f} GiB is available, of which "
                   f"{POOL_RESERVE_KB // 1024} MiB is left to the host (the pool reserve): arms "
                   "whose pool cannot grow will be skipped")
    return out
