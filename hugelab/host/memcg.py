"""Memory cgroups for an arm's `memory_limit`: the workload's own processes under a limit, so
reclaim (and, with `shrink_underused` on, the THP shrinker) engage inside it.

Layout. One cgroup per host session, `<memory hierarchy>/hugelab-<pid>`, is journaled
(`{"kind": "memcg", ...}`) *before* it is made; in it, each arm's apply makes a fresh cgroup
for the trial, `trial-<n>`, with the arm's limit (so its counters are that trial's own) and
removes the one before. The session's restore, `hugelab host restore` and `hugelab recover`
(after its leftover workloads are killed) remove them all.

Which file takes the limit:

    cgroup v1 (the memory controller on its own hierarchy, e.g. /sys/fs/cgroup/memory):
        memory.limit_in_bytes = limit
    cgroup v2 (`memory` in the unified hierarchy's cgroup.controllers):
        memory.max = limit          (memory.high is left at `max`)

Both are the same hard limit: at it the kernel reclaims inside the cgroup (page cache; swap,
where there is swap; underused THPs split by the shrinker) and, when reclaim cannot keep the
cgroup under it, the OOM killer ends one of its processes (the trial fails; `memcg_oom_kill`
counts it). Swap limits (memory.memsw.*, memory.swap.max) stay as they are. On v2 the session
cgroup enables `+memory` for its children; the hierarchy's root must already offer it to its
children (systemd hosts do), which hugelab does not change.

How processes get in: `hugelab.proc.spawn` starts each workload process of a trial (every
process the trial's scope starts: the workload, a server and its load generator alike) with a
preexec step in which the forked child writes its own pid to the trial cgroup's cgroup.procs
before it execs: nothing it allocates is charged anywhere else. Guests are refused at parse time
(QEMU is started otherwise, and a guest's memory is the guest's to manage).

`trial_counters()` reads the counters of the trial cgroup the current trial's processes joined
(see its docstring); the cost record calls it after the trial.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hugelab import proc
from hugelab.errors import HostError
from hugelab.host.journal import Journal
from hugelab.host.paths import HostPaths, parse_vmstat, read_text

SESSION_PREFIX = "hugelab-"
TRIAL_PREFIX = "trial-"
RMDIR_WAIT_S = 5.0  # a killed process leaves its cgroup when its exit completes


@dataclass(frozen=True)
class Hierarchy:
    """Where the memory controller is: cgroup `version` 1 or 2, mounted at `root`."""

    version: int
    root: Path

    @property
    def limit_file(self) -> str:
        return "memory.limit_in_bytes" if self.version == 1 else "memory.max"


def find(paths: HostPaths) -> Hierarchy | None:
    """The host's memory cgroup hierarchy: v2 when `memory` is in a cgroup2 mount's
    cgroup.controllers, else a v1 hierarchy mounted with the memory controller; None without."""
    v1 = None
    for line in (read_text(paths.mounts, "") or "").splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        where = paths.host_path(parts[1].replace("\\040", " "))
        if parts[2] == "cgroup2":
            controllers = (read_text(where / "cgroup.controllers", "") or "").split()
            if "memory" in controllers:
                return Hierarchy(2, where)
        elif parts[2] == "cgroup" and "memory" in parts[3].split(",") and v1 is None:
            v1 = Hierarchy(1, where)
    return v1


UNSUPPORTED = ("this host has no memory cgroup controller (neither a cgroup v1 hierarchy with "
               "the memory controller nor `memory` in cgroup v2's cgroup.controllers)")


def state(paths: HostPaths) -> dict[str, Any]:
    """What `hugelab inspect` shows: the memory controller's version and mount, and a memory
    cgroup a killed hugelab left (its sessions' `hugelab-<pid>` cgroups)."""
    h = find(paths)
    if h is None:
        return {"supported": False, "reason": UNSUPPORTED}
    left = sorted(str(d) for d in h.root.glob(f"{SESSION_PREFIX}*") if d.is_dir())
    return {"supported": True, "version": h.version, "root": str(h.root),
            "limit_file": h.limit_file, "hugelab_cgroups": left}


def _procs(cgroup: Path) -> list[int]:
    text = read_text(cgroup / "cgroup.procs", "") or ""
    return [int(w) for w in text.split() if w.isdigit()]


Rmdir = Callable[[Path, Path], None]


def rmdir_cgroup(cgroup: Path, root: Path) -> None:
    """Remove one cgroup: wait for its processes to finish exiting, move any that stay to the
    hierarchy's root, and retry the rmdir a while (EBUSY while an exit completes)."""
    deadline = time.monotonic() + RMDIR_WAIT_S
    while True:
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise HostError(f"cannot remove memory cgroup {cgroup}: {exc.strerror}",
                                hint=f"processes still in it: {_procs(cgroup) or 'none'}") \
                    from exc
        if time.monotonic() > deadline - RMDIR_WAIT_S / 2:
            for pid in _procs(cgroup):  # a process that would not die leaves, the cgroup goes
                with contextlib.suppress(OSError):
                    (root / "cgroup.procs").write_text(str(pid))
        time.sleep(0.05)


def remove_session(path: Path, root: Path, rmdir: Rmdir = rmdir_cgroup) -> str | None:
    """Undo a journaled session cgroup: its trial cgroups, then itself. What was done, or None
    when it is already gone. `rmdir`: how a cgroup goes (a test's fake tree passes its own)."""
    if not path.is_dir():
        return None
    if proc.cgroup() is not None and Path(str(proc.cgroup())).parent.parent == path:
        proc.join_cgroup(None)
    for child in sorted(d for d in path.iterdir() if d.is_dir()):
        rmdir(child, root)
    rmdir(path, root)
    return f"removed memory cgroup {path}"


@dataclass
class TrialCgroups:
    """The memory cgroups of one host session (held by HostControl as `memcg`)."""

    paths: HostPaths
    journal: Journal
    writer: Callable[[Path, str], None]
    dry_run: bool = False
    commands: list[str] = field(default_factory=list)
    rmdir: Rmdir = rmdir_cgroup
    current: Path | None = None
    count: int = 0

    def session_dir(self, h: Hierarchy) -> Path:
        return h.root / f"{SESSION_PREFIX}{os.getpid()}"

    def arm(self, limit_bytes: int | None) -> Path | None:
        """The next trial's cgroup: the one before removed; with a limit, a fresh cgroup that
        every workload process of the trial joins before it execs (proc.join_cgroup). Returns
        it, or None (no limit: the workload runs where hugelab runs)."""
        self.disarm()
        if limit_bytes is None:
            return None
        h = find(self.paths)
        if h is None:
            raise HostError(f"memory_limit needs a memory cgroup: {UNSUPPORTED}",
                            hint="mount the memory controller (cgroup v1 or v2), or drop "
                                 "memory_limit from the experiment")
        session = self.session_dir(h)
        self.count += 1
        trial = session / f"{TRIAL_PREFIX}{self.count}"
        if self.dry_run:
            self.commands += [shlex.join(["mkdir", "-p", str(trial)]),
                              f"echo {limit_bytes} > {shlex.quote(str(trial / h.limit_file))}"]
            return trial
        self._make_session(h, session)
        trial.mkdir(mode=0o755)
        self.current = trial
        self.writer(trial / h.limit_file, str(limit_bytes))
        proc.join_cgroup(trial / "cgroup.procs")
        return trial

    def _make_session(self, h: Hierarchy, session: Path) -> None:
        if session.is_dir():
            return
        if h.version == 2 and "memory" not in (
                read_text(h.root / "cgroup.subtree_control", "") or "").split():
            raise HostError(f"cgroup v2's root ({h.root}) does not offer the memory controller "
                            "to its children (no `memory` in cgroup.subtree_control)",
                            hint=f"enable it: echo +memory > {h.root}/cgroup.subtree_control")
        self.journal.record({"kind": "memcg", "path": str(session), "root": str(h.root),
                             "version": h.version})
        session.mkdir(mode=0o755)
        if h.version == 2:
            self.writer(session / "cgroup.subtree_control", "+memory")

    def disarm(self) -> None:
        """Workloads spawned from now on stay where hugelab is; the last trial cgroup goes."""
        proc.join_cgroup(None)
        if self.current is not None:
            h = find(self.paths)
            self.rmdir(self.current, h.root if h else self.current.parent)
            self.current = None


def counters(cgroup: Path) -> dict[str, float]:
    """A trial cgroup's own counters, as a flat dict of numbers (keys carry their unit):

        memcg_limit_bytes     the limit in force (memory.limit_in_bytes / memory.max)
        memcg_usage_bytes     memory charged now (memory.usage_in_bytes / memory.current)
        memcg_peak_bytes      the most ever charged (memory.max_usage_in_bytes / memory.peak)
        memcg_limit_hits      times a charge hit the limit (v1 memory.failcnt; v2 the `max`
                              count of memory.events)
        memcg_high_events     v2 only: times usage went over memory.high (0 while it is max)
        memcg_oom_kill        processes the OOM killer ended inside the cgroup
        memcg_anon_thp_bytes  anonymous THP charged now (memory.stat rss_huge / anon_thp)
        memcg_version         1 or 2

    Read before the next arm's apply removes the cgroup; {} when it is gone."""
    if not cgroup.is_dir():
        return {}
    v2 = (cgroup / "memory.max").exists()

    def num(name: str) -> float | None:
        text = (read_text(cgroup / name, "") or "").strip()
        if text == "max":
            return float("inf")
        return float(text) if text.lstrip("-").isdigit() else None

    def table(name: str) -> dict[str, int]:  # "key value" lines: memory.stat, memory.events
        return parse_vmstat(read_text(cgroup / name, "") or "")

    stat = table("memory.stat")
    if v2:
        events = table("memory.events")
        raw = {"memcg_limit_bytes": num("memory.max"), "memcg_usage_bytes": num("memory.current"),
               "memcg_peak_bytes": num("memory.peak"), "memcg_limit_hits": events.get("max"),
               "memcg_high_events": events.get("high"), "memcg_oom_kill": events.get("oom_kill"),
               "memcg_anon_thp_bytes": stat.get("anon_thp"), "memcg_version": 2}
    else:
        oom = table("memory.oom_control")
        raw = {"memcg_limit_bytes": num("memory.limit_in_bytes"),
               "memcg_usage_bytes": num("memory.usage_in_bytes"),
               "memcg_peak_bytes": num("memory.max_usage_in_bytes"),
               "memcg_limit_hits": num("memory.failcnt"), "memcg_oom_kill": oom.get("oom_kill"),
               "memcg_anon_thp_bytes": stat.get("rss_huge"), "memcg_version": 1}
    return {k: float(v) for k, v in raw.items() if v is not None}


def trial_counters() -> dict[str, float]:
    """`counters()` of the trial cgroup the current trial's workload processes join (the last
    arm applied with a memory_limit); {} when the arm has none. Call it after the trial ends
    and before the next arm is applied (which removes that cgroup)."""
    procs = proc.cgroup()
    return counters(Path(procs).parent) if procs is not None else {}
