"""State records of QEMUs and recovery after a SIGKILLed hugelab (no real QEMU needed)."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from hugelab.vm.own import backingcheck, bootfailure, qemurecords


@pytest.fixture
def fake_qemu(tmp_path):
    """A long sleep whose /proc/PID/exe is named like QEMU."""
    exe = tmp_path / "qemu-system-fake"
    shutil.copy("/bin/sleep", exe)
    procs = []

    def start() -> subprocess.Popen:
        p = subprocess.Popen([str(exe), "300"], start_new_session=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_state_dir_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "st"))
    d = qemurecords.state_dir()
    assert d == tmp_path / "st" and (d.stat().st_mode & 0o777) == 0o700


def test_record_is_private_and_live_owner_kept(tmp_path, fake_qemu):
    p = fake_qemu()
    vmdir = tmp_path / "hugelab-vm-x"
    vmdir.mkdir()
    rec = qemurecords.register_qemu(tmp_path, p.pid, vmdir)
    assert (rec.stat().st_mode & 0o777) == 0o600
    assert json.loads(rec.read_text())["owner_pid"] == os.getpid()
    assert qemurecords.kill_leftover_qemus(tmp_path) == []  # we (the owner) are alive
    assert p.poll() is None and rec.exists()
    assert qemurecords.kill_leftover_qemus(tmp_path, include_live_owners=True) == [p.pid]
    assert p.wait(5) is not None and not rec.exists() and not vmdir.exists()


def test_dead_owner_qemu_is_killed(tmp_path, fake_qemu):
    p = fake_qemu()
    rec = qemurecords.register_qemu(tmp_path, p.pid, tmp_path / "hugelab-vm-y")
    data = json.loads(rec.read_text())
    data["owner_pid"], data["owner_starttime"] = 999999999, 1
    rec.write_text(json.dumps(data))
    assert qemurecords.kill_leftover_qemus(tmp_path) == [p.pid]
    assert p.wait(5) is not None


def test_exited_or_reused_pids_are_not_killed(tmp_path, fake_qemu):
    p = fake_qemu()
    rec = qemurecords.register_qemu(tmp_path, p.pid, tmp_path / "hugelab-vm-z")
    data = json.loads(rec.read_text())
    data.update(owner_pid=999999999, starttime=data["starttime"] - 1)  # pid reused
    rec.write_text(json.dumps(data))
    (tmp_path / "qemu-1.json").write_text("garbage")
    assert qemurecords.kill_leftover_qemus(tmp_path) == []
    assert p.poll() is None and not rec.exists() and not (tmp_path / "qemu-1.json").exists()


def test_sigkilled_owner_leaves_record_then_recover(tmp_path, fake_qemu):
    """A child 'hugelab' records a QEMU, is SIGKILLed; recover ends the orphan."""
    p = fake_qemu()
    code = (f"import time; from pathlib import Path; from hugelab.vm.own.qemurecords import register_qemu;"
            f"register_qemu(Path({str(tmp_path)!r}), {p.pid}, Path('/nonexistent/hugelab-vm-q'));"
            f"print('ok', flush=True); time.sleep(300)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ok"
    assert qemurecords.kill_leftover_qemus(tmp_path) == []
    child.kill()
    child.wait()
    time.sleep(0.05)
    assert qemurecords.kill_leftover_qemus(tmp_path) == [p.pid]


MOUNTS = """\
none /mnt/h2 hugetlbfs rw,relatime,pagesize=2M 0 0
none /mnt/h1 hugetlbfs rw,relatime,pagesize=1024M 0 0
none /mnt/hd hugetlbfs rw,relatime 0 0
tmpfs /mnt/t tmpfs rw 0 0
"""


@pytest.mark.parametrize("path,kb", [("/mnt/h2", 2048), ("/mnt/h1", 1048576),
                                     ("/mnt/hd", 2048), ("/mnt/t", None), ("/nope", None)])
def test_hugetlbfs_page_kb(path, kb):
    assert backingcheck.hugetlbfs_page_kb(path, MOUNTS) == kb


def test_failure_hints():
    assert "pool" in bootfailure.failure_hint("qemu: unable to map backing store for guest RAM: Cannot")
    assert "tcg" in bootfailure.failure_hint("error: failed to set MSR 0x10a")
    assert bootfailure.failure_hint("???")


def test_qemu_killed_before_its_pid_was_recorded_is_found_by_its_tmpdir(tmp_path):
    """SIGKILL between Popen and register_qemu: only the pending record exists; recover finds
    the QEMU through the private tmpdir its command line names (sockets, logs live there)."""
    exe = tmp_path / "qemu-system-fake"
    shutil.copy("/bin/sleep", exe)
    vmdir = tmp_path / "hugelab-vm-pending"
    vmdir.mkdir()
    (vmdir / "qemu-system-x86_64").symlink_to(exe)  # argv[0] names the tmpdir, as QEMU's args do
    p = subprocess.Popen([str(vmdir / "qemu-system-x86_64"), "300"], start_new_session=True)
    other = subprocess.Popen([str(exe), "300"], start_new_session=True)  # not ours: must live
    try:
        rec = qemurecords.register_pending(tmp_path, vmdir)
        assert rec.name.startswith("pending-qemu-") and (rec.stat().st_mode & 0o777) == 0o600
        data = json.loads(rec.read_text())
        data["owner_pid"], data["owner_starttime"] = 999999999, 1  # the owner died
        rec.write_text(json.dumps(data))
        assert qemurecords._qemus_using(str(vmdir)) == [p.pid]
        assert qemurecords.kill_leftover_qemus(tmp_path) == [p.pid]
        assert p.wait(5) is not None and other.poll() is None
        assert not rec.exists() and not vmdir.exists()
    finally:
        for q in (p, other):
            if q.poll() is None:
                q.kill()
            q.wait()
