"""A process's identity over time: its pid and its start time, so a reused pid, or a record
written before a reboot, is never taken for the process it names."""

from __future__ import annotations

from pathlib import Path


def starttime(pid: int) -> int | None:
    """Start time of `pid` in clock ticks (field 22 of /proc/PID/stat), None if gone or zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(pid: int, start: int | None) -> bool:
    """`pid` is still the process that started at `start`."""
    return start is not None and starttime(pid) == start
