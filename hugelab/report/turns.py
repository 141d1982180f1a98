"""Servers that took turns on shared CPUs, said beside a request-interleaved run's verdicts.

A request-level trial starts every arm's server at once and pins them to the CPUs the
client leaves (hugelab.workloads.servercpu.pinning), each to its own where there are as many
as servers. Where there are more servers than those CPUs they take turns, and what one server
gains from huge pages then includes what its co-residents cost it. Measured on a 2-core VM (docs/benchmarks.md, "Request-level at 1 GB:
how many servers share the CPU"): PostgreSQL with 1 GB of shared buffers a server read on vs
off +16.7% and +17.9% with two servers, +23.6% with three, +26.9% with four, where one
server at a time with its client apart read +13.5%; with 128 MB the designs agreed. So the
report says, for such a run, how many servers shared how many CPUs, and what that can do.
"""

from __future__ import annotations

from hugelab.report.runload import RunData

SECTION = "docs/applications.md, \"Servers taking turns\""


def turns_note(data: RunData) -> str | None:
    """The note for a request-interleaved run whose servers outnumbered their CPUs (the most
    servers of any trial, on the CPUs of that trial's pinning), or None."""
    worst: tuple[int, list[int]] | None = None
    for inter in data.request_level():
        servers = int(inter.get("servers") or 0)
        cpus = [int(c) for c in ((inter.get("pinning") or {}).get("servers") or [])]
        if cpus and servers > len(cpus) and (worst is None or servers > worst[0]):
            worst = (servers, cpus)
    if worst is None:
        return None
    servers, cpus = worst
    where = f"CPU {cpus[0]}" if len(cpus) == 1 else f"CPUs {','.join(map(str, cpus))}"
    return (f"{servers} servers took turns on {where}: at large sizes (measured at 1 GB a "
            "server) that favours huge pages beyond what one server alone gains, more so the "
            "more servers; the direction holds, the size is for servers sharing CPUs "
            f"({SECTION})")
