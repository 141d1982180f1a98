"""Containment of a native trial's process tree, for real: new sessions, the trial token,
tree sampling, killing at the end of a trial and after the owner died (recover)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hugelab import identity
from hugelab.errors import HostError, ToolMissingError
from hugelab.proc import spawn
from hugelab.trial import contain
from hugelab.trial.contain import TrialScope
from hugelab.trial.procscan import (
    find_members,
    hugetlb_by_page_size,
    merge_peak,
    parse_kb_fields,
    pool_use,
    stat_fields,
)

# A child that allocates and touches 64 MiB, then forks a daemon that leaves the session.
ALLOC = textwrap.dedent("""
    import os, sys, time
    buf = bytearray(64 << 20)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    if os.fork() == 0:
        os.setsid()
        time.sleep(120)
        os._exit(0)
    time.sleep(float(sys.argv[1]))
""")


@pytest.fixture
def state(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(d))
    return d


def alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return False


def test_parsers():
    assert parse_kb_fields("Rss:   10 kB\nAnonHugePages:  2048 kB\nbad line\n") == \
        {"Rss": 10, "AnonHugePages": 2048}
    smaps = ("7f00-7f20 rw-s 0 00:0f 1 /SYSV00000000 (deleted)\nKernelPageSize:  2048 kB\n"
             "Shared_Hugetlb:   4096 kB\nPrivate_Hugetlb:  0 kB\n"
             "7f30-7f40 rw-p 0 00:00 0\nKernelPageSize:  4 kB\nPrivate_Hugetlb:  0 kB\n")
    assert hugetlb_by_page_size(smaps) == {2048: 4096}
    assert merge_peak({"a": 1, "h": {2048: 5}}, {"a": 3, "h": {2048: 2, 4: 1}}) == \
        {"a": 3, "h": {2048: 5, 4: 1}}
    before = {"2048": (10, 0), "1048576": (2, 0)}
    assert pool_use(before, {"2048": (7, 0), "1048576": (2, 1), "64": (1, 0)}) == \
        {"2048": 3, "1048576": 1}
    ppid, pgrp, sid, start = stat_fields(Path("/proc/self/stat").read_text())
    assert ppid == os.getppid() and sid == os.getsid(0) and start > 0


def test_scope_samples_the_whole_tree_and_kills_what_outlives_it(state):
    with TrialScope("test") as scope:
        p = spawn([sys.executable, "-c", ALLOC, "1.0"], stdout=subprocess.PIPE, text=True)
        assert os.getsid(p.pid) == p.pid  # a session of its own
        deadline = time.monotonic() + 5  # /proc/PID/environ is empty until the child execs
        while not (raw := Path(f"/proc/{p.pid}/environ").read_bytes()) and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        env = raw.split(b"\0")
        assert f"HUGELAB_TRIAL={scope.token}".encode() in env
        assert f"TMPDIR={scope.scratch}".encode() in env and Path(scope.scratch).is_dir()
        record = json.loads((state / f"workload-{scope.token}.json").read_text())
        assert [sid for sid, _start in record["sessions"]] == [p.pid]
        assert record["owner_pid"] == os.getpid() and record["boot_id"] == identity.boot_id()
        assert (state / f"workload-{scope.token}.json").stat().st_mode & 0o777 == 0o600
        p.wait()
        time.sleep(0.3)
        daemons = find_members([], scope.token, since=scope.since)
        assert daemons, "the setsid() daemon carries the token"
        assert all(os.getsid(d) != p.pid for d in daemons)
    assert scope.leftovers_killed >= 1
    assert not any(alive(d) for d in daemons)
    assert scope.tree["samples"] >= 2 and scope.tree["anon_kb"] >= 60 << 10
    assert not Path(scope.scratch).exists()
    assert not list(state.glob("workload-*.json"))


def test_one_token_name_on_both_sides():
    from hugelab import proc
    from hugelab.trial import procscan

    assert proc.TOKEN_VAR == procscan.TOKEN_VAR  # procscan is stdlib-only: it keeps its own


def test_spawn_outside_a_scope_and_missing_tools():
    p = spawn(["true"])
    assert p.wait() == 0
    with pytest.raises(ToolMissingError):
        spawn(["no-such-tool-hugelab"])


# The owner: a python that opens a scope, starts `sh -c 'sleep 300 & wait'` and dies by SIGKILL.
OWNER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from hugelab.proc import spawn
    from hugelab.trial.contain import TrialScope
    with TrialScope("killed owner") as scope:
        open(os.path.join(scope.scratch, "file"), "w").write("x")
        spawn(["sh", "-c", "sleep 300 & wait"], stdout=subprocess.DEVNULL,
              stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        print(scope.scratch, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
""")


def test_leftovers_of_a_killed_owner_are_killed_and_removed(state):
    r = subprocess.run([sys.executable, "-c", OWNER], capture_output=True, text=True,
                       env={**os.environ, "HUGELAB_STATE_DIR": str(state)})
    assert r.returncode == -signal.SIGKILL
    scratch = Path(r.stdout.strip())
    assert scratch.is_dir() and list(state.glob("workload-*.json"))
    left = contain.alive_leftovers(state)
    assert left, "the sleep outlived its owner (setpriv's parent-death signal ends only sh)"
    done = contain.kill_leftover_workloads(state)
    assert any("killed" in d for d in done)
    # the dead owner's scratch is in /dev/shm, where any hugelab running beside this test (the
    # suite's machine lane) removes a dead hugelab's scratch too (remove_dead_scratch): then
    # this call finds it gone and says nothing of it
    assert any("removed" in d for d in done) or not scratch.exists()
    time.sleep(0.1)
    assert not any(alive(pid) for pid in left)
    assert not scratch.exists() and not list(state.glob("workload-*.json"))
    contain.refuse_if_leftovers(state)  # nothing left: no error


def test_refuses_when_a_leftover_cannot_be_killed(state, monkeypatch):
    monkeypatch.setattr(contain, "alive_leftovers", lambda st=None: [4242])
    with pytest.raises(HostError, match="still alive"):
        contain.refuse_if_leftovers(state)


def test_records_of_another_boot_or_a_reused_session_kill_nothing(state):
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        token = "0" * 32
        rec = {"token": token, "owner_pid": 1, "owner_starttime": -1, "since": 0,
               "boot_id": "another-boot", "sessions": [[sleeper.pid, None]], "scratch": None}
        state.mkdir()
        path = state / f"workload-{token}.json"
        path.write_text(json.dumps(rec))
        assert contain.kill_leftover_workloads(state) == [] and alive(sleeper.pid)
        assert not path.exists()  # nothing of another boot can still run
        # this boot, but the session's number now belongs to another process (a reused pid)
        assert find_members({sleeper.pid: 12345}) == []
        assert find_members({sleeper.pid: identity.starttime(sleeper.pid)}) == [sleeper.pid]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_zombies_are_not_members():
    p = subprocess.Popen(["true"], start_new_session=True)
    time.sleep(0.3)  # exited, not yet reaped: a zombie
    assert find_members([p.pid]) == []
    p.wait()


@pytest.mark.slow
def test_a_background_child_holding_the_pipe_does_not_hang_the_trial(state):
    from hugelab.trial.native import READ_AFTER_EXIT_S, NativeTarget

    with TrialScope("pipe") as scope:
        t0 = time.monotonic()
        res = NativeTarget().exec(["sh", "-c", "sleep 60 & echo started"])
        assert time.monotonic() - t0 < READ_AFTER_EXIT_S + 3
        assert res.returncode == 0 and res.stdout.strip() == "started"
    assert scope.leftovers_killed == 1  # the sleep, killed with the trial


def test_members_while_a_session_is_added_reads_a_copy(state, monkeypatch):
    """The tree sampler's thread lists members while the trial's thread adds a spawned session
    (a Redis trial once died of "dictionary changed size during iteration"): here the addition
    happens in the middle of the listing, the way the two threads interleaved."""
    from hugelab.trial import procscan

    scope = TrialScope("race", state=state)
    scope.sessions[os.getpid()] = None
    real = procscan._live_stat
    added: list[int] = []

    def live_stat(pid, proc):
        if not added:
            added.append(os.getppid())
            scope.sessions[os.getppid()] = None  # what add_session does, mid-iteration
        return real(pid, proc)

    monkeypatch.setattr(procscan, "_live_stat", live_stat)
    assert os.getpid() not in scope.members()  # this process is never its own member
    assert added and os.getppid() in scope.sessions


def test_scratch_of_a_dead_owner_is_removed_whichever_state_directory_recovers(tmp_path):
    """A killed run recovered with another state directory (none of its records): its scratch
    directory is still found, by the owner record written into it."""
    from hugelab import owned
    shm = tmp_path / "shm"
    shm.mkdir()
    with TrialScope("t", state=tmp_path / "state") as scope:
        live = Path(scope.scratch)
        assert owned.owner_record(live)["owner_pid"] == os.getpid()
        assert live not in owned.dead_claimed(live.parent, contain.SCRATCH_PREFIX)  # alive
    dead = shm / f"{contain.SCRATCH_PREFIX}dead"
    dead.mkdir()
    (dead / owned.OWNER_FILE).write_text(json.dumps({**identity.record(),
                                                     "owner_pid": 2 ** 22 + 1}))
    (dead / "left.o").write_bytes(b"x")
    unknown = shm / f"{contain.SCRATCH_PREFIX}unknown"  # no record: whose, nobody can tell
    unknown.mkdir()
    other = shm / "hugelab-other"
    other.mkdir()
    (other / owned.OWNER_FILE).write_text((dead / owned.OWNER_FILE).read_text())
    (unknown / "data").write_bytes(b"y")
    fresh_empty = shm / f"{contain.SCRATCH_PREFIX}making"  # as a live scope's, before its claim
    fresh_empty.mkdir()
    assert contain.remove_dead_scratch((str(shm),)) == [f"removed {dead}"]
    assert not dead.exists() and unknown.is_dir() and other.is_dir() and fresh_empty.is_dir()
    assert not live.exists()  # the scope removed its own at its end


def test_an_empty_scratch_directory_a_kill_left_is_removed_once_it_is_a_minute_old(tmp_path):
    """A run killed between making its scratch directory and claiming it, or while removing it
    (its record already gone), leaves it empty: no owner can be read, yet it is a dead run's
    once nothing has changed in it for a minute. One with anything in it is left alone."""
    shm = tmp_path / "shm"
    shm.mkdir()
    old = time.time() - contain.EMPTY_SCRATCH_AGE_S - 5
    emptied = shm / f"{contain.SCRATCH_PREFIX}emptied"
    emptied.mkdir()
    full = shm / f"{contain.SCRATCH_PREFIX}full"
    full.mkdir()
    (full / "data").write_bytes(b"z")
    young = shm / f"{contain.SCRATCH_PREFIX}young"
    young.mkdir()
    foreign = shm / "hugelab-other-empty"
    foreign.mkdir()
    for d in (emptied, full, foreign):
        os.utime(d, (old, old))
    assert contain.remove_dead_scratch((str(shm),)) == [f"removed {emptied} (empty)"]
    assert not emptied.exists() and full.is_dir() and young.is_dir() and foreign.is_dir()
    os.utime(young, (old, old))
    assert contain.remove_dead_scratch((str(shm),)) == [f"removed {young} (empty)"]


def test_a_quiet_phase_is_sampled_at_its_edges_and_never_inside(tmp_path):
    """`proc.quiet()` inside a trial: one sample as it begins and one as it ends, none while it
    lasts (a request-level trial's timed windows), and the paused time in the evidence."""
    from hugelab import proc
    child = None
    with TrialScope("edges", state=tmp_path, sample_interval_s=1000) as scope:
        child = spawn(["sleep", "5"])
        sampler = scope._sampler
        assert sampler is not None
        time.sleep(0.3)
        assert sampler.samples == 1  # the thread's first look, then none for 1000 s
        with proc.quiet():
            assert sampler.samples == 2
        assert sampler.samples == 3
        child.kill()
    with TrialScope("inside", state=tmp_path, sample_interval_s=0.02) as scope:
        child = spawn(["sleep", "5"])
        sampler = scope._sampler
        assert sampler is not None
        time.sleep(0.2)
        assert sampler.samples >= 2  # sampling runs outside a quiet phase
        with proc.quiet():
            inside = sampler.samples
            time.sleep(0.4)  # twenty intervals
            assert sampler.samples == inside
        time.sleep(0.2)
        assert sampler.samples >= inside + 3  # and runs again after it
        child.kill()
    assert 0.4 <= scope.tree["paused_s"] < 2
    with proc.quiet():  # outside any trial: nothing to hold off, nothing fails
        pass
