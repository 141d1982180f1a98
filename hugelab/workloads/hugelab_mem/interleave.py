"""Whether one hugelab-mem process can hold every arm's buffer side by side (design
"interleaved"): its workload, threads, pools and backings, and a duration that fits a round of
windows. Pure."""

from __future__ import annotations

from typing import Any

INTERLEAVE_BACKINGS = ("4k", "thp", "thp-collapse", "hugetlb-2M", "hugetlb-1G")


def interleave_problem(arms: tuple[Any, ...], table: dict[str, Any]) -> tuple[str, str] | None:
    """(why, hint) when one hugelab-mem process cannot hold every arm's buffer side by side:
    chase or random, one thread, one set of pools, backings without knobs of their own, and a
    duration that fits a round of windows."""
    if table.get("workload", "chase") not in ("chase", "random") or table.get("threads", 1) != 1:
        return ("it interleaves hugelab-mem's chase or random workload, one thread",
                "workload = \"chase\" or \"random\", threads = 1; other workloads: "
                "design = \"paired\"")
    if table.get("touch_fraction", 1) != 1:
        return ("touch_fraction (a sparse buffer) is measured one buffer to a process",
                "design = \"paired\"")
    if len({a.pools for a in arms}) > 1:
        return ("one process runs under one host setting, so the arms must share thp, "
                "thp_defrag and pools", "use design = \"paired\" to compare pools")
    if bad := [a.backing for a in arms if a.backing not in INTERLEAVE_BACKINGS]:
        return (f"backing {bad[0]} needs host knobs of its own (set per arm), so it cannot "
                "share a process with the others",
                f"interleave {', '.join(INTERLEAVE_BACKINGS)}; use design = \"paired\" for the "
                "rest")
    return _too_short(table, len(arms))


def _too_short(table: dict[str, Any], n_arms: int) -> tuple[str, str] | None:
    """(why, hint) when one round of windows (a window per arm and its mirror) does not fit in
    the duration; None when it fits or the values are not numbers (the dataclass says so)."""
    duration = table.get("duration", table.get("duration_s", 1.0))
    window = table.get("window_ms", 20.0)
    warmup = table.get("warmup_ms")
    if warmup is None and isinstance(window, int | float):
        warmup = window / 4.0  # the tool's default
    if not all(isinstance(v, int | float) and not isinstance(v, bool)
               for v in (duration, window, warmup)):
        return None
    need = 2 * n_arms * (window + warmup) / 1000.0
    if duration >= need:
        return None
    return (f"duration {duration:g} s is shorter than one round of windows ({n_arms} arms x 2 "
            f"x ({window:g} ms + {warmup:g} ms warm-up) = {need:g} s)",
            f"raise duration to at least {need:g} (a few seconds gives dozens of rounds), or "
            "lower window_ms")
