"""SIGKILL `hugelab run` while a hugetlbfs-backed guest is up, then `hugelab recover`, then resume.

The killed run leaves a real mess: a QEMU (its own session, so it outlives its parent) holding
2 MiB pages of the host pool through a hugetlbfs file, the pool reserved, hugetlbfs mounted and
THP changed. `hugelab recover` must end that QEMU and put everything back; running the same
experiment again must finish it without duplicate trials, every trial ok. (This is the guest
case of tests/test_kill_safety.py's kill-and-recover matrix.)"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from hugelab.host.paths import REAL, parse_selected
from tests.guestruns import alive, qemus_under
from tests.helpers import HUGELAB
from tests.hostguard import host_state, workload_processes

pytestmark = [pytest.mark.vm, pytest.mark.host, pytest.mark.slow]
BLOCKS = 2

EXPERIMENT = f"""\
name = "vm-recover"
seed = 11
blocks = {BLOCKS}
baseline = "native"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 1.0

[[arms]]
name = "native"
backing = "hugetlb-2M"

[[arms]]
name = "guest-2M"
backing = "4k"
thp = "always"
[arms.vm]
backing = "file"
page_size = "2M"
prealloc = true
mem = "256M"
accel = "tcg"
"""


def pool_2m() -> tuple[int, int]:
    """(nr_hugepages, free_hugepages) of the host's 2 MiB pool."""
    d = REAL.pool_file(2048).parent
    return int((d / "nr_hugepages").read_text()), int((d / "free_hugepages").read_text())


def hugetlbfs_mounts() -> list[str]:
    return [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines()
            if " hugetlbfs " in ln]


def trial_keys(db: Path) -> list[tuple]:
    try:
        with sqlite3.connect(db) as c:
            return [tuple(r) for r in c.execute("SELECT run_id, block, arm, target FROM trials")]
    except sqlite3.OperationalError:
        return []


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before = host_state()
    leftovers: dict[int, str] = {}
    yield tmp_path, before, leftovers
    for pid, start in leftovers.items():  # safety net: only the QEMUs this test saw
        if alive(pid, start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    subprocess.run([*HUGELAB, "recover"], check=False, capture_output=True)
    assert host_state() == before


def kill_with_guest_up(tmp: Path, exp: Path, db: Path, leftovers: dict[int, str]) -> dict[int, str]:
    """Start `hugelab run`, wait until its guest holds host pool pages, SIGKILL hugelab only.
    Returns {pid: starttime} of the guests it had."""
    p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", str(db)], cwd=tmp,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        guests: dict[int, str] = {}
        while time.monotonic() < deadline and p.poll() is None:
            guests = qemus_under(p.pid)
            leftovers.update(guests)
            total, free = pool_2m()
            if guests and total > 0 and free < total:  # QEMU really holds pool pages
                break
            time.sleep(0.05)
        assert guests, f"no guest came up (hugelab exited with {p.poll()})"
        time.sleep(1.0)  # let the guest get on with booting: the kill lands mid-trial
        p.send_signal(signal.SIGKILL)  # hugelab only: its QEMU runs in its own session
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return guests


def assert_mess(state: Path, guests: dict[int, str]) -> list[Path]:
    """The killed run's leftovers are all there; returns the guests' temporary directories."""
    assert all(alive(pid, start) for pid, start in guests.items()), "QEMU died with hugelab"
    total, free = pool_2m()
    assert total >= 128 and free < total, (total, free)
    assert str(state / "hugetlbfs-2M") in hugetlbfs_mounts()
    assert parse_selected(REAL.thp_enabled.read_text()) == "always"
    assert (state / "journal.json").exists()
    records = [json.loads(f.read_text()) for f in state.glob("qemu-*.json")]
    assert {r["pid"] for r in records} == set(guests), (records, guests)
    tmpdirs = [Path(r["tmpdir"]) for r in records]
    assert all(d.is_dir() for d in tmpdirs)
    return tmpdirs


def assert_resumed(r: subprocess.CompletedProcess[str], db: Path, done: int) -> None:
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["resumed"] and out["executed"] == 2 * BLOCKS - done, (out, done)
    keys = trial_keys(db)
    assert len(keys) == len(set(keys)) == 2 * BLOCKS, keys
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT arm, status, provenance FROM trials").fetchall()
    for arm, status, prov in rows:
        assert status == "ok", (arm, status)
        if arm == "guest-2M":
            assert json.loads(prov)["accel"] == "tcg"


def test_sigkill_with_hugetlbfs_guest_up_then_recover_then_resume(env):
    tmp, before, leftovers = env
    exp, db, state = tmp / "exp.toml", tmp / "s.db", tmp / "state"
    exp.write_text(EXPERIMENT)
    procs = workload_processes()
    guests = kill_with_guest_up(tmp, exp, db, leftovers)
    tmpdirs = assert_mess(state, guests)
    done = len(trial_keys(db))
    assert done < 2 * BLOCKS

    r = subprocess.run([*HUGELAB, "recover", "--json"], capture_output=True, text=True, cwd=tmp)
    assert r.returncode == 0, r.stderr
    restored = json.loads(r.stdout)["restored"]
    assert any(f"killed leftover QEMU pid {pid}" in restored for pid in guests), restored
    assert not any(alive(pid, start) for pid, start in guests.items())
    assert not any(d.exists() for d in tmpdirs)  # sockets, serial log, initrd link
    after = host_state()
    assert after == before, (after, before)  # pools (2M and 1G), THP, no hugetlbfs mount
    assert str(state / "hugetlbfs-2M") not in hugetlbfs_mounts()
    assert not (state / "journal.json").exists() and not list(state.glob("qemu-*.json"))
    assert workload_processes() == procs

    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(db), "--json"],
                       capture_output=True, text=True, cwd=tmp)
    assert_resumed(r, db, done)
    assert host_state() == before and workload_processes() == procs


def test_sigkill_with_guest_up_then_run_again_cleans_up_first(env):
    """No `recover` in between: the next `hugelab run` ends the leftover QEMU and replays the
    stale journal before it changes anything, then finishes the run."""
    tmp, before, leftovers = env
    exp, db, state = tmp / "exp.toml", tmp / "s.db", tmp / "state"
    exp.write_text(EXPERIMENT)
    guests = kill_with_guest_up(tmp, exp, db, leftovers)
    tmpdirs = assert_mess(state, guests)
    done = len(trial_keys(db))

    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(db), "--json"],
                       capture_output=True, text=True, cwd=tmp)
    assert not any(alive(pid, start) for pid, start in guests.items())
    assert_resumed(r, db, done)
    assert not any(d.exists() for d in tmpdirs)
    assert host_state() == before
    assert not (state / "journal.json").exists() and not list(state.glob("qemu-*.json"))
