"""After a killed hugelab: the private clusters its trials left, with their servers and System
V segments. `hugelab recover` (and every run's start) calls `remove_leftovers`; a directory
whose owner (pid, start time, boot) still lives is left alone."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

from hugelab.workloads.postgres import cluster, server, sysvshm


def _owner(top: Path) -> dict[str, object]:
    try:
        rec = json.loads((top / cluster.OWNER_FILE).read_text())
        return rec if isinstance(rec, dict) else {}
    except (OSError, ValueError):
        return {}


def _serves(pid: int, data: Path) -> bool:
    """Whether `pid` is a postgres running on `data` (not a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(data).encode() in argv and any(a.endswith(b"postgres") for a in argv)


def remove_leftovers(work: Path | None = None) -> list[str]:
    """Kill the servers of dead owners' clusters, remove their segments and directories."""
    work = work or cluster.work_path()
    if not work.is_dir():
        return cache_leftovers()
    done: list[str] = []
    for top in sorted(p for p in work.iterdir() if p.is_dir()):
        rec = _owner(top)
        if rec and cluster.owner_alive(rec):
            continue
        cd = cluster.ClusterDir(top)
        pid = sysvshm.postmaster_pid(cd.data)
        if pid and _serves(pid, cd.data):
            server.kill_cluster(cd, pid)
            done.append(f"killed leftover postgres server pid {pid}")
        done += sysvshm.drop_for(cd.data)
        shutil.rmtree(top, ignore_errors=True)
        done.append(f"removed {top}")
    return done + cache_leftovers()


def cache_leftovers() -> list[str]:
    """Half-built templates (a run killed while copying one), unless a live build holds
    their lock."""
    root = cluster.cache_path()
    if not root.is_dir():
        return []
    out = []
    for tmp in root.glob("*.tmp"):
        fd = os.open(root / f"{tmp.name.removesuffix('.tmp')}.lock", os.O_RDWR | os.O_CREAT,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live build
        finally:
            os.close(fd)  # closing releases the lock
        shutil.rmtree(tmp, ignore_errors=True)
        out.append(f"removed {tmp}")
    return out
