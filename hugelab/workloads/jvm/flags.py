"""The java command line of a jvm trial, from the arm's JVM settings (pure): the heap, the
collector, the large-page switches and the JVM's own page-size report on stderr, then the
program's flags, the user's options and the benchmark; with what those switches give the heap
(its backing) and take from a hugetlb pool.

    java -Xms<heap> -Xmx<heap> -XX:+Use<gc>GC [-XX:+AlwaysPreTouch] [-XX:+UseLargePages
    [-XX:LargePageSizeInBytes=<S>]] [-XX:+UseTransparentHugePages]
    -Xlog:pagesize,gc+init:stderr <program flags> <options> <benchmark>
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hugelab.workloads.toolrun import format_size

SUNFLOW_JARS = ("/usr/share/java/sunflow.jar", "/usr/share/java/sunflowGUI.jar")
SUNFLOW_MAIN = ("SunflowGUI", "-nogui", "-rtbench")
SUNFLOW = ("-cp", ":".join(SUNFLOW_JARS), *SUNFLOW_MAIN)  # the default benchmark's argv
GCS = {"G1": "-XX:+UseG1GC", "Parallel": "-XX:+UseParallelGC", "Serial": "-XX:+UseSerialGC",
       "Shenandoah": "-XX:+UseShenandoahGC"}
CODE_CACHE = 240 << 20  # ReservedCodeCacheSize's default with tiered compilation (JDK 17)
LOG = "-Xlog:pagesize,gc+init:stderr"
DEFAULT_LARGE_PAGE = 2 << 20  # the JVM's large page without LargePageSizeInBytes (x86-64)


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def java_argv(java: str, settings: Mapping[str, Any], heap: int, page_size: int | None,
              program_flags: Sequence[str], benchmark: Sequence[str]) -> list[str]:
    """The java command line (pure): `settings` as JvmBenchmark.settings gives them, `heap`
    and `page_size` (LargePageSizeInBytes, None: the JVM's default) in bytes."""
    size = format_size(heap)
    argv = [java, f"-Xms{size}", f"-Xmx{size}", GCS[settings["gc"]]]
    if settings["AlwaysPreTouch"]:
        argv.append("-XX:+AlwaysPreTouch")
    if settings["UseLargePages"]:
        argv.append("-XX:+UseLargePages")
        if page_size is not None:
            argv.append(f"-XX:LargePageSizeInBytes={format_size(page_size)}")
    if settings["UseTransparentHugePages"]:
        argv.append("-XX:+UseTransparentHugePages")
    return [*argv, LOG, *program_flags, *settings["options"], *benchmark]


def backing_of(settings: Mapping[str, Any], page_size: int | None) -> str:
    """The arm backing these switches give the heap: hugetlb-<S>, thp or 4k (pure)."""
    if settings["UseLargePages"]:
        return f"hugetlb-{format_size(page_size or DEFAULT_LARGE_PAGE)}"
    return "thp" if settings["UseTransparentHugePages"] else "4k"


def pool_bytes(heap: int, page: int) -> int:
    """Pool bytes one JVM takes with pages of `page` bytes (pure): the heap rounded to whole
    pages; with 2 MiB pages also the code cache and G1's two marking bitmaps, which the JVM
    maps from the same pool (measured: a 256 MiB heap takes 252 pages)."""
    need = _round_up(heap, page)
    if page <= 2 << 20:
        need += _round_up(CODE_CACHE, page) + 2 * _round_up(max(heap // 64, page), page)
    return need
