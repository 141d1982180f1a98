"""`hugelab run --dry-run`: the cells, what each changes on the host, the guests it boots, and
what the whole run will cost, before anything changes."""

from __future__ import annotations

import argparse
import json
import re
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hugelab.errors import UsageError
from hugelab.experiment import Arm, Experiment
from hugelab.experiment.cost import Measured, cuts, estimate, human
from hugelab.host.holders import describe
from hugelab.host.inspect import inspect_host
from hugelab.host.journal import state_dir
from hugelab.runner import arm_thp_knobs, pool_plan, unsupported_arms
from hugelab.stats.paired import MIN_UNITS
from hugelab.store.locate import exists, open_store, resolve
from hugelab.vm.trial import vm_spec
from hugelab.workloads.base import Workload

RECENT_RUNS = 20  # boot times are taken from this many latest runs of the store


def parse_budget(text: str) -> float:
    """'90m', '2h', '45s', '1h30m' -> seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([hms])", text.strip().lower())
    if not parts or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s", "", text.lower()):
        raise argparse.ArgumentTypeError(f"not a duration like 90m, 2h or 1h30m: {text!r}")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def measured(store_path: str | Path | None, exp: Experiment) -> tuple[Measured, str | None]:
    """Median guest boot seconds (latest runs) and per-arm trial seconds (this experiment's
    earlier run), from the store when it exists; and the accelerator guests last had."""
    if not exists(resolve(store_path)):
        return Measured(), None
    boots: list[float] = []
    accel = None
    per_arm: dict[str, list[float]] = {}
    with open_store(store_path) as store:
        runs = store.runs()[-RECENT_RUNS:]
        for run in runs:
            mine = str(run.get("key")).split("@")[0] == exp.key()
            for t in store.trials(run["id"]):
                prov = t.get("provenance") or {}
                if prov.get("boot_s"):
                    boots.append(float(prov["boot_s"]))
                    accel = prov.get("accel") or accel
                if mine and t.get("status") == "ok" and t.get("started") and t.get("ended"):
                    per_arm.setdefault(t["arm"], []).append(float(t["ended"]) - float(t["started"]))
    trial_s = {a: statistics.median(v) for a, v in per_arm.items()}
    return Measured(statistics.median(boots) if boots else None, trial_s or None), accel


def _guests(arm: Arm) -> str:
    """`1x1024M file-2M+prealloc`: guests, their RAM and its backing."""
    vm = arm.vm
    if vm is None:
        return "native"
    backing = vm.backing + (f"-{vm.page_size}" if vm.page_size else "") + \
        ("+prealloc" if vm.prealloc else "")
    return f"{vm.vms}x{vm.mem_mib}M {backing}"


def _thp(arm: Arm) -> str | None:
    """The THP `enabled` mode an arm sets; a native mthp-<size> arm's `thp` is its size's."""
    return None if arm.mthp_kb and arm.vm is None else arm.thp


def _size(size_kb: int | None) -> str | None:
    """64 -> '64K', 2048 -> '2M'; None (the top-level shmem_enabled) stays None."""
    if size_kb is None:
        return None
    return f"{size_kb // 1024}M" if size_kb % 1024 == 0 else f"{size_kb}K"


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
    """The multi-size THP knobs an arm's trials run under (runner.arm_thp_knobs), each with
    the host's mode now and whether the arm leaves it unchanged; [] on a kernel without."""
    if not (host.get("mthp") or {}).get("supported"):
        return []
    now = {(k["knob"], k["size"]): k["mode"] for k in host_mthp(host)}
    anon, shmem = arm_thp_knobs(arm, host)
    pairs = [("enabled", _size(kb), m) for kb, m in anon.items()] + \
        [("shmem_enabled", _size(kb), m) for kb, m in shmem.items()]
    return [{"knob": knob, "size": size, "mode": mode, "host": now.get((knob, size)),
             "unchanged": now.get((knob, size)) == mode} for knob, size, mode in pairs]


def plan(exp: Experiment, workload: Workload, per_arm: dict[str, Workload],
         store_path: Path, budget_s: float | None) -> dict[str, Any]:
    """Everything the dry run reports, as one JSON-able dict; validates every guest cell."""
    from hugelab.runner import _workload_bytes
    host = inspect_host()
    skipped = unsupported_arms(exp, host)
    hugetlbfs = {s: state_dir() / f"hugetlbfs-{s}" for s in ("2M", "1G")}
    for a in exp.arms:
        if a.vm is not None:
            vm_spec(a, _workload_bytes(per_arm.get(a.name, workload), a), hugetlbfs)
    runnable = [a for a in exp.arms if a.name not in skipped]
    thp_now = host["thp"].get("enabled")
    modes = sorted({(_thp(a) or thp_now or "-", a.thp_defrag or host["thp"].get("defrag") or "-")
                    for a in runnable})
    pools = pool_plan(exp, workload, runnable, per_arm)
    mounts = sorted({a.vm.page_size for a in runnable
                     if a.vm and a.vm.backing == "file" and a.vm.page_size})
    meas, accel = measured(store_path, exp)
    exp_run = replace(exp, arms=tuple(runnable))  # skipped cells cost nothing
    est = estimate(exp_run, meas, accel or "tcg")
    out: dict[str, Any] = {
        "experiment": exp.name, "blocks": exp.blocks, "repeats": exp.repeats,
        "design": exp.design,
        "cells": [{"name": a.name, "layer": a.layer, "levels": dict(a.levels),
                   "host_thp": _thp(a) or "(unchanged)", "guests": _guests(a),
                   "trial_s": est.per_arm.get(a.name), "basis": est.basis.get(a.name, "skipped"),
                   "skipped": skipped.get(a.name),
                   "mthp_knobs": [] if a.name in skipped else mthp_knobs(a, host)}
                  for a in exp.arms],
        "factors": [{"name": f.name, "levels": list(f.levels), "scenario": f.scenario}
                    for f in exp.factors],
        "trials_per_block": len(runnable), "trials": len(runnable) * exp.blocks * exp.repeats,
        "host_changes": {"thp_modes": [{"enabled": e, "defrag": d} for e, d in modes],
                         "pools": [{"size": s, "node": n, "pages": p}
                                   for (s, n), p in sorted(pools.items(), key=str)],
                         "hugetlbfs_mounts": mounts},
        "host_mthp": host_mthp(host),
        "guests_per_block": sum(a.vm.vms for a in runnable if a.vm),
        "boot_s": est.boot_s, "boot_basis": est.boot_basis,
        "estimated_s": est.seconds, "budget_s": budget_s, "warnings": [],
    }
    if "unknown" in est.basis.values():
        out["warnings"].append("the workload does not say how long it runs (no timeout_s): its "
                               "trials count as 0 s; run one block first (--blocks 1) to measure")
    for a in runnable:  # what a user's own config sets that the arm overrides (postgres)
        if callable(said := getattr(per_arm.get(a.name, workload), "settings_warnings", None)):
            out["warnings"] += [f"arm '{a.name}': {w}" for w in said(a.backing)]
    out["pool_holders"] = host.get("pool_holders") or []
    out["warnings"] += pool_plan_warnings(host, pools)
    if budget_s is not None and est.seconds > budget_s:
        out["warnings"].append(_over_budget(exp_run, meas, accel or "tcg", est.seconds,
                                            budget_s))
    return out


def pool_plan_warnings(host: dict[str, Any], pools: dict[tuple[str, int | None], int]
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
    if extra_kb > avail:
        out.append(f"the run's pools need {extra_kb / 1048576:.1f} GiB more memory than is free "
                   f"in them now, and only {avail / 1048576:.1f} GiB is available: arms whose "
                   "pool cannot grow will be skipped")
    return out


def _over_budget(exp: Experiment, meas: Measured, accel: str, seconds: float,
                 budget_s: float) -> str:
    text = f"estimated {human(seconds)} is over the budget of {human(budget_s)}"
    options = cuts(exp, meas, accel)  # only cuts that leave something to compare
    fits = [(name, s) for name, s in options if s <= budget_s]
    if fits:  # the factor whose cut keeps the most of the design while fitting
        scen = {f.name for f in exp.factors if f.scenario}  # on a tie: a workload parameter
        name, s = max(fits, key=lambda x: (x[1], x[0] in scen))
        text += f": cut factor '{name}' to one level ({human(s)})"
    elif options:
        name, s = options[0]
        text += f": cutting factor '{name}' to one level saves the most and still leaves " \
            f"{human(s)}"
    blocks = int(budget_s // (seconds / exp.blocks)) if seconds else exp.blocks
    if MIN_UNITS <= blocks < exp.blocks:
        text += f"; or run {blocks} blocks instead of {exp.blocks}"
    elif blocks < MIN_UNITS:
        text += f"; fewer blocks will not do: a verdict needs at least {MIN_UNITS}"
    return text


def _rows(cells: list[dict[str, Any]]) -> tuple[list[list[str]], list[str]]:
    """One row per arm combination (a cell less its scenario), and the scenarios."""
    rows: dict[str, list[str]] = {}
    secs: dict[str, list[float]] = {}
    scenarios: list[str] = []
    for c in cells:
        arm, _, scen = c["name"].partition(" [")
        if scen and scen[:-1] not in scenarios:
            scenarios.append(scen[:-1])
        skipped = f" (skipped: {c['skipped']})" if c["skipped"] else ""
        rows.setdefault(arm, [arm + skipped, c["host_thp"], c["guests"], ""])
        if c["trial_s"] is not None:
            secs.setdefault(arm, []).append(c["trial_s"])
    for arm, row in rows.items():
        v = secs.get(arm, [])
        row[3] = "?" if not v else f"{min(v):.1f}" if min(v) == max(v) else \
            f"{min(v):.1f}-{max(v):.1f}"
    return list(rows.values()), scenarios


def knobs_text(knobs: list[dict[str, Any]]) -> str:
    """'enabled: 64K madvise, 2M never, 16K 32K never (unchanged); shmem_enabled: as the
    host has it (unchanged)': the knobs an arm sets, changed ones first."""
    parts = []
    for knob in ("enabled", "shmem_enabled"):
        mine = [k for k in knobs if k["knob"] == knob]
        if mine and all(k["unchanged"] for k in mine):
            parts.append(f"{knob}: as the host has it (unchanged)")
        elif mine:
            groups: dict[tuple[str, bool], list[str]] = {}
            for k in sorted(mine, key=lambda k: bool(k["unchanged"])):  # stable: changed first
                groups.setdefault((k["mode"], k["unchanged"]), []).append(k["size"] or "top-level")
            parts.append(f"{knob}: " + ", ".join(
                f"{' '.join(sizes)} {mode}" + (" (unchanged)" if same else "")
                for (mode, same), sizes in groups.items()))
    return "; ".join(parts)


def mthp_lines(cells: list[dict[str, Any]]) -> list[str]:
    """The "host mTHP" section: per arm (a cell less its scenario) the knobs it sets; the
    arms that leave every knob as the host has it on one line. [] without mTHP knobs."""
    arms: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        if c["mthp_knobs"]:
            arms.setdefault(c["name"].partition(" [")[0], c["mthp_knobs"])
    if not arms:
        return []
    same = [a for a, knobs in arms.items() if all(k["unchanged"] for k in knobs)]
    lines = [f"  {a}: {knobs_text(knobs)}" for a, knobs in arms.items() if a not in same]
    if same:
        lines.append(f"  {', '.join(same)}: every knob as the host has it (unchanged)")
    return ["host mTHP (per-size THP modes each arm's trials run under; journaled, restored "
            "at the end):", *lines]


def print_plan(p: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(p, indent=2))
        return
    con = Console()
    rows, scenarios = _rows(p["cells"])
    reps = f" x {p['repeats']} repeats" if p.get("repeats", 1) > 1 else ""
    t = Table(title=escape(f"{p['experiment']}: {len(p['cells'])} cell(s), {p['blocks']} "
                           f"block(s){reps}, design {p['design']} (dry run: nothing changes)"),
              box=box.SIMPLE_HEAD)
    for col in ("cell", "host THP", "guests", "s/trial"):
        t.add_column(col, overflow="fold", justify="right" if col == "s/trial" else "left",
                     no_wrap=col != "cell")
    for row in rows:
        t.add_row(*(Text(cell) for cell in row))
    con.print(t)
    if scenarios:
        con.print(f"scenarios (every cell above runs in each): {', '.join(scenarios)}",
                  highlight=False, markup=False)
    h = p["host_changes"]
    modes = ", ".join(f"{m['enabled']}/{m['defrag']}" for m in h["thp_modes"]) or "none"
    pools = ", ".join(f"{x['pages']} x {x['size']}" + (f" on node {x['node']}" if x["node"]
                      is not None else "") for x in h["pools"]) or "none"
    measured = any(c["basis"] == "measured" for c in p["cells"])
    con.print(f"trials: {p['trials_per_block']} per block, {p['trials']} in all; guests booted "
              f"per block: {p['guests_per_block']} (boot {p['boot_s']:.1f} s, {p['boot_basis']})",
              highlight=False, markup=False)
    con.print(f"host changes (journaled, restored at the end): THP enabled/defrag {modes}; "
              f"pools {pools}; hugetlbfs mounts {', '.join(h['hugetlbfs_mounts']) or 'none'}",
              highlight=False)
    for text in mthp_lines(p["cells"]):
        con.print(text, highlight=False, markup=False)
    line = f"estimated duration: {human(p['estimated_s'])}"
    line += " (trial times measured in this store's earlier run)" if measured else \
        " (configured workload time + 0.5 s per trial + boot)"
    if p["budget_s"] is not None:
        line += f"; budget {human(p['budget_s'])}"
    con.print(line, highlight=False)
    for w in p["warnings"]:
        con.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)


def check_budget_args(args: argparse.Namespace) -> None:
    if getattr(args, "budget", None) is not None and not args.dry_run:
        raise UsageError("--budget goes with --dry-run")
