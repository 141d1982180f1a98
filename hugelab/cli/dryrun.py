"""`hugelab run --dry-run`: prints the plan of hugelab.planning.dryrun (the cells, what each
changes on the host, the guests it boots, and what the whole run will cost)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hugelab.cli.output import stacked
from hugelab.errors import UsageError
from hugelab.planning.cost import human
from hugelab.units import amount


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


def tunables_lines(p: dict[str, Any]) -> list[str]:
    """The THP tunables (max_ptes_none, shrink_underused) each arm sets, where it changes one,
    and the memory cgroups of arms with a memory_limit. [] when no arm sets either."""
    lines = []
    for c in p["cells"]:
        changed = [k for k in c.get("thp_tunables") or [] if not k["unchanged"]]
        if changed:
            lines.append(f"  {c['name']}: " + ", ".join(
                f"{k['knob']} {_value(k['value'])} (now {_value(k['host'])})" for k in changed))
    out = ["THP tunables (journaled, restored at the end; other arms run under the host's "
           "values):", *lines] if lines else []
    cg = p["host_changes"].get("memory_cgroups")
    if cg:
        where = f"cgroup v{cg['version']}, {cg['limit_file']} under {cg['root']}" \
            if cg["version"] else "no memory cgroup controller on this host"
        out.append(f"memory cgroups ({where}; one per trial, removed after it): " + ", ".join(
            f"{arm} {amount(limit / 1024)}" for arm, limit in cg["limits"].items()))
    return out


def _value(v: Any) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def build_lines(builds: list[dict[str, Any]]) -> list[str]:
    """What the run builds before its first trial (the dry run built none of it)."""
    out = []
    for b in builds:
        if b["cached"]:
            out.append(f"cached, reused by the run: {b['what']}")
            continue
        size = f"about {amount(b['bytes'] / 1024)}" if b["bytes"] is not None else \
            "size unknown"  # a 27 KB dump read "about 0 MB"
        secs = f"about {human(b['seconds'])}" if b["seconds"] is not None else "time unknown"
        first = "the run builds first" if b["cached"] is False else "the run builds first " \
            "unless cached"
        out.append(f"{first} (not built by this dry run): {b['what']}: {size}, {secs}"
                   + (f"; {b['note']}" if b["note"] else ""))
    return out


def guest_build_lines(builds: list[dict[str, Any]]) -> list[str]:
    """What the domain arms build in their guests: a layer once, then every trial's part."""
    out = []
    for g in builds:
        if (layer := g.get("layer")):
            out.append(f"once per run, unless cached: a layer over {layer['domain']}'s disks, "
                       f"built in a copy of it (not built by this dry run): {layer['what']}: "
                       f"up to about {human(layer['seconds'])} and a boot under "
                       f"{g['accel'].upper()}, counted below")
        out.append(f"every trial builds in its domain's guest (not built by this dry run): "
                   f"{g['what']}: about {human(g['seconds'])} under {g['accel'].upper()}, "
                   f"counted in s/trial")
    return out


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
    names = stacked([row[0] for row in rows], con.width, 50)  # host THP, guests, s/trial
    for row in rows:
        t.add_row(Text(names[row[0]]), *(Text(cell) for cell in row[1:]))
    con.print(t)
    if scenarios:
        con.print(f"scenarios (every cell above runs in each): {', '.join(scenarios)}",
                  highlight=False, markup=False)
    h = p["host_changes"]
    modes = ", ".join(f"{m['enabled']}/{m['defrag']}" for m in h["thp_modes"]) or "none"
    pools = ", ".join(f"{x['pages']} x {x['size']}" + (f" on node {x['node']}" if x["node"]
                      is not None else "") for x in h["pools"]) or "none"
    measured = any(c["basis"] == "measured" for c in p["cells"])
    guests = f"; guests booted per block: {p['guests_per_block']} (boot {p['boot_s']:.1f} s, " \
        f"{p['boot_basis']})" if p["guests_per_block"] else ""  # none: no boot to estimate
    con.print(f"trials: {p['trials_per_block']} per block, {p['trials']} in all{guests}",
              highlight=False, markup=False)
    con.print(f"host changes (journaled, restored at the end): THP enabled/defrag {modes}; "
              f"pools {pools}; hugetlbfs mounts {', '.join(h['hugetlbfs_mounts']) or 'none'}",
              highlight=False)
    for text in mthp_lines(p["cells"]) + tunables_lines(p):
        con.print(text, highlight=False, markup=False)
    for text in build_lines(p.get("builds") or []):
        con.print(text, highlight=False, markup=False)
    for text in guest_build_lines(p.get("guest_builds") or []):
        con.print(text, highlight=False, markup=False)
    if p.get("fragment_s"):
        con.print(f"every block makes its aged host's states (host_state = \"fragmented\"): "
                  f"up to about {human(p['fragment_s'])} a block, faulting in the share of "
                  "today's free memory each degree asks for (once for consecutive blocks that "
                  "end and start in one state); counted below", highlight=False, markup=False)
    for text in duration_lines(p, measured):
        con.print(text, highlight=False, markup=False)
    if p.get("host_busy"):
        con.print(busy_line(p["host_busy"]), highlight=False, markup=False)
    for w in p["warnings"]:
        con.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)


def duration_lines(p: dict[str, Any], measured: bool) -> list[str]:
    """The estimated duration, the budget, and with --until-verdict what the budget holds."""
    line = f"estimated duration: {human(p['estimated_s'])}"
    line += " (trial times measured in this store's earlier run)" if measured else \
        " (configured or estimated workload time + 0.5 s per trial + boot + builds)"
    if p["budget_s"] is None:
        return [line]
    line += f"; budget {human(p['budget_s'])}"
    if not p.get("until_verdict"):
        return [line]
    return [line, f"with --until-verdict: about {p['blocks']} blocks fit the budget by this "
                  "estimate; the run times its blocks, plans its looks from them and ends "
                  "within the budget"]


def check_budget_args(args: argparse.Namespace) -> None:
    if getattr(args, "budget", None) is not None and not args.dry_run and \
            not getattr(args, "until_verdict", False):
        raise UsageError("--budget goes with --until-verdict (a run that ends within it) or "
                         "--dry-run (a warning past the estimate)")


def busy_line(busy: dict[str, Any]) -> str:
    """How far to trust the estimate on a busy host: measured here, trials in guests under
    40-75% CPU pressure took 1.5 to 2 times a quiet host's (docs/experiments.md)."""
    now = [f"CPU pressure {busy['cpu_pressure_avg60_pct']:.0f}% of the last minute"
           if "cpu_pressure_avg60_pct" in busy else "",
           f"load average {busy['loadavg_1m']:.1f} on {busy['cpus']} CPUs"
           if "loadavg_1m" in busy else ""]
    return (f"the host is busy now ({'; '.join(x for x in now if x)}): the estimate is a quiet "
            f"host's, and a busy one can take up to twice as long")
