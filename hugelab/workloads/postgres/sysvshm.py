"""System V shared memory of a PostgreSQL cluster: PostgreSQL keeps a small System V segment
(its key and id on line 7 of postmaster.pid) beside its main mmap'ed one. A fast shutdown removes
it; a killed postmaster leaves it, unattached, until someone removes it: this module does, only
for a segment whose id and key match the cluster's own record and that nobody has attached,
with the dynamic shared memory its header names (hugelab.workloads.postgres.dsm)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from hugelab.proc import run
from hugelab.workloads.postgres import dsm

PROC_SHM = Path("/proc/sysvipc/shm")


@dataclass(frozen=True)
class Segment:
    key: int
    shmid: int
    size: int
    cpid: int
    nattch: int
    uid: int


def parse(text: str) -> list[Segment]:
    """/proc/sysvipc/shm's rows (pure)."""
    lines = text.splitlines()
    if not lines:
        return []
    head = lines[0].split()
    out = []
    for line in lines[1:]:
        cols = dict(zip(head, line.split(), strict=False))
        try:
            out.append(Segment(int(cols["key"]), int(cols["shmid"]), int(cols["size"]),
                               int(cols["cpid"]), int(cols["nattch"]), int(cols["uid"])))
        except (KeyError, ValueError):
            continue
    return out


def segments(path: Path = PROC_SHM) -> list[Segment]:
    try:
        return parse(path.read_text())
    except OSError:
        return []


def pid_file_lines(data: Path) -> list[str]:
    try:
        return (data / "postmaster.pid").read_text().splitlines()
    except OSError:
        return []


def postmaster_pid(data: Path) -> int | None:
    lines = pid_file_lines(data)
    try:
        return int(lines[0])
    except (IndexError, ValueError):
        return None


def recorded(data: Path) -> tuple[int, int] | None:
    """(key, shmid) of the cluster's System V segment, from its postmaster.pid."""
    lines = pid_file_lines(data)
    try:
        key, shmid = lines[6].split()
        return int(key), int(shmid)
    except (IndexError, ValueError):
        return None


def drop_for(data: Path, wait_s: float = 5.0) -> list[str]:
    """Remove the cluster's segment once nobody is attached (killed backends take a moment to
    go; wait up to `wait_s`); what was done."""
    rec = recorded(data)
    if rec is None:
        return []
    key, shmid = rec
    deadline = time.monotonic() + wait_s
    while True:
        seg = next((s for s in segments() if s.shmid == shmid and s.key == key), None)
        if seg is None:
            return []
        if seg.nattch == 0:  # its dynamic shared memory first: the header names it
            done = dsm.drop(dsm.attached_header(shmid), data, seg.uid)
            run(["ipcrm", "-m", str(shmid)], check=False)
            return [f"removed System V shared memory segment {shmid} (key {key:#x})", *done]
        if time.monotonic() > deadline:
            return [f"System V segment {shmid} (key {key:#x}) is still attached: left alone"]
        time.sleep(0.05)
