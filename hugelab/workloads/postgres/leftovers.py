"""After a killed hugelab: the private clusters its trials left, with their servers and System
V segments. `hugelab recover` (and every run's start) calls `remove_leftovers`; a directory
whose owner (pid, start time, boot) still lives is left alone."""

from __future__ import annotations

import shutil
from pathlib import Path

from hugelab import owned
from hugelab.workloads.postgres import cluster, server, sysvshm


def _serves(pid: int, data: Path) -> bool:
    """Whether `pid` is a postgres running on `data` (not a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(data).encode() in argv and any(a.endswith(b"postgres") for a in argv)


def remove_leftovers(work: Path | None = None) -> list[str]:
    """Kill the servers of dead owners' clusters, remove their segments and directories."""
    done: list[str] = []
    for top in owned.dead_owned(work or cluster.work_path()):
        cd = cluster.ClusterDir(top)
        pid = sysvshm.postmaster_pid(cd.data)
        if pid and _serves(pid, cd.data):
            server.kill_cluster(cd, pid)
            done.append(f"killed leftover postgres server pid {pid}")
        done += sysvshm.drop_for(cd.data)
        shutil.rmtree(top, ignore_errors=True)
        done.append(f"removed {top}")
    return done + cluster.templates().sweep()  # half-built templates of killed builds
