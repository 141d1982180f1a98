"""A process's identity over time, for records that outlive the process they name.

A pid names a process only while it lives: once it ends, the kernel hands the number to the
next process that needs one, and after a reboot every number starts again. So a record that
must be judged later - an owner record in the state directory, a QEMU's record, a trial's
sessions, a PostgreSQL cluster's owner file, an SSH connection's directory - keeps three
things, and a process *is* the one a record names when all three agree now:

- its pid;
- its start time, in clock ticks since boot (field 22 of /proc/PID/stat), which a process
  that got the same pid later does not share;
- the boot id (/proc/sys/kernel/random/boot_id), since start times count from each boot: a
  record from another boot names no live process, whatever its numbers.

A zombie keeps its identity (`starttime` answers for it) but is not `alive`: it runs nothing
and holds nothing. A record without a boot id (written by an older hugelab) is judged by its
pid and start time alone.

Standard library only, and no hugelab imports: every layer that writes such records uses it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BOOT_KEY = "boot_id"


def _stat_tail(pid: int, proc: str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, None when there is no such pid."""
    try:
        text = Path(f"{proc}/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return fields if len(fields) > 19 else None


def starttime(pid: int, proc: str = "/proc") -> int | None:
    """When `pid` started, in clock ticks since boot (a zombie too); None when there is none."""
    fields = _stat_tail(pid, proc)
    try:
        return int(fields[19]) if fields else None
    except ValueError:
        return None


def boot_id(proc: str = "/proc") -> str:
    """This boot's id ('' when the kernel does not say)."""
    try:
        return Path(f"{proc}/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def clock_ticks_now(proc: str = "/proc") -> int:
    """Now, in the clock ticks since boot that `starttime` counts."""
    with open(f"{proc}/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def alive(pid: int, start: int | None, boot: str | None = None, proc: str = "/proc") -> bool:
    """`pid` is still the live process (no zombie) that started at `start`, in the boot
    `boot` when one is given."""
    if start is None or pid <= 0 or (boot and boot != boot_id(proc)):
        return False
    fields = _stat_tail(pid, proc)
    return fields is not None and fields[0] not in ("Z", "X") and fields[19] == str(start)


def record(pid: int | None = None, prefix: str = "owner_") -> dict[str, Any]:
    """The identity of `pid` (default: this process) as record fields: `{prefix}pid`,
    `{prefix}starttime` and `boot_id`."""
    pid = os.getpid() if pid is None else pid
    return {f"{prefix}pid": pid, f"{prefix}starttime": starttime(pid), BOOT_KEY: boot_id()}


def recorded_alive(rec: Mapping[str, Any], prefix: str = "owner_") -> bool:
    """The process a record's `{prefix}pid`, `{prefix}starttime` and `boot_id` name (see
    `record`) still lives; False for a record that lacks them or holds something else."""
    pid, start, boot = rec.get(f"{prefix}pid"), rec.get(f"{prefix}starttime"), rec.get(BOOT_KEY)
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(start, int):
        return False
    return alive(pid, start, boot if isinstance(boot, str) else None)
