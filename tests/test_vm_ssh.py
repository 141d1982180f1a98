"""The SSH way into a user's guest (hugelab.vm.domains.ssh), against a real OpenSSH server on
127.0.0.1 started by the fixture: programs run with their arguments intact (no shell
injection), the process tree is sampled, files round-trip, a missing program names its
package, a timeout kills the remote program, and a closed target leaves no master connection.
The guest end to end (a libvirt domain reached over SSH) is in test_vm_user_domain."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hugelab.errors import CommandError, ToolMissingError
from hugelab.vm.domains.ssh import Ssh, SshError, SshTarget, known_hosts_line, remove_dead_dirs
from hugelab.workloads.serverside import free_port
from tests.helpers import cmdlines
from tests.hostguard import clear_stale_pyenv_lock

pytestmark = [pytest.mark.server, pytest.mark.beside]  # sshd servers

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1: (its port, the directory of its host and client keys)."""
    if not os.path.exists(SSHD):
        pytest.fail("sshd is missing: apt-get install openssh-server (./bootstrap setup)")
    d = tmp_path_factory.mktemp("sshd")
    os.chmod(d, 0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                       check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    port = free_port()
    os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
    clear_stale_pyenv_lock()
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", "/dev/null", "-p", str(port),
                             "-h", str(d / "host"), "-o", "ListenAddress=127.0.0.1",
                             "-o", f"AuthorizedKeysFile={d}/authorized_keys",
                             "-o", "StrictModes=no", "-o", "PidFile=none",
                             "-o", "PasswordAuthentication=no", "-o", "UsePAM=no",
                             # a pyenv lock left by a killed session must not stall each
                             # login 60 s (see tests/fleet_hosts.py)
                             "-o", "SetEnv=PYENV_REHASH_TIMEOUT=0"],
                            stderr=subprocess.PIPE)
    try:  # a server that never answers is stopped too (it outlived a failed run once)
        probe = Ssh(port, user=getpass.getuser(), key=str(d / "client"))
        deadline = time.monotonic() + 20
        while (why := probe.ready()) is not None:
            assert proc.poll() is None, \
                proc.stderr.read().decode() if proc.stderr else "sshd died"
            assert time.monotonic() < deadline, why
            time.sleep(0.2)
        probe.close()
        yield port, d
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def server(sshd):
    port, d = sshd
    ssh = Ssh(port, user=getpass.getuser(), key=str(d / "client"))
    yield ssh
    ssh.close()


@pytest.fixture
def target(server):
    return SshTarget(server, "vm0", slack_s=1.0)


def test_arguments_arrive_intact_and_the_tree_is_sampled(target, tmp_path):
    marker = tmp_path / "not-created"
    weird = f"a b; touch {marker}; $(id) 'q' \"d\" \\ *"
    r = target.exec([sys.executable, "-c", "import sys, time; time.sleep(1.5); "
                     "print(sys.argv[1])", weird])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == weird and not marker.exists()  # no shell ever saw it
    assert 1.4 < r.wall_s < 10
    tree = target.tree()
    assert tree.get("samples", 0) >= 1 and tree.get("processes", 0) >= 1, tree


def test_files_round_trip_and_exit_codes(target, tmp_path):
    path = tmp_path / "x y.txt"
    target.write_file(str(path), "hello\n")
    assert path.read_text() == "hello\n" and target.read_file(str(path)) == "hello\n"
    assert target.read(str(tmp_path / "missing")) is None
    assert target.exec(["sh", "-c", "exit 7"]).returncode == 7


def test_a_missing_program_names_its_package(target):
    with pytest.raises(ToolMissingError, match="sysbench") as e:
        target.exec(["no-such-sysbench"])
    assert "in the guest vm0" in (e.value.hint or "")


def _running(marker: str) -> list[str]:
    """Processes on this machine (the "remote" end is 127.0.0.1) whose command line names
    `marker`, read from /proc: the kernel's own account, not the SSH client's."""
    return [f"{pid}: {cmd}" for pid, cmd in cmdlines().items() if marker in cmd]


def test_a_timeout_kills_the_remote_program(target, tmp_path):
    """The call returns at its timeout, not when the program ends (it would sleep 120 s), and
    the remote program's whole group is gone from the process table soon after, not only ssh.
    No bound on how soon beyond that: a loaded host takes seconds (speed is for bench/)."""
    flag = tmp_path / "still-running"
    sleep = f"sleep 120.{os.getpid()}"  # the child's own command line, unique to this test
    t0 = time.monotonic()
    with pytest.raises(CommandError, match="timed out"):
        target.exec(["sh", "-c", f"{sleep}; touch {flag}"], timeout=0.5)
    assert time.monotonic() - t0 < 60  # it did not wait for the program
    deadline = time.monotonic() + 30
    while (left := _running(str(flag)) + _running(sleep)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, left
    assert not flag.exists()


def test_hugelab_mem_is_copied_in_once(target, tmp_path, monkeypatch):
    tool = tmp_path / "hugelab-mem"
    tool.write_text("#!/bin/sh\necho copied \"$@\"\n")
    tool.chmod(0o755)
    r = target.exec([str(tool), "x"])
    assert r.stdout.strip() == "copied x" and target.copied[str(tool)] == "/tmp/hugelab-mem"
    try:  # the "guest" is this host: its /tmp/hugelab-mem is the copy
        assert Path("/tmp/hugelab-mem").read_text() == tool.read_text()
    finally:
        Path("/tmp/hugelab-mem").unlink(missing_ok=True)


def test_auto_adds_the_ssh_nic_only_when_the_arm_names_a_key():
    """A domain that worked through its agent is not changed by access = "auto" (the default):
    no extra NIC unless the arm says how to get in over SSH."""
    from hugelab.vm.domains.libvirt_guest import Access
    assert not Access("auto").ssh and not Access("agent", ssh_key="/k").ssh
    assert Access("auto", ssh_key="/root/.ssh/id_ed25519").ssh and Access("ssh").ssh


def test_recover_removes_a_killed_hugelabs_ssh_dirs_and_keeps_live_ones(server, tmp_path):
    """A hugelab SIGKILLed with a master connection open leaves its hugelab-ssh-* directory
    (known_hosts, the master's socket) and the master itself: recover removes both; a live
    hugelab's directory (the fixture's) stays, and so does an unowned one still young."""
    code = ("import sys, time; from hugelab.vm.domains.ssh import Ssh; "
            "s = Ssh(int(sys.argv[1]), user=sys.argv[2], key=sys.argv[3]); "
            "assert s.ready() is None; print(s.dir, flush=True); time.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code, str(server.port), server.user,
                              str(server.key)], stdout=subprocess.PIPE, text=True)
    try:
        dead = Path(child.stdout.readline().strip())
    finally:
        child.kill()
        child.wait()
    assert (dead / "master").exists()
    assert subprocess.run(["pgrep", "-f", f"{dead}/master"]).returncode == 0  # it outlives
    young = Path(tempfile.mkdtemp(prefix="hugelab-ssh-"))  # no owner file yet
    try:
        removed = remove_dead_dirs()
        assert str(dead) in removed and not dead.exists()
        assert str(young) not in removed and young.exists()
        assert Path(server.dir).exists() and server.ready() is None  # live: kept
        masters = subprocess.run(["pgrep", "-f", f"{dead}/master"], capture_output=True)
        assert masters.returncode == 1, "the dead hugelab's master connection still runs"
        assert str(young) in remove_dead_dirs(now=time.time() + 3600)  # old and unowned
    finally:
        shutil.rmtree(young, ignore_errors=True)


def test_a_pinned_host_key_is_the_only_one_trusted(sshd, tmp_path):
    """A domain that pins its host key (the demo image's, from its build) is reached with
    that key in known_hosts and strict checking; a guest showing another key is refused at
    once, with the reason, and nothing is learnt."""
    port, d = sshd
    user, key = getpass.getuser(), str(d / "client")
    pinned = (d / "host.pub").read_text()
    good = Ssh(port, user=user, key=key, host_key=pinned)
    try:
        assert "StrictHostKeyChecking=yes" in good.options()
        known = Path(good.dir, "known_hosts")
        assert known.read_text() == f"[127.0.0.1]:{port} {' '.join(pinned.split()[:2])}\n"
        assert good.ready() is None
        assert good.run(["true"]).returncode == 0
    finally:
        good.close()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
                   check=True)
    other = (tmp_path / "other.pub").read_text()
    bad = Ssh(port, user=user, key=key, host_key=other)
    try:
        with pytest.raises(SshError, match="another SSH host key than the one its domain pins"):
            bad.ready()
        assert Path(bad.dir, "known_hosts").read_text().split()[2] == other.split()[1]
    finally:
        bad.close()
    unpinned = Ssh(port, user=user, key=key)
    try:
        assert "StrictHostKeyChecking=accept-new" in unpinned.options()
        assert not Path(unpinned.dir, "known_hosts").exists()
    finally:
        unpinned.close()


def test_known_hosts_line_brackets_only_other_ports():
    assert known_hosts_line("127.0.0.1", 2222, "ssh-ed25519 AAAA c") == \
        "[127.0.0.1]:2222 ssh-ed25519 AAAA\n"
    assert known_hosts_line("h", 22, "ssh-ed25519 AAAA") == "h ssh-ed25519 AAAA\n"


def test_a_boot_probe_to_a_port_that_never_greets_gives_up_at_its_own_short_timeout():
    """Before a guest's network is up, QEMU's user networking accepts the host's connection and
    never greets (no banner): a boot's probe waits PROBE_CONNECT_S for it, every other command
    CONNECT_S (what ssh says it waited for is the reference)."""
    import socket

    from hugelab.vm.domains import ssh as sshmod
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)  # accepted by the kernel, never answered
        conn = Ssh(mute.getsockname()[1])
        try:
            why = conn.ready()
            assert why is not None and "banner exchange" in why, why
            probe = conn.argv(["true"], sshmod.PROBE_CONNECT_S)
            assert f"ConnectTimeout={sshmod.PROBE_CONNECT_S}" in probe
            assert f"ConnectTimeout={sshmod.CONNECT_S}" in conn.argv(["true"])
            assert sshmod.PROBE_CONNECT_S < sshmod.CONNECT_S
        finally:
            conn.close()
