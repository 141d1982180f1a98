"""memcached's own large-page switch judged from its server's own mappings, read just before it
stopped (the kind's judge, Kind.judge)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hugelab.checks import Check
from hugelab.workloads.serverjudge import check_madvised, judge_switch


def check_memcached(large_pages: bool, memory_mb: int, server: dict[str, Any]) -> Check:
    """memcached's own switch from its mappings, read just before it stopped: with -L it
    madvised (MADV_HUGEPAGE) a chunk of at least its -m and that chunk is in THP; without -L
    it madvised nothing."""
    return check_madvised("memcached -L" if large_pages else "memcached without -L",
                          large_pages, server, least_kb=memory_mb * 1024,
                          least=f"its -m {memory_mb} MiB", of_thp=" for THP",
                          why_none=" (host THP never, or no huge page could be had)")


def judge(evidence: Mapping[str, Any]) -> Check | None:
    """The app layer from what a trial recorded: memcached's settings (evidence["memcached"])
    against its server's own mappings, read just before it stopped (evidence["server"])."""
    return judge_switch(evidence, "memcached", "memcached's mappings were not read (its server "
                        "ended first, or runs where hugelab cannot see)", lambda mc, server:
                        check_memcached(bool(mc.get("large_pages")),
                                        int(mc.get("memory_mb", 0)), server))
