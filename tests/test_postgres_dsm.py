"""A killed postmaster's dynamic shared memory (/dev/shm/PostgreSQL.<handle>) goes with its
cluster: the records read as PostgreSQL writes them (pure, built here), and a real Debian
PostgreSQL 15 killed with SIGKILL, whose control segment the postmaster itself maps (its
/proc/PID/maps: the independent reference) and is gone after the cluster is dropped."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hugelab.workloads.postgres import dsm, sysvshm
from hugelab.workloads.postgres.cluster import installed
from hugelab.workloads.postgres.workload import Postgres

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)


def header(tmp: Path, handle: int, magic: int = dsm.HEADER_MAGIC) -> bytes:
    st = os.stat(tmp)
    return dsm.HEADER.pack(magic, 1234, 1 << 20, 4096, handle, 0, st.st_dev, st.st_ino)


def control(items: list[tuple[int, int]], maxitems: int = 4) -> bytes:
    body = b"".join(dsm.ITEM.pack(h, refcnt, 0, 0, 0, False) for h, refcnt in items)
    return (dsm.CONTROL_HEAD.pack(dsm.CONTROL_MAGIC, len(items), maxitems) + body
            + bytes(dsm.ITEM.size * (maxitems - len(items))))


def test_the_control_handle_is_believed_only_from_this_clusters_postgres_header(tmp_path):
    assert dsm.control_handle(header(tmp_path, 42), tmp_path) == 42
    assert dsm.control_handle(header(tmp_path, 42, magic=7), tmp_path) is None
    assert dsm.control_handle(header(tmp_path, 0), tmp_path) is None  # no control segment
    other = tmp_path / "other"
    other.mkdir()
    assert dsm.control_handle(header(tmp_path, 42), other) is None  # another data directory
    assert dsm.control_handle(b"", tmp_path) is None


def test_the_control_segment_lists_live_segments_but_not_the_main_regions_slices():
    assert dsm.listed(control([(10, 2), (12, 0), (15, 2), (20, 1)])) == [10, 20]
    assert dsm.listed(control([(10, 2)])[:-1]) == []  # not 14+'s size: nothing believed
    assert dsm.listed(b"\0" * 56) == []


def test_drop_removes_the_listed_segments_and_the_control_one(tmp_path, monkeypatch):
    monkeypatch.setattr(dsm, "SHM_DIR", tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    dsm.name(100).write_bytes(control([(200, 2), (201, 2)]))
    dsm.name(200).write_bytes(b"x")
    keep = tmp_path / "PostgreSQL.300"
    keep.write_bytes(b"another server's")
    me = os.geteuid()
    assert dsm.drop(header(data, 100), data, uid=me + 1) == []  # not the server account's
    done = dsm.drop(header(data, 100), data, uid=me)
    assert len(done) == 2 and not dsm.name(100).exists() and not dsm.name(200).exists()
    assert keep.exists()  # 201 was listed but already gone: not said
    assert dsm.drop(header(data, 100), data, uid=me) == []


def test_drop_follows_no_link_and_reads_no_fifo(tmp_path, monkeypatch):
    """The header is the server account's to write: a handle naming a link or a FIFO is
    neither followed nor read, nor is a listed link removed."""
    monkeypatch.setattr(dsm, "SHM_DIR", tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    target = tmp_path / "precious"
    target.write_bytes(control([(200, 2)]))
    dsm.name(100).symlink_to(target)
    os.mkfifo(dsm.name(101))
    assert dsm.drop(header(data, 100), data, os.geteuid()) == []
    assert dsm.drop(header(data, 101), data, os.geteuid()) == []  # would block if read
    dsm.name(102).write_bytes(control([(200, 2)]))
    dsm.name(200).symlink_to(target)
    assert dsm.drop(header(data, 102), data, os.geteuid()) == [
        f"removed PostgreSQL dynamic shared memory {dsm.name(102)}"]
    assert target.exists() and dsm.name(200).is_symlink()


# the first 56 bytes of a control segment a killed Debian PostgreSQL 15.14 left here (26976
# bytes: 674 items), one pinned segment listed: the layout as the server writes it
REAL_CONTROL = bytes.fromhex(
    "323d509a01000000a202000000000000" "3668 01a2 0200 0000 0000 0000 0000 0000".replace(" ", "")
    + "00" * 16 + "0100000000000000")


def test_a_real_control_segment_lists_its_pinned_segment():
    control = REAL_CONTROL + bytes(16 + 674 * 40 - len(REAL_CONTROL))
    assert len(control) == 26976 and dsm.listed(control) == [0xA2016836]


def mapped(pgid: int) -> set[str]:
    """The PostgreSQL dynamic shared memory the processes of group `pgid` map."""
    out = set()
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and os.getpgid(int(d.name)) == pgid:
                out |= {line.split()[-1] for line in (d / "maps").read_text().splitlines()
                        if "/dev/shm/PostgreSQL." in line}
        except OSError:
            continue
    return out


# host: in the machine lane, not beside it. The kill leaves an orphan segment for a moment, and
# the machine lane's kill tests count every orphan segment as their own run's leftover.
@pytest.mark.server
@pytest.mark.host
@pytest.mark.skipif(not installed(), reason="Debian package postgresql not installed")
def test_a_killed_postmasters_dynamic_shared_memory_goes_with_its_cluster():
    w = Postgres(scale=1).for_arm(SimpleNamespace(name="off", backing="4k"))
    srv = w.launched("4k")
    try:
        pid = sysvshm.postmaster_pid(srv.files / "data")
        assert pid
        key_id = sysvshm.recorded(srv.files / "data")
        assert key_id
        handle = dsm.control_handle(dsm.attached_header(key_id[1]), srv.files / "data")
        used = mapped(pid)  # the server's own maps: the control segment and any other
        assert handle and str(dsm.name(handle)) in used
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert dsm.name(handle).exists()  # left by the kill, as on a killed run
    finally:
        w.stop(srv)  # the trial's end: its cluster, segment and dynamic shared memory
    assert not [f for f in used if Path(f).exists()]
