"""What a JVM printed, read (pure): its own report about its pages (`-Xlog:pagesize`: the
heap's page size and the warnings it prints when it falls back; `-Xlog:gc+init`: `Large Page
Support: ...`), its version, and the benchmark's metric (Sunflow's "Average FPS", or the
user's regex with one group)."""

from __future__ import annotations

import re
from typing import Any

from hugelab.errors import WorkloadError
from hugelab.units import page_kb
from hugelab.workloads.toolrun import tail

SUNFLOW_REGEX = r"Average FPS:\s*([0-9.]+)"


def parse_jvm_report(text: str) -> dict[str, Any]:
    """What the JVM said about its pages (pure): the heap's page size (KiB), `Large Page
    Support`, the usable sizes, and its page-size warnings (fallbacks, failed reservations)."""
    out: dict[str, Any] = {"heap_page_kb": None, "large_page_support": None,
                           "usable_page_sizes": None, "warnings": []}
    for line in text.splitlines():
        if m := re.search(r"\]\s*Heap:.*\bpage_size=(\d+)([KMG])", line):
            out["heap_page_kb"] = page_kb(m.group(1) + m.group(2))
        elif m := re.search(r"Large Page Support:\s*(.+?)\s*$", line):
            out["large_page_support"] = m.group(1)
        elif m := re.search(r"Usable page sizes: ([^.]+)\.", line):
            out["usable_page_sizes"] = m.group(1)
        if ("[warning][pagesize]" in line.replace(" ", "") or
                "Failed to reserve and commit memory" in line or "UseLargePages disabled" in line):
            msg = re.sub(r"^\[[^]]*\](\[[^]]*\])*\s*", "", line).strip()
            if msg not in out["warnings"]:
                out["warnings"].append(msg)
    return out


def jvm_version(stderr: str) -> str | None:
    """The version the JVM's gc+init log names (`Version: 17.0.x+y-...`), or None."""
    version = re.search(r"Version: (\S+)", stderr)
    return version.group(1) if version else None


def benchmark_metrics(text: str, regex: str, name: str, wall_s: float) -> dict[str, float]:
    """The benchmark's metric `name` from its output (the group of `regex`), the run's
    `wall_s`, and Sunflow's `bench_s` where it printed its total time (pure); WorkloadError
    when there is no metric."""
    m = re.search(regex, text)
    if m is None:
        raise WorkloadError(f"java: no metric in its output ({regex!r})"
                            f"\n  {tail(text, 5) or '(no output)'}")
    try:
        value = float(m.group(1))
    except ValueError as exc:
        raise WorkloadError(f"java: the metric matched {m.group(1)!r}, not a number") from exc
    metrics = {name: value, "wall_s": wall_s}
    if t := re.search(r"Total time:\s*(\d+):(\d+):([0-9.]+)", text):
        metrics["bench_s"] = int(t[1]) * 3600 + int(t[2]) * 60 + float(t[3])
    return metrics
