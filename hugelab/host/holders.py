"""Who holds the pages of the host's hugetlb pools (read-only): processes that map hugetlb
memory (from /proc/PID/status HugetlbPages and their smaps), SysV shared memory segments
(/proc/sysvipc/shm; SHM_HUGETLB ones are told by the page size of a process that attaches them)
and files in hugetlbfs mounts.

Shared mappings (a database's shared memory, mapped by every backend) are counted once per
segment in a pool's attribution; each process still lists what it maps.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hugelab import kernel
from hugelab.host.paths import REAL, HostPaths, read_text

MAX_HUGETLBFS_FILES = 2000  # files looked at per mount: a tree that large is someone's store
SMAPS_MARKERS = ("anon_hugepage", "/SYSV")  # maps names of hugetlb (or maybe-hugetlb) memory


def _status_fields(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _kb(value: str | None) -> int:
    parts = (value or "").split()
    return int(parts[0]) if parts and parts[0].isdigit() else 0


def parse_smaps(text: str) -> list[dict[str, Any]]:
    """The hugetlb mappings of one process's smaps: per mapping its page size (KiB), its size
    and the hugetlb memory it has faulted in (KiB), its name and inode (a SysV segment's inode
    is its shmid), and whether it is shared."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            cur = {"name": head[5].strip() if len(head) > 5 else "", "inode": int(head[4]),
                   "shared": len(head[1]) > 3 and head[1][3] == "s", "fields": {}}
            out.append(cur)
        elif cur is not None and ":" in line:
            key, _, value = line.partition(":")
            cur["fields"][key.strip()] = _kb(value)
    maps = []
    for m in out:
        f = m.pop("fields")
        page = f.get("KernelPageSize", 4)
        if page <= 4:
            continue  # 4 KiB pages (THP mappings too): not a hugetlb pool's
        maps.append({**m, "page_kb": page, "size_kb": f.get("Size", 0),
                     "hugetlb_kb": f.get("Private_Hugetlb", 0) + f.get("Shared_Hugetlb", 0)})
    return maps


def _hugetlbfs_targets(paths: HostPaths) -> list[str]:
    return [m.target for m in kernel.hugetlbfs_mounts(read_text(paths.mounts, "") or "")]


def _may_hold(proc: Path, mounts: list[str]) -> bool:
    """Whether a process maps hugetlb memory: faulted pages (HugetlbPages), or a mapping named
    as hugetlb or maybe-hugetlb memory (reserved pages show only there)."""
    status = _status_fields(read_text(proc / "status", "") or "")
    if _kb(status.get("HugetlbPages")):
        return True
    maps = read_text(proc / "maps", "") or ""
    return any(m in maps for m in SMAPS_MARKERS) or any(f" {t}/" in maps for t in mounts)


def processes(paths: HostPaths = REAL, exclude: Iterable[int] = ()) -> list[dict[str, Any]]:
    """Processes that map hugetlb memory, with what they map per page size."""
    skip = {os.getpid(), *exclude}
    mounts = _hugetlbfs_targets(paths)
    out = []
    root = paths.p("proc")
    try:
        pids = sorted(int(e.name) for e in root.iterdir() if e.name.isdigit())
    except OSError:
        return []
    for pid in pids:
        proc = root / str(pid)
        if pid in skip or not _may_hold(proc, mounts):
            continue
        maps = parse_smaps(read_text(proc / "smaps", "") or "")
        if not maps:
            continue
        status = _status_fields(read_text(proc / "status", "") or "")
        cmd = (read_text(proc / "cmdline", "") or "").replace("\0", " ").strip()
        by_size: dict[str, dict[str, int]] = {}
        for m in maps:
            s = by_size.setdefault(str(m["page_kb"]), {"mapped_kb": 0, "hugetlb_kb": 0})
            s["mapped_kb"] += m["size_kb"]
            s["hugetlb_kb"] += m["hugetlb_kb"]
        out.append({"pid": pid, "name": status.get("Name", "?"), "cmdline": cmd[:200],
                    "uid": _kb(status.get("Uid")), "by_page_kb": by_size,
                    "segments": sorted({m["inode"] for m in maps
                                        if m["name"].startswith("/SYSV")}),
                    "maps": maps})
    return out


def sysv_segments(paths: HostPaths = REAL,
                  procs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """SysV shared memory segments (/proc/sysvipc/shm); `page_kb` is a segment's huge page
    size when a process attaches it with one, 4 when with 4 KiB pages, None when no process
    attaches it (its pages cannot be told then)."""
    lines = (read_text(paths.p("proc/sysvipc/shm"), "") or "").splitlines()
    if not lines:
        return []
    header = lines[0].split()
    page_of = {m["inode"]: m["page_kb"] for p in procs or [] for m in p["maps"]
               if m["name"].startswith("/SYSV")}
    out = []
    for line in lines[1:]:
        row = dict(zip(header, line.split(), strict=False))
        if "shmid" not in row:
            continue
        shmid = int(row["shmid"])
        attached = int(row.get("nattch", "0"))
        page = page_of.get(shmid, 4 if attached else None)
        out.append({"shmid": shmid, "key": f"0x{int(row.get('key', '0')) & 0xffffffff:08x}",
                    "bytes": int(row.get("size", "0")), "creator_pid": int(row.get("cpid", "0")),
                    "attached": attached, "uid": int(row.get("uid", "0")), "page_kb": page})
    return out


def hugetlbfs_files(paths: HostPaths = REAL) -> list[dict[str, Any]]:
    """Per hugetlbfs mount: its files' huge pages in use (KiB, from their block counts)."""
    out = []
    for target in _hugetlbfs_targets(paths):
        used = files = 0
        for dirpath, _dirs, names in os.walk(paths.root / target.lstrip("/")):
            for n in names:
                files += 1
                if files > MAX_HUGETLBFS_FILES:
                    break
                try:
                    used += os.lstat(os.path.join(dirpath, n)).st_blocks * 512 // 1024
                except OSError:
                    continue
        if files:
            out.append({"mount": target, "files": files, "used_kb": used})
    return out


def scan(paths: HostPaths = REAL, exclude: Iterable[int] = ()) -> dict[str, Any]:
    """Everything that may hold hugetlb pages on this host, now."""
    procs = processes(paths, exclude)
    return {"processes": [{k: v for k, v in p.items() if k != "maps"} for p in procs],
            "sysv": sysv_segments(paths, procs), "hugetlbfs": hugetlbfs_files(paths),
            "in_processes_kb": _in_processes(procs)}


def _in_processes(procs: list[dict[str, Any]]) -> dict[str, int]:
    """Per page size (KiB, as a string), the hugetlb KiB processes have in use, each shared
    mapping (a segment, a hugetlbfs file) counted once."""
    seen: dict[tuple[str, int, str], int] = {}
    private: dict[str, int] = {}
    for p in procs:
        for m in p["maps"]:
            size = str(m["page_kb"])
            if m["shared"] and m["inode"]:
                key = (size, m["inode"], m["name"])
                seen[key] = max(seen.get(key, 0), m["hugetlb_kb"])
            else:
                private[size] = private.get(size, 0) + m["hugetlb_kb"]
    out = dict(private)
    for (size, _inode, _name), kb in seen.items():
        out[size] = out.get(size, 0) + kb
    return out


def _human(kb: int) -> str:
    return f"{kb / 1048576:.1f} GiB" if kb >= 1048576 else f"{kb / 1024:.0f} MiB"


def pool_holders(pools: Sequence[Mapping[str, Any]], holders: Mapping[str, Any]
                 ) -> list[dict[str, Any]]:
    """Per pool with pages others hold: how many, who (processes by what they map of that
    size, SysV segments with no process attached), how many are reserved, and how many in use
    no process maps (SysV segments no process attaches, files in hugetlbfs)."""
    out = []
    use = holders.get("in_processes_kb") or {}
    for pool in pools:
        nr, free, resv = (int(pool.get(k) or 0) for k in ("nr", "free", "resv"))
        held = max(nr - free + resv, 0)
        if not held:
            continue
        size_kb = str(pool["size_kb"])
        names = [f"{p['name']} (pid {p['pid']}, {_human(p['by_page_kb'][size_kb]['hugetlb_kb'])}"
                 f" in use of {_human(p['by_page_kb'][size_kb]['mapped_kb'])} mapped)"
                 for p in holders.get("processes", []) if size_kb in p["by_page_kb"]]
        names += [f"SysV segment {s['key']} (shmid {s['shmid']}, {_human(s['bytes'] // 1024)}, "
                  f"no process attached, so its page size is unknown; created by pid "
                  f"{s['creator_pid']})"
                  for s in holders.get("sysv", []) if s["page_kb"] is None]
        names += [f"hugetlbfs {f['mount']} ({f['files']} file(s), {_human(f['used_kb'])})"
                  for f in holders.get("hugetlbfs", []) if f["used_kb"]]
        in_procs = int(use.get(size_kb) or 0) // int(pool["size_kb"])
        out.append({"size": pool["size"], "held": held, "of": nr, "reserved": resv,
                    "by_processes": min(in_procs, held),
                    "unaccounted": max(held - resv - in_procs, 0), "holders": names})
    return out


def describe(entry: Mapping[str, Any], limit: int = 4) -> str:
    """One line: '100 of the 2M pool's 100 pages are held by other users: postgres (pid…)'."""
    text = (f"{entry['held']} of the {entry['size']} pool's {entry['of']} pages are held by "
            "other users")
    names = list(entry.get("holders") or [])
    if names:
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        text += ": " + "; ".join(names[:limit]) + more
    notes = []
    if entry.get("reserved"):
        notes.append(f"{entry['reserved']} reserved, not yet touched")
    if entry.get("unaccounted"):
        notes.append(f"{entry['unaccounted']} in use that no process maps: SysV segments no "
                     "process attaches, or files in hugetlbfs")
    return text + (f" ({'; '.join(notes)})" if notes else "")
