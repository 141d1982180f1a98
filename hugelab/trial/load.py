"""Machine load around one trial: what else the machine was doing while it ran.

On a shared machine (a cloud VM, a busy host) the effect itself can change with the load:
neighbours stealing the hypervisor's CPUs, other processes' work, memory pressure. Each trial
records, as evidence for the report (never as a correction of its value):

- ``steal_share``: CPU time the hypervisor gave to others (``steal`` in /proc/stat) as a share
  of all CPUs' time during the trial;
- ``other_busy_share``: busy CPU time (user, nice, system, irq, softirq) not spent by hugelab
  and the children it waited for (RUSAGE_SELF + RUSAGE_CHILDREN), as a share of all CPUs'
  time. A guest's QEMU or a server started by someone else counts as "other": read it as an
  upper bound on other processes' work;
- ``psi_<cpu|memory>_some_avg10``: the kernel's pressure stall average over the last 10 s,
  read at the trial's end (/proc/pressure, Linux 4.20+ with PSI on), and
  ``psi_<cpu|memory>_some_share``: the share of the trial's wall time in which some task
  stalled, from the ``total`` counter (exact over the trial).

A field the host cannot give (no /proc/pressure) is absent. :func:`high_load` names the
readings above :data:`HIGH` that make a trial's load worth a look.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from typing import Any

from hugelab.host.paths import REAL, HostPaths, read_text

PSI_RESOURCES = ("cpu", "memory")
# thresholds above which the report calls a trial's load high (shares of 0..1, avg10 in %)
HIGH = {"steal_share": 0.05, "other_busy_share": 0.25, "psi_cpu_some_share": 0.10,
        "psi_memory_some_share": 0.05}
PRESSURE_NEEDS = 0.05  # others' CPU or steal beside CPU pressure for it to be the machine's
LABELS = {"steal_share": "CPU steal", "other_busy_share": "other processes' CPU",
          "psi_cpu_some_share": "CPU pressure", "psi_memory_some_share": "memory pressure"}


@dataclass(frozen=True)
class LoadSnapshot:
    cpu: tuple[int, ...]  # aggregate /proc/stat `cpu` jiffies: user nice system idle iowait
    #                       irq softirq steal (guest time is already inside user)
    own_s: float  # CPU seconds of this process and its waited-for children
    t: float  # monotonic seconds
    psi: dict[str, tuple[float, int]] = field(default_factory=dict)  # some (avg10 %, total us)


def parse_cpu_line(text: str) -> tuple[int, ...]:
    """The first 8 fields of /proc/stat's aggregate `cpu` line (zeros where absent)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            vals = [int(p) for p in parts[1:9]]
            return tuple(vals + [0] * (8 - len(vals)))
    return (0,) * 8


def parse_psi_some(text: str) -> tuple[float, int] | None:
    """(avg10, total) of the `some` line of a /proc/pressure file."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "some":
            kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
            try:
                return float(kv["avg10"]), int(kv["total"])
            except (KeyError, ValueError):
                return None
    return None


def _own_cpu_s() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def snapshot(paths: HostPaths = REAL) -> LoadSnapshot:
    psi = {}
    for res in PSI_RESOURCES:
        got = parse_psi_some(read_text(paths.p(f"proc/pressure/{res}"), "") or "")
        if got is not None:
            psi[res] = got
    return LoadSnapshot(parse_cpu_line(read_text(paths.p("proc/stat"), "") or ""),
                        _own_cpu_s(), time.monotonic(), psi)


def load_delta(before: LoadSnapshot, after: LoadSnapshot,
               clk_tck: int | None = None) -> dict[str, Any]:
    """The trial's load readings (see the module docstring); {} when nothing moved."""
    clk_tck = clk_tck or os.sysconf("SC_CLK_TCK")
    d = [a - b for a, b in zip(after.cpu, before.cpu, strict=True)]
    total = sum(d)
    out: dict[str, Any] = {}
    if total > 0:
        busy = d[0] + d[1] + d[2] + d[5] + d[6]
        own = (after.own_s - before.own_s) * clk_tck
        out["steal_share"] = round(d[7] / total, 4)
        out["other_busy_share"] = round(min(max(busy - own, 0.0) / total, 1.0), 4)
    wall_us = (after.t - before.t) * 1e6
    for res, (avg10, tot) in after.psi.items():
        out[f"psi_{res}_some_avg10"] = avg10
        if res in before.psi and wall_us > 0:
            share = (tot - before.psi[res][1]) / wall_us
            out[f"psi_{res}_some_share"] = round(min(max(share, 0.0), 1.0), 4)
    return out


def high_load(load: dict[str, Any]) -> list[str]:
    """The readings of one trial's load at or above :data:`HIGH`, as 'CPU steal 12%'.

    CPU pressure is machine-wide and counts the trial's own threads too: a workload with more
    runnable threads than CPUs (request-interleaved servers and their client: 16 threads on 2
    CPUs) stalls itself. Pressure is the machine's load only beside others' CPU or steal
    (:data:`PRESSURE_NEEDS` of the machine's time), and is not named otherwise."""
    others = max(_num(load, "other_busy_share"), _num(load, "steal_share"))
    return [f"{LABELS[k]} {float(load[k]):.0%}" for k, lim in HIGH.items()
            if isinstance(load.get(k), int | float) and load[k] >= lim
            and (k != "psi_cpu_some_share" or others >= PRESSURE_NEEDS)]


def _num(load: dict[str, Any], key: str) -> float:
    value = load.get(key)
    return float(value) if isinstance(value, int | float) else 0.0


BUSY_PSI_AVG60 = 25.0  # % of the last minute with some task waiting for a CPU
BUSY_LOAD_PER_CPU = 1.0  # runnable tasks per CPU, 1-minute load average


def busy_now(paths: HostPaths = REAL) -> dict[str, Any] | None:
    """Whether the host is busy right now, from what the kernel already averages (no
    sampling): CPU pressure over the last minute (/proc/pressure/cpu `some avg60`) and the
    1-minute load average per CPU. None when neither is at or above its threshold
    (:data:`BUSY_PSI_AVG60`, :data:`BUSY_LOAD_PER_CPU`) or neither can be read."""
    cpus = os.cpu_count() or 1
    out: dict[str, Any] = {"cpus": cpus}
    for line in (read_text(paths.p("proc/pressure/cpu"), "") or "").splitlines():
        parts = line.split()
        if parts and parts[0] == "some":
            kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
            if "avg60" in kv:
                out["cpu_pressure_avg60_pct"] = float(kv["avg60"])
    fields = (read_text(paths.p("proc/loadavg"), "") or "").split()
    if fields:
        out["loadavg_1m"] = float(fields[0])
    busy = out.get("cpu_pressure_avg60_pct", 0.0) >= BUSY_PSI_AVG60 or \
        out.get("loadavg_1m", 0.0) / cpus >= BUSY_LOAD_PER_CPU
    return out if busy else None
