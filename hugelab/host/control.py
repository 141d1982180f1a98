"""Changing the host: THP modes and tunables, hugetlb pools, hugetlbfs mounts, memory cgroups —
journaled, restorable.

This is the only module that writes under /sys and /proc (with its pool half,
hugelab.host.poolcontrol, and hugelab.host.memcg, which makes and removes the memory cgroups
of arms with a memory limit, both through this module's writer and journal). Each change is a small operation:
read the old value, record it in the journal, then apply. `restore()` replays the journal in
reverse. Ordering rule: mounts are recorded after the pools they use, so the reverse replay
unmounts (freeing the pages) before it shrinks the pools.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hugelab import kernel, proc
from hugelab.errors import HostError, HugelabError, NotRootError
from hugelab.host import memcg, poolcontrol
from hugelab.host.journal import Journal
from hugelab.host.paths import (
    REAL,
    HostPaths,
    parse_choices,
    parse_selected,
    read_text,
)
from hugelab.host.poolcontrol import PoolControl
from hugelab.host.pools import current_persistent
from hugelab.units import exact, page_label

THP_ENABLED, THP_DEFRAG = kernel.THP_ENABLED, kernel.THP_DEFRAG
MTHP_ENABLED, SHMEM_ENABLED = kernel.MTHP_ENABLED, kernel.SHMEM_ENABLED
MTHP_SHMEM_ENABLED = kernel.MTHP_SHMEM_ENABLED
MTHP_SINCE = "6.8"
SIZE_NAMES = {"2M": 2048, "1G": 1048576}
SHRINKER_SINCE = "6.12"  # shrink_underused, and max_ptes_none's say over the THP shrinker


def size_kb_from_name(name: str) -> int:
    key = name.strip().upper().removesuffix("B").removesuffix("I")
    if key in SIZE_NAMES:
        return SIZE_NAMES[key]
    raise HostError(f"unknown huge page size '{name}'", hint="use 2M or 1G")


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise NotRootError(
            f"{what} changes kernel settings under /sys and needs root",
            hint="run it with sudo, or use --dry-run to print the commands instead",
        )


POOL_RESERVE_KB = poolcontrol.POOL_RESERVE_KB


@dataclass
class HostControl(PoolControl):
    """Applies host changes through the journal. With dry_run, only collects shell commands."""

    paths: HostPaths = REAL
    journal: Journal = field(default_factory=Journal.default)
    dry_run: bool = False
    compact_deadline_s: float = 10.0
    commands: list[str] = field(default_factory=list)
    # How a value reaches the kernel. The real one writes the file; a test may pass a model of
    # a kernel that cannot grow a pool (fragmented memory) without patching anything.
    writer: Callable[[Path, str], None] = field(default=lambda p, v: _write_sysfs(p, v))
    # how a memory cgroup is removed: the real one on cgroupfs; a fake host's tree its own
    rmdir: memcg.Rmdir = field(default=memcg.rmdir_cgroup)
    # the memory cgroups of arms with a memory limit (hugelab.host.memcg), one per trial
    memcg: memcg.TrialCgroups = field(init=False)
    pool_reserve_kb: int = POOL_RESERVE_KB  # memory no pool may take from the host

    def __post_init__(self) -> None:
        self.memcg = memcg.TrialCgroups(self.paths, self.journal, self.writer, self.dry_run,
                                        self.commands, self.rmdir)

    # --- primitive -----------------------------------------------------------
    def write(self, path: Path, value: str, *, old: str | None = None) -> None:
        """Journal the old value of `path`, then write `value`."""
        if self.dry_run:
            self.commands.append(f"echo {shlex.quote(value)} > {shlex.quote(str(path))}")
            return
        if old is None:
            old = self._read(path)
        self.journal.record({"kind": "write", "path": str(path), "old": old, "new": value})
        self.writer(path, value)

    # --- THP -----------------------------------------------------------------
    def set_thp(self, enabled: str | None = None, defrag: str | None = None) -> None:
        for value, allowed, path in ((enabled, THP_ENABLED, self.paths.thp_enabled),
                                     (defrag, THP_DEFRAG, self.paths.thp_defrag)):
            if value is None:
                continue
            if not path.exists():
                raise HostError("this kernel has no transparent huge pages",
                                hint=f"{path} is missing (CONFIG_TRANSPARENT_HUGEPAGE off)")
            self._set_choice(path, value, allowed, "THP")

    def _set_choice(self, path: Path, value: str, allowed: tuple[str, ...], what: str) -> None:
        """Write a bracketed sysfs choice (journaled) when it differs from the current one."""
        text = self._read(path)
        if value not in allowed or value not in parse_choices(text):
            raise HostError(f"{what} mode '{value}' is not valid for {path}",
                            hint=f"choose one of: {', '.join(parse_choices(text))}")
        current = parse_selected(text)
        if current != value:
            self.write(path, value, old=current)

    def set_max_ptes_none(self, value: int) -> None:
        """khugepaged/max_ptes_none: the empty 4 KiB slots khugepaged fills to collapse a
        2 MiB region, and (6.12+) the zero-filled subpages above which the shrinker splits an
        underused THP (0 .. the PMD's pages - 1; 511 on x86-64)."""
        path = self.paths.max_ptes_none
        if not path.exists():
            raise HostError("this kernel has no khugepaged max_ptes_none",
                            hint=f"{path} is missing (CONFIG_TRANSPARENT_HUGEPAGE off)")
        top = max_ptes_none_limit(self.paths)
        if not 0 <= value <= top:
            raise HostError(f"max_ptes_none = {value} is out of range for this kernel "
                            f"(0 .. {top})")
        if self._read(path) != str(value):
            self.write(path, str(value))

    def set_shrink_underused(self, on: bool) -> None:
        """The THP shrinker for underused huge pages (shrink_underused, Linux 6.12+): splits
        a THP on the deferred-split queue under memory pressure when more than max_ptes_none
        of its subpages are zero-filled."""
        path = self.paths.shrink_underused
        if not path.exists():
            raise HostError(shrinker_unsupported_message(self.paths),
                            hint=f"run on Linux {SHRINKER_SINCE} or later, or leave out "
                                 "thp_shrink_underused")
        want = "1" if on else "0"
        if self._read(path) != want:
            self.write(path, want)

    def set_memory_limit(self, limit_bytes: int | None) -> Path | None:
        """The next trial's memory cgroup (hugelab.host.memcg.TrialCgroups.arm)."""
        return self.memcg.arm(limit_bytes)

    # --- multi-size THP (Linux 6.8+) ---------------------------------------------------
    def require_mthp(self) -> None:
        """HostError unless the kernel has per-size THP knobs (hugepages-<N>kB directories)."""
        if not self.paths.mthp_sizes_kb():
            raise HostError(mthp_unsupported_message(self.paths),
                            hint="run on Linux 6.8 or later, or use thp (2 MiB) arms")

    def set_mthp(self, size_kb: int, mode: str) -> None:
        """Set the anonymous-memory mode of one folio size (always|inherit|madvise|never)."""
        self.require_mthp()
        path = self.paths.mthp_enabled(size_kb)
        if not path.exists():
            offered = ", ".join(exact(s) for s in self.paths.mthp_anon_sizes_kb()) or "none"
            raise HostError(f"this kernel offers no {exact(size_kb)} multi-size THP for anonymous "
                            f"memory (it offers {offered})")
        self._set_choice(path, mode, MTHP_ENABLED, f"{exact(size_kb)} THP")

    def set_shmem_thp(self, mode: str, size_kb: int | None = None) -> None:
        """Set shmem_enabled: the top-level one (always|within_size|advise|never|deny|force),
        or one folio size's (always|inherit|within_size|advise|never; Linux 6.11+)."""
        if size_kb is None:
            path = self.paths.shmem_enabled
            if not path.exists():
                raise HostError("this kernel has no THP for shmem",
                                hint=f"{path} is missing (CONFIG_TRANSPARENT_HUGEPAGE off)")
            self._set_choice(path, mode, SHMEM_ENABLED, "shmem THP")
            return
        self.require_mthp()
        path = self.paths.mthp_shmem_enabled(size_kb)
        if not path.exists():
            raise HostError(f"this kernel has no per-size shmem THP knob for {exact(size_kb)}",
                            hint=f"{path} is missing (per-size shmem_enabled came in Linux 6.11)")
        self._set_choice(path, mode, MTHP_SHMEM_ENABLED, f"{exact(size_kb)} shmem THP")

    # --- hugetlbfs -----------------------------------------------------------
    def mount_hugetlbfs(self, size_kb: int, target: Path) -> None:
        argv = ["mount", "-t", "hugetlbfs", "-o", f"pagesize={page_label(size_kb)}", "none", str(target)]
        if self.dry_run:
            self.commands.append(shlex.join(["mkdir", "-p", str(target)]))
            self.commands.append(shlex.join(argv))
            return
        if is_mounted(self.paths, target):
            return
        if target.exists() and not target.is_dir():
            raise HostError(f"cannot mount hugetlbfs on {target}: it is not a directory")
        created = not target.exists()
        self.journal.record({"kind": "mount", "target": str(target), "created": created})
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        proc.run(argv)

    # --- restore -------------------------------------------------------------
    def restore(self) -> list[str]:
        """Put back everything in the journal, newest first; return what was done."""
        return restore_journal(self.journal, self.paths, self.writer, self.rmdir)


def mthp_unsupported_message(paths: HostPaths) -> str:
    release = (read_text(paths.osrelease, "") or "").strip() or "unknown"
    return (f"multi-size THP is not supported by this kernel (added in Linux {MTHP_SINCE}; "
            f"this is {release})")


def shrinker_unsupported_message(paths: HostPaths) -> str:
    release = (read_text(paths.osrelease, "") or "").strip() or "unknown"
    return (f"this kernel has no THP shrinker for underused huge pages (shrink_underused came "
            f"in Linux {SHRINKER_SINCE}; this is {release})")


def max_ptes_none_limit(paths: HostPaths) -> int:
    """The largest max_ptes_none the kernel takes: the PMD's base pages - 1 (511 with 4 KiB
    pages and 2 MiB PMDs)."""
    text = (read_text(paths.hpage_pmd_size, "") or "").strip()
    pmd = int(text) if text.isdigit() else 2 * 1024 * 1024
    return pmd // os.sysconf("SC_PAGE_SIZE") - 1


def _write_sysfs(path: Path, value: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        raise HostError(f"cannot write '{value}' to {path}: {exc.strerror}") from exc


def is_mounted(paths: HostPaths, target: Path) -> bool:
    text = paths.mounts.read_text() if paths.mounts.exists() else ""
    return any(line.split()[1] == str(target) for line in text.splitlines() if line.strip())


def restore_journal(journal: Journal, paths: HostPaths = REAL,
                    writer: Callable[[Path, str], None] | None = None,
                    rmdir: memcg.Rmdir = memcg.rmdir_cgroup) -> list[str]:
    """Replay `journal` in reverse; collect errors and raise them only after trying everything."""
    done: list[str] = []
    errors: list[str] = []
    for entry in reversed(journal.entries):
        try:
            msg = _undo(entry, paths, writer or _write_sysfs, rmdir)
        except Exception as exc:  # noqa: BLE001 - keep restoring the rest
            errors.append(f"{entry}: {exc}")
            continue
        if msg:
            done.append(msg)
    if errors:
        raise HostError("could not restore everything:\n  " + "\n  ".join(errors),
                        hint="the journal is kept; fix the cause and run `hugelab recover`")
    journal.clear()
    return done


def _undo_pool(entry: dict[str, Any], writer: Callable[[Path, str], None]) -> str | None:
    """Put a pool back to its persistent size as found: pages others still use or have
    reserved beyond it stay theirs (as surplus), and nr_overcommit_hugepages is never touched."""
    path = Path(entry["path"])
    want = int(entry["restore"])
    if current_persistent(path) == want:
        return None
    writer(path, str(want))
    return f"{path} = {want}"


def _undo(entry: dict[str, Any], paths: HostPaths, writer: Callable[[Path, str], None],
          rmdir: memcg.Rmdir) -> str | None:
    if entry["kind"] == "write":
        path = Path(entry["path"])
        current = path.read_text().strip()
        if "[" in current:
            current = parse_selected(current)
        if current == entry["old"]:
            return None
        writer(path, entry["old"])
        return f"{path} = {entry['old']}"
    if entry["kind"] == "pool":
        return _undo_pool(entry, writer)
    if entry["kind"] == "memcg":
        return memcg.remove_session(Path(entry["path"]), Path(entry["root"]), rmdir)
    if entry["kind"] == "mount":
        target = Path(entry["target"])
        msg = None
        if is_mounted(paths, target):
            try:
                proc.run(["umount", str(target)])
            except HugelabError:
                # Still in use (a guest or a file mapping): detach now, the kernel frees the
                # pages when the last user goes, and the pool shrinks then.
                proc.run(["umount", "--lazy", str(target)])
            msg = f"unmounted {target}"
        if entry.get("created") and target.is_dir():
            try:
                target.rmdir()
            except OSError:
                pass
        return msg
    raise HostError(f"unknown journal entry kind {entry['kind']!r}")
