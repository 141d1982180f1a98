"""The effect against page size: which page (folio) size each arm measures, one point per
comparison against a 4 KiB baseline, and the figure (log2 x, a colour per scenario, a marker
per kind of page)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from hugelab.experiment.backings import mthp_size_kb
from hugelab.report.analysis import Report
from hugelab.report.figure import label, png
from hugelab.units import page_label

PAGE_KB = {"4k": 4, "thp": 2048, "thp-collapse": 2048, "shmem-thp": 2048, "hugetlb-2M": 2048,
           "hugetlb-1G": 1048576}
KIND_MARKER = {"4 KiB / mTHP": "o", "THP": "^", "hugetlb": "s", "other": "D"}
KIND_SHIFT = {"4 KiB / mTHP": 1.0, "THP": 2 ** -0.12, "hugetlb": 2 ** 0.12, "other": 2 ** 0.24}


def arm_page(arm: dict[str, Any]) -> tuple[int, str] | None:
    """(page size in KiB, kind) an arm measures, from its settings; None when it has none. A
    native arm: its backing (mthp-64K: 64 KiB). A guest arm: how the host backs guest RAM (vm
    mthp, vm page_size, or anon under the arm's thp: never 4 KiB, else 2 MiB THP)."""
    vm = arm.get("vm")
    backing = str(arm.get("backing"))
    if not vm:
        kb = mthp_size_kb(backing) or PAGE_KB.get(backing)
        kind = ("4 KiB / mTHP" if backing == "4k" or mthp_size_kb(backing) else
                "hugetlb" if backing.startswith("hugetlb-") else
                "THP" if backing == "thp" else "other")
        return (kb, kind) if kb else None
    if vm.get("mthp"):
        kb = mthp_size_kb(f"mthp-{vm['mthp']}")
        return (kb, "4 KiB / mTHP") if kb else None
    if vm.get("page_size"):
        return PAGE_KB[f"hugetlb-{vm['page_size']}"], "hugetlb"
    if vm.get("backing") == "anon" and arm.get("thp") in ("never", "always", "madvise"):
        return (4, "4 KiB / mTHP") if arm["thp"] == "never" else (2048, "THP")
    return None


@dataclass(frozen=True)
class PagePoint:
    """One comparison of an arm with a page size against a 4 KiB baseline."""

    kb: int
    kind: str  # a KIND_MARKER key
    group: str  # the scenario, or the guest side's backing
    arm: str
    effect_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None


def page_size_points(report: Report) -> list[PagePoint]:
    """One point per comparison of an arm with a page size against a 4 KiB baseline: x the
    candidate's page size, y its effect with interval, `group` its scenario (or the guest
    side's backing, when guest arms differ in it). [] when fewer than two sizes compare."""
    d = report.data
    arms = {a["name"]: a for a in d.run.get("experiment", {}).get("arms", [])}
    pages = {n: arm_page(a) for n, a in arms.items()}
    guests = {str(a.get("backing")) for a in arms.values() if a.get("vm")}
    out = []
    for c in report.result.comparisons:
        cand = d.series_arm[d.index(c.candidate)]
        base = d.series_arm[d.index(c.baseline)]
        page, base_page = pages.get(cand), pages.get(base)
        if page is None or base_page is None or base_page[0] != 4:
            continue
        arm = arms[cand]
        scen = ", ".join(f"{k}={v}" for k, v in arm.get("workload") or [])
        group = scen or (f"guest {arm['backing']}" if len(guests) > 1 else "")
        out.append(PagePoint(page[0], page[1], group, cand, c.effect_pct, c.ci_low_pct,
                             c.ci_high_pct))
    return out if len({p.kb for p in out} | {4}) > 2 else []


def page_sizes(points: list[PagePoint]) -> bytes:
    """Effect vs the 4 KiB baseline against page size (log2 x), one colour per scenario, one
    marker per kind of page (4 KiB and mTHP joined by a line, THP, hugetlb), with intervals;
    a point without an interval (too few blocks) is drawn without bars."""
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    groups = list(dict.fromkeys(p.group for p in points))
    colors = matplotlib.colormaps["tab10"]
    for gi, group in enumerate(groups):
        color = colors(gi % 10)
        shift = 2 ** (0.06 * (gi - (len(groups) - 1) / 2))  # keep overlapping bars apart
        mine = [p for p in points if p.group == group and p.effect_pct is not None]
        line = sorted(((4, 0.0), *((p.kb, p.effect_pct or 0.0) for p in mine
                                   if p.kind == "4 KiB / mTHP")))
        ax.plot([x * shift for x, _ in line], [y for _, y in line], "-", color=color,
                linewidth=1, label=label(group) if group else None)
        for p in mine:
            e = float(p.effect_pct or 0.0)
            lo, hi = p.ci_low_pct, p.ci_high_pct
            yerr = ([[e - lo], [hi - e]] if lo is not None and hi is not None else None)
            ax.errorbar([p.kb * shift * KIND_SHIFT[p.kind]], [e], yerr=yerr,
                        fmt=KIND_MARKER[p.kind], color=color, capsize=3, markersize=5)
    for kind, marker in KIND_MARKER.items():
        if any(p.kind == kind for p in points):
            ax.plot([], [], marker, color="grey", label=kind)
    ax.set_xscale("log", base=2)
    ticks = sorted({4, *(p.kb for p in points)})
    ax.set_xticks(ticks, [page_label(t) for t in ticks], fontsize=7)
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set_xlabel("page (folio) size, log scale")
    ax.set_ylabel("effect vs 4 KiB pages, % (with its interval)")
    ax.legend(fontsize=7)
    ax.set_title("Effect against page size")
    return png(fig)
