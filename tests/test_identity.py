"""A process's identity (hugelab.identity): pid, start time and boot agree, or it is not the
process a record names."""

from __future__ import annotations

import os
import subprocess
import time

from hugelab import identity


def test_this_process_is_alive_by_its_record():
    rec = identity.record()
    assert rec["owner_pid"] == os.getpid() and rec["boot_id"] == identity.boot_id() != ""
    assert identity.recorded_alive(rec)
    assert identity.recorded_alive({k: v for k, v in rec.items() if k != "boot_id"})  # older


def test_another_start_another_boot_or_no_record_is_not_alive():
    rec = identity.record()
    assert not identity.recorded_alive({**rec, "owner_starttime": rec["owner_starttime"] - 1})
    assert not identity.recorded_alive({**rec, "boot_id": "another-boot"})
    assert not identity.recorded_alive({**rec, "owner_starttime": None})
    assert not identity.recorded_alive({})
    assert not identity.recorded_alive(identity.record(os.getpid(), prefix=""))  # wrong prefix
    assert identity.recorded_alive(identity.record(os.getpid(), prefix=""), prefix="")


def test_a_zombie_keeps_its_identity_but_is_not_alive():
    p = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    start = identity.starttime(p.pid)
    assert start is not None and not identity.alive(p.pid, start)
    p.wait()
    assert identity.starttime(p.pid) is None and not identity.alive(p.pid, start)


def test_start_times_count_from_boot():
    assert 0 < identity.starttime(os.getpid()) <= identity.clock_ticks_now()
