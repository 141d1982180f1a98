"""`hugelab run --dry-run`'s plan: the cells, what each changes on the host, the guests it
boots, and what the whole run will cost, before anything changes. Reads the host and the
store; writes nothing."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from hugelab.experiment import Arm, Experiment
from hugelab.host.buddyinfo import Snapshot, snapshot
from hugelab.host.inspect import inspect_host
from hugelab.host.paths import REAL, HostPaths, read_text
from hugelab.owned import state_dir
from hugelab.planning.arms import arm_thp_knobs, arm_tunables, unsupported_arms
from hugelab.planning.budget import over_budget
from hugelab.planning.cost import (
    Measured,
    build_cost,
    estimate,
    in_guest_build,
    in_guest_build_s,
    layer_build_s,
)
from hugelab.planning.poolreach import reach_plan
from hugelab.planning.pools import pool_plan, pool_plan_warnings, workload_bytes
from hugelab.store.keys import experiment_key_of
from hugelab.store.locate import exists, open_store, resolve
from hugelab.trial.load import busy_now
from hugelab.units import page_label
from hugelab.vm.trial import vm_spec
from hugelab.workloads.base import Workload
from hugelab.workloads.preview import previewing

RECENT_RUNS = 20  # boot times are taken from this many latest runs of the store


def measured(store_path: str | Path | None, exp: Experiment,
             free_kb: int = 0) -> tuple[Measured, str | None]:
    """Median guest boot seconds (latest runs), per-arm trial seconds (this experiment's
    earlier run) and fragment holders' fill rate, from the store when it exists, with the
    host's free memory (`free_kb`: what an aged host's making fills); and the accelerator
    guests last had."""
    if not exists(resolve(store_path)):
        return Measured(free_kb=free_kb), None
    boots: list[float] = []
    accel = None
    per_arm: dict[str, list[float]] = {}
    holders: dict[tuple[int, float], float] = {}  # (run, its seconds) -> bytes per second
    with open_store(store_path) as store:
        runs = store.runs()[-RECENT_RUNS:]
        for run in runs:
            mine = experiment_key_of(str(run.get("key"))) == exp.key()
            for t in store.trials(run["id"]):
                prov = t.get("provenance") or {}
                if prov.get("boot_s"):
                    boots.append(float(prov["boot_s"]))
                    accel = prov.get("accel") or accel
                if mine and t.get("status") == "ok" and t.get("started") and t.get("ended"):
                    per_arm.setdefault(t["arm"], []).append(float(t["ended"]) - float(t["started"]))
                held = (t.get("monitors") or {}).get("host_state") or {}
                if held.get("touched_kb") and held.get("seconds"):  # one holder, many trials
                    holders[(run["id"], float(held["seconds"]))] = \
                        float(held["touched_kb"]) * 1024 / float(held["seconds"])
    trial_s = {a: statistics.median(v) for a, v in per_arm.items()}
    return Measured(statistics.median(boots) if boots else None, trial_s or None,
                    statistics.median(holders.values()) if holders else None, free_kb), accel


def _unresolved(arm: Arm) -> bool:
    """A user's domain arm whose memory the dry run could not read (libvirtd not reachable,
    said among the warnings): the run reads and checks it before any change."""
    return arm.vm is not None and arm.vm.domain is not None and not arm.vm.mem_mib


def _guests(arm: Arm) -> str:
    """`1x1024M file-2M+prealloc`: guests, their RAM and its backing."""
    vm = arm.vm
    if vm is None:
        return "native"
    backing = vm.backing + (f"-{vm.page_size}" if vm.page_size else "") + \
        ("+prealloc" if vm.prealloc else "")
    ram = "(the domain's RAM)" if _unresolved(arm) else f"{vm.mem_mib}M"
    return f"{vm.vms}x{ram} {backing}"


def _thp(arm: Arm) -> str | None:
    """The THP `enabled` mode an arm sets; a native mthp-<size> arm's `thp` is its size's."""
    return None if arm.mthp_kb and arm.vm is None else arm.thp


def _size(size_kb: int | None) -> str | None:
    """64 -> '64K', 2048 -> '2M'; None (the top-level shmem_enabled) stays None."""
    if size_kb is None:
        return None
    return page_label(size_kb)


def host_mthp(host: dict[str, Any]) -> list[dict[str, Any]]:
    """The host's multi-size THP knobs now: `enabled` per size (anonymous memory), then
    `shmem_enabled` (size None: the top-level file) and per size; [] on a kernel without."""
    sizes = (host.get("mthp") or {}).get("sizes") or []
    out = [{"knob": "enabled", "size": s["size"], "mode": s["enabled"]}
           for s in sizes if s.get("enabled")]
    if host["thp"].get("shmem_enabled") and sizes:
        out.append({"knob": "shmem_enabled", "size": None, "mode": host["thp"]["shmem_enabled"]})
    return out + [{"knob": "shmem_enabled", "size": s["size"], "mode": s["shmem_enabled"]}
                  for s in sizes if s.get("shmem_enabled")]


def mthp_knobs(arm: Arm, host: dict[str, Any]) -> list[dict[str, Any]]:
    """The multi-size THP knobs an arm's trials run under (planning.arms.arm_thp_knobs), each with
    the host's mode now and whether the arm leaves it unchanged; [] on a kernel without."""
    if not (host.get("mthp") or {}).get("supported"):
        return []
    now = {(k["knob"], k["size"]): k["mode"] for k in host_mthp(host)}
    anon, shmem = arm_thp_knobs(arm, host)
    pairs = [("enabled", _size(kb), m) for kb, m in anon.items()] + \
        [("shmem_enabled", _size(kb), m) for kb, m in shmem.items()]
    return [{"knob": knob, "size": size, "mode": mode, "host": now.get((knob, size)),
             "unchanged": now.get((knob, size)) == mode} for knob, size, mode in pairs]


def tunables(arm: Arm, host: dict[str, Any]) -> list[dict[str, Any]]:
    """The THP tunables an arm's trials run under (planning.arms.arm_tunables), each with the
    host's value now and whether the arm leaves it unchanged; [] on a kernel without them."""
    thp = host["thp"]
    now = {"max_ptes_none": (thp.get("khugepaged") or {}).get("max_ptes_none"),
           "shrink_underused": thp.get("shrink_underused")}
    return [{"knob": k, "value": v, "host": now[k], "unchanged": now[k] == v}
            for k, v in arm_tunables(arm, host).items()]


def memory_cgroups(arms: list[Arm], host: dict[str, Any]) -> dict[str, Any] | None:
    """Where the memory cgroups of arms with a memory_limit go, and each arm's limit; None
    when no arm has one."""
    limits = {a.name: a.memory_limit for a in arms if a.memory_limit is not None}
    if not limits:
        return None
    cg = host.get("memcg") or {}
    return {"version": cg.get("version"), "root": cg.get("root"),
            "limit_file": cg.get("limit_file"), "limits": limits}


def builds(workload: Workload, per_arm: dict[str, Workload],
           arms: list[str] | None = None) -> list[dict[str, Any]]:
    """What the run builds before its first trial (each workload's `builds()`, once each), with
    the cost model's bytes and seconds; the dry run built none of it. `arms`: the arms that
    run, each with its own workload where it has one (an experiment whose every arm runs in a
    user's domain builds nothing on the host); None: every workload given."""
    out: dict[str, dict[str, Any]] = {}
    ws = [workload, *per_arm.values()] if arms is None else \
        [per_arm.get(a, workload) for a in arms]
    for w in ws:
        for b in getattr(w, "builds", lambda: [])():
            size, secs = build_cost(b.recipe, b.amount)
            out.setdefault(b.what, {"what": b.what, "bytes": size, "seconds": secs,
                                    "cached": b.cached, "note": b.note})
    return list(out.values())


def guest_builds(arms: list[Arm], exp: Experiment, accel: str) -> list[dict[str, Any]]:
    """What every trial of an arm in a user's domain builds in the guest, and the seconds the
    cost model counts for it (in the arm's s/trial); once per distinct build."""
    out: dict[str, dict[str, Any]] = {}
    for a in arms:
        table = exp.workload_for(a)
        if a.vm is not None and a.vm.domain is not None and (g := in_guest_build(table)):
            out.setdefault(g.what, {"what": g.what, "seconds": in_guest_build_s(table, accel),
                                    "accel": accel})
            if g.layer_s:
                out[g.what]["layer"] = {"what": g.layer_what, "domain": a.vm.domain,
                                        "seconds": layer_build_s(table, accel)}
    return list(out.values())


def plan(exp: Experiment, workload: Workload, per_arm: dict[str, Workload],
         store_path: Path, budget_s: float | None, notes: list[str] | None = None,
         paths: HostPaths = REAL) -> dict[str, Any]:
    """Everything the dry run reports, as one JSON-able dict; validates every guest cell.
    `notes`: what it could not check (libvirtd not reachable), said first among warnings.
    Builds nothing a workload needs (hugelab.workloads.preview). `paths`: the host it reads
    (a fake /sys and /proc tree in tests)."""
    with previewing():
        out = _plan(exp, workload, per_arm, store_path, budget_s, notes, paths)
    out["host_busy"] = busy_now(paths)  # not a warning: how far to trust the estimate
    return out


def free_lists(paths: HostPaths) -> Snapshot:
    """/proc/buddyinfo now (no zones where it cannot be read)."""
    return snapshot(read_text(paths.buddyinfo, "") or "")


def _plan(exp: Experiment, workload: Workload, per_arm: dict[str, Workload],
          store_path: Path, budget_s: float | None, notes: list[str] | None,
          paths: HostPaths) -> dict[str, Any]:
    host = inspect_host(paths)
    skipped = unsupported_arms(exp, host)
    hugetlbfs = {s: state_dir() / f"hugetlbfs-{s}" for s in ("2M", "1G")}
    for a in exp.arms:
        if a.vm is not None and not _unresolved(a):
            vm_spec(a, workload_bytes(per_arm.get(a.name, workload), a), hugetlbfs)
    runnable = [a for a in exp.arms if a.name not in skipped]
    thp_now = host["thp"].get("enabled")
    modes = sorted({(_thp(a) or thp_now or "-", a.thp_defrag or host["thp"].get("defrag") or "-")
                    for a in runnable})
    pools = pool_plan(exp, workload, runnable, per_arm)
    mounts = sorted({a.vm.page_size for a in runnable
                     if a.vm and a.vm.backing == "file" and a.vm.page_size})
    meas, accel = measured(store_path, exp, free_lists(paths).free_kb())
    exp_run = replace(exp, arms=tuple(runnable))  # skipped cells cost nothing
    est = estimate(exp_run, meas, accel or "tcg")
    out: dict[str, Any] = {
        "experiment": exp.name, "blocks": exp.blocks, "repeats": exp.repeats,
        "design": exp.design,
        "cells": [{"name": a.name, "layer": a.layer, "levels": dict(a.levels),
                   "host_thp": _thp(a) or "(unchanged)", "guests": _guests(a),
                   "trial_s": est.per_arm.get(a.name), "basis": est.basis.get(a.name, "skipped"),
                   "skipped": skipped.get(a.name),
                   "mthp_knobs": [] if a.name in skipped else mthp_knobs(a, host),
                   "thp_tunables": [] if a.name in skipped else tunables(a, host),
                   "memory_limit": a.memory_limit}
                  for a in exp.arms],
        "factors": [{"name": f.name, "levels": list(f.levels), "scenario": f.scenario}
                    for f in exp.factors],
        "trials_per_block": len(runnable), "trials": len(runnable) * exp.blocks * exp.repeats,
        "host_changes": {"thp_modes": [{"enabled": e, "defrag": d} for e, d in modes],
                         "pools": [{"size": s, "node": n, "pages": p}
                                   for (s, n), p in sorted(pools.items(), key=str)],
                         "hugetlbfs_mounts": mounts,
                         "memory_cgroups": memory_cgroups(runnable, host)},
        "host_mthp": host_mthp(host),
        "guests_per_block": sum(a.vm.vms for a in runnable if a.vm),
        "boot_s": est.boot_s, "boot_basis": est.boot_basis, "fragment_s": est.fragment_s,
        "layers_s": est.layers_s, "estimated_s": est.seconds, "budget_s": budget_s,
        "warnings": list(notes or []), "builds": builds(workload, per_arm, [a.name for a in runnable]),
    }
    out["estimated_s"] += sum(b["seconds"] or 0.0 for b in out["builds"] if not b["cached"])
    out["guest_builds"] = guest_builds(runnable, exp, accel or "tcg")
    if "unknown" in est.basis.values():
        out["warnings"].append("the workload does not say how long it runs (no timeout_s): its "
                               "trials count as 0 s; run one block first (--blocks 1) to measure")
    for a in runnable:  # what a user's own config sets that the arm overrides (postgres)
        if callable(said := getattr(per_arm.get(a.name, workload), "settings_warnings", None)):
            out["warnings"] += [f"arm '{a.name}': {w}" for w in said(a.backing)]
    out["pool_holders"] = host.get("pool_holders") or []
    out["warnings"] += pool_plan_warnings(host, pools)
    out["pool_reach"], reach = reach_plan(host, pools, free_lists(paths))  # buddyinfo's word
    out["warnings"] += reach
    if budget_s is not None and est.seconds > budget_s:
        out["warnings"].append(over_budget(exp_run, meas, accel or "tcg", est.seconds,
                                           budget_s))
    return out
