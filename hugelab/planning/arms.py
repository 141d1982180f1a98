"""What a host can run of an experiment's arms, and the THP knobs and tunables each arm's trials
run under. Pure: `host` is inspect_host() at the run's start."""

from __future__ import annotations

from typing import Any

from hugelab.experiment import Arm, Experiment, VmLayer


def unsupported_arms(exp: Experiment, host: dict[str, Any]) -> dict[str, str]:
    """Arms this host cannot run at all, with the reason a user should read."""
    sizes = {p["size"] for p in host["pools"]}
    out = {}
    for arm in exp.arms:
        size = arm.hugetlb_size if arm.vm is None else arm.vm.page_size
        if size == "1G" and (not host["cpu"]["pdpe1gb"] or "1G" not in sizes):
            out[arm.name] = "1 GiB pages unsupported: the CPU lacks pdpe1gb"
        elif size and size not in sizes:
            out[arm.name] = f"{size} huge pages unsupported by this kernel"
        elif (arm.backing == "thp" or arm.thp) and not host["thp"].get("supported"):
            out[arm.name] = "this kernel has no transparent huge pages"
        elif arm.backing == "thp" and arm.vm is None and (arm.thp or host["thp"].get("enabled")) == "never":
            out[arm.name] = "THP is 'never' on this host and the arm does not set thp"
        elif why := _new_backing_problem(arm, host) or tunables_problem(arm, host):
            out[arm.name] = why
    return out


def tunables_problem(arm: Arm, host: dict[str, Any]) -> str | None:
    """Why this host cannot give an arm its THP tunables (thp_max_ptes_none,
    thp_shrink_underused) or its memory_limit (a memory cgroup), or None."""
    thp = host["thp"]
    if arm.thp_max_ptes_none is not None:
        top = thp.get("max_ptes_none_limit")
        if "max_ptes_none" not in (thp.get("khugepaged") or {}) or top is None:
            return "this kernel has no khugepaged max_ptes_none (no transparent huge pages)"
        if arm.thp_max_ptes_none > top:
            return (f"thp_max_ptes_none = {arm.thp_max_ptes_none} is above this kernel's "
                    f"largest, {top} (a 2 MiB region's 4 KiB pages - 1)")
    if arm.thp_shrink_underused is not None and "shrink_underused" not in thp:
        return (f"this kernel ({host.get('kernel') or 'unknown'}) has no THP shrinker for "
                "underused huge pages (shrink_underused came in Linux 6.12)")
    memcg = host.get("memcg") or {}
    if arm.memory_limit is not None and not memcg.get("supported"):
        return f"memory_limit: {memcg.get('reason') or 'no memory cgroup controller'}"
    return None


def arm_tunables(arm: Arm, host: dict[str, Any]) -> dict[str, Any]:
    """The THP tunables an arm's trials run under: the arm's own, or as found at the run's
    start (`host`: inspect_host() then), so an earlier arm leaves no trace. Only the knobs
    this kernel has: {"max_ptes_none": int, "shrink_underused": bool}."""
    thp = host["thp"]
    out: dict[str, Any] = {}
    found = (thp.get("khugepaged") or {}).get("max_ptes_none")
    if isinstance(found, int):
        out["max_ptes_none"] = found if arm.thp_max_ptes_none is None else arm.thp_max_ptes_none
    if "shrink_underused" in thp:
        out["shrink_underused"] = (thp["shrink_underused"] if arm.thp_shrink_underused is None
                                   else arm.thp_shrink_underused)
    return out


def _new_backing_problem(arm: Arm, host: dict[str, Any]) -> str | None:
    """Why this host cannot give a native mthp-<size> or shmem-thp arm, or a guest arm's
    vm mthp, its memory, or None."""
    if arm.vm is not None:
        return _vm_mthp_problem(arm.vm, host)
    mthp = host.get("mthp") or {}
    if arm.mthp_kb:
        offered = [s["size_kb"] for s in mthp.get("sizes") or [] if s.get("enabled")]
        if not mthp.get("supported"):
            return str(mthp.get("reason") or "multi-size THP is not supported by this kernel")
        if arm.mthp_kb not in offered:
            return (f"this kernel offers no {arm.mthp_kb} KiB multi-size THP for anonymous "
                    f"memory (it offers {', '.join(f'{s} KiB' for s in offered)})")
        if arm.thp == "never":
            return f"arm sets thp = 'never': its {arm.mthp_kb} kB folios would never be used"
    if arm.backing == "shmem-thp" and not host["thp"].get("shmem_enabled"):
        return "this kernel has no THP for shmem (no shmem_enabled)"
    return None


def _vm_mthp_problem(vm: VmLayer, host: dict[str, Any]) -> str | None:
    """Why the host cannot back this guest's RAM (anon, or memfd: shmem) in vm mthp folios."""
    kb = vm.mthp_kb
    if not kb:
        return None
    mthp = host.get("mthp") or {}
    if not mthp.get("supported"):
        return str(mthp.get("reason") or "multi-size THP is not supported by this kernel")
    knob = "enabled" if vm.backing == "anon" else "shmem_enabled"
    offered = [s["size_kb"] for s in mthp.get("sizes") or [] if s.get(knob)]
    if kb not in offered:
        what = "anonymous memory" if vm.backing == "anon" else "shmem (memfd)"
        return (f"this kernel offers no {kb} KiB multi-size THP for {what} (it offers "
                f"{', '.join(f'{s} KiB' for s in offered) or 'none'})")
    if vm.backing == "memfd" and not host["thp"].get("shmem_enabled"):
        return "this kernel has no THP for shmem (no shmem_enabled)"
    return None


PMD_KB = 2048  # x86-64's PMD size: the folio size `thp` means


def arm_thp_knobs(arm: Arm, host: dict[str, Any]) -> tuple[dict[int, str], dict[int | None, str]]:
    """The per-size THP modes (anonymous memory, by folio KiB) and shmem_enabled modes (None:
    the top-level one) an arm's trials run under; `host` is inspect_host() at the run's start.

    mthp-<S>    size S gets the arm's `thp` (default madvise: the micro-benchmark madvises its buffer;
                a workload that cannot needs thp = "always"); every other size, 2M included,
                `never`, so the buffer can get S folios or 4 KiB pages and nothing else. The
                top-level `enabled` stays as found: it only matters for `inherit` sizes.
    shmem-thp   shmem_enabled `advise` (the memfd is madvised); per-size shmem 2M `inherit`,
                every other size `never`.
    vm mthp S   (guest arms) anon guest RAM: size S `madvise` (QEMU madvises guest RAM),
                every other size `never`; memfd guest RAM (shmem): shmem_enabled `advise`,
                per-size shmem S `advise`, every other size `never` (both are needed: on
                Linux 6.18 a memfd gets S folios only with both on).
    thp, thp-collapse (native) the PMD size `inherit` when it was found `never` (a host
                left so by an admin or a killed mthp run would give the arm no THP at all,
                whatever its `thp`); every other knob as found.
    any other   every knob as found at the run's start (so earlier arms leave no trace);
                guest arms too, whatever their backing inside the guest.
    """
    sizes = (host.get("mthp") or {}).get("sizes") or []
    anon = {s["size_kb"]: s["enabled"] for s in sizes if s.get("enabled")}
    shmem: dict[int | None, str] = {s["size_kb"]: s["shmem_enabled"] for s in sizes
                                    if s.get("shmem_enabled")}
    if host["thp"].get("shmem_enabled"):
        shmem[None] = host["thp"]["shmem_enabled"]
    if arm.vm is not None:
        kb = arm.vm.mthp_kb
        if kb and arm.vm.backing == "anon":
            anon = {k: "madvise" if k == kb else "never" for k in anon}
        elif kb:
            shmem = {k: "advise" if k in (None, kb) else "never" for k in shmem}
        return anon, shmem
    if arm.mthp_kb:
        anon = {k: (arm.thp or "madvise") if k == arm.mthp_kb else "never" for k in anon}
    if arm.backing in ("thp", "thp-collapse") and anon.get(PMD_KB) == "never":
        anon[PMD_KB] = "inherit"
    if arm.backing == "shmem-thp":
        shmem = {k: "advise" if k is None else "inherit" if k == PMD_KB else "never"
                 for k in shmem}
    return anon, shmem
