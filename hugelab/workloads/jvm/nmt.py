"""What the many-threads program (`threads = N`, jvm/threads.py) reports, read (pure): the JVM's
own Native Memory Tracking summary (totals, Java Heap and Thread with its stacks, in KiB) and
its /proc/self/smaps_rollup taken at the same moment, as the trial's metrics and its
evidence["app_costs"]."""

from __future__ import annotations

import re

from hugelab.errors import WorkloadError
from hugelab.workloads.toolrun import tail

_KB = r"(\d+)KB"


def parse_nmt(text: str) -> dict[str, float]:
    """The NMT summary's totals and its Thread category, in KiB (JDK 17's default scale)."""
    want = {"nmt_total": rf"Total: reserved={_KB}, committed={_KB}",
            "nmt_heap": rf"-\s+Java Heap \(reserved={_KB}, committed={_KB}\)",
            "nmt_thread": rf"-\s+Thread \(reserved={_KB}, committed={_KB}\)",
            "nmt_thread_stack": rf"\(stack: reserved={_KB}, committed={_KB}\)"}
    out: dict[str, float] = {}
    for name, pattern in want.items():
        if m := re.search(pattern, text):
            out[f"{name}_reserved_kb"] = float(m.group(1))
            out[f"{name}_committed_kb"] = float(m.group(2))
    if m := re.search(r"\(thread #(\d+)\)", text):
        out["nmt_thread_count"] = float(m.group(1))
    return out


def parse_rollup(text: str) -> dict[str, float]:
    """smaps_rollup's Rss, Pss, Anonymous and AnonHugePages (KiB) of the JVM."""
    names = {"Rss": "jvm_rss_kb", "Pss": "jvm_pss_kb", "Anonymous": "jvm_anon_kb",
             "AnonHugePages": "jvm_anon_huge_kb"}
    out: dict[str, float] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in names and (m := re.match(r"\s*(\d+) kB", rest)):
            out[names[key]] = float(m.group(1))
    return out


def parse_output(stdout: str) -> tuple[dict[str, float], dict[str, float]]:
    """(metrics, app_costs) of one run of the program (pure): WorkloadError when it printed
    no NMT summary (NMT off) or no smaps_rollup."""
    started = re.search(r"started (\d+) threads in ([0-9.]+) ms", stdout)
    rollup = re.search(r"--- smaps_rollup\n(.*?)\n--- native memory\n(.*?)\n--- end", stdout,
                       re.DOTALL)
    if started is None or rollup is None:
        raise WorkloadError("java: HugelabThreads printed no report"
                            f"\n  {tail(stdout, 5) or '(no output)'}")
    mem = parse_rollup(rollup.group(1))
    nmt = parse_nmt(rollup.group(2))
    if "nmt_thread_committed_kb" not in nmt or "nmt_total_committed_kb" not in nmt:
        raise WorkloadError("java: no Native Memory Tracking summary in HugelabThreads' report "
                            f"(-XX:NativeMemoryTracking=summary off?)\n  "
                            f"{tail(rollup.group(2), 3) or '(empty)'}")
    if "jvm_rss_kb" not in mem:
        raise WorkloadError("java: no Rss in HugelabThreads' smaps_rollup")
    costs = {**nmt, **mem, "start_ms": float(started.group(2))}
    metrics = {"rss_mib": mem["jvm_rss_kb"] / 1024, "start_ms": float(started.group(2)),
               "threads": float(started.group(1)),
               "thread_committed_mib": nmt["nmt_thread_committed_kb"] / 1024,
               "anon_huge_mib": mem.get("jvm_anon_huge_kb", 0.0) / 1024}
    return metrics, costs
