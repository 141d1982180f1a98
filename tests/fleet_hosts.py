"""Test hosts for `hugelab fleet`: independent sshd servers on this machine's loopback.

Each "host" is its own `sshd -D -e -f CONFIG` child process listening on 127.0.0.1 on a port of
its own, with its own host key and config in a temporary directory, root login with one
generated ed25519 key only (no passwords, no PAM), and stopped at teardown. Ansible reaches them
exactly as it reaches real machines: over SSH, as root, with a private key.

Why SSH servers on this machine rather than guests: guests here boot under TCG (no usable
hardware virtualization on this machine, or none we can count on in CI), which makes every
Ansible task a slow emulated round trip, and they have no network to install packages
(`./bootstrap setup` needs Debian's archive and PyPI). An sshd on loopback gives the playbook
the real thing it depends on - an SSH connection, a remote Python, a separate install root - in
milliseconds.

What they share, because they share one kernel: huge-page pools, THP modes and hugelab's host
lock. So the inventory gives every host the same `hugelab_state_dir` (hugelab's
`HUGELAB_STATE_DIR`, where its lock and journal live), and two "hosts" running at once take
turns on the kernel the way two hugelabs on one real machine would.

Install roots: each host gets its own `hugelab_root` under `/var/cache/hugelab/fleet-test/NAME`
(outside the temporary directory, on purpose): the playbook's `./bootstrap setup` creates a
virtual environment there, which takes a minute or two the first time (pip installs numpy,
scipy, ansible...) and a second afterwards (bootstrap's stamp file), so later test sessions on
the same machine stay fast. Delete that directory to test a cold install.

Only loopback addresses are ever used; nothing here reaches another machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.hostguard import clear_stale_pyenv_lock

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "/usr/bin/ssh-keygen"
ADDRESS = "127.0.0.1"
CACHE_ROOT = Path("/var/cache/hugelab/fleet-test")
START_TIMEOUT_S = 10.0

SSHD_CONFIG = """\
# a test sshd for hugelab's fleet tests: loopback only, root by key only
Port {port}
ListenAddress {address}
HostKey {host_key}
PidFile none
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# the key files live in a temporary directory, not under root's home
StrictModes no
PrintMotd no
X11Forwarding no
AllowTcpForwarding no
MaxSessions 64
MaxStartups 64
LogLevel ERROR
# root's ~/.bashrc here runs `pyenv rehash`, which waits 60 s for a lock that a session these
# tests kill mid-rehash leaves behind: then every later SSH command of the fleet waits 60 s
# (the fleet kill tests failed that way). A session gives up on that lock at once.
SetEnv PYENV_REHASH_TIMEOUT=0
Subsystem sftp /usr/lib/openssh/sftp-server
"""


@dataclass
class SshHost:
    """One test host: an sshd child process and where its hugelab is installed."""

    name: str
    port: int
    root: Path  # hugelab_root on that "host"
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return ADDRESS


def free_port(address: str = ADDRESS) -> int:
    """A TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _wait_banner(port: int, proc: subprocess.Popen[bytes], log: Path,
                 timeout: float = START_TIMEOUT_S) -> None:
    """Until the sshd on `port` sends its SSH banner; an error with its log if it died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd on port {port} exited ({proc.returncode}): "
                               f"{log.read_text(errors='replace').strip()}")
        try:
            with socket.create_connection((ADDRESS, port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd on port {port} did not answer within {timeout:.0f} s")


@dataclass
class SshFleet:
    """N sshd servers on loopback with one client key; a context manager (stops them all).

    `workdir`: a private temporary directory for keys, configs and logs. `state_dir`: the
    hugelab state directory every host shares (one kernel, one lock).
    """

    workdir: Path
    names: Sequence[str] = ("alpha", "beta")
    state_dir: Path | None = None
    cache_root: Path = CACHE_ROOT
    hosts: list[SshHost] = field(default_factory=list)

    @property
    def client_key(self) -> Path:
        return self.workdir / "id_ed25519"

    def __enter__(self) -> SshFleet:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        clear_stale_pyenv_lock()  # a session killed mid-rehash leaves it (see hostguard)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.workdir, 0o700)
        _keygen(self.client_key, "hugelab-fleet-test")
        authorized = self.workdir / "authorized_keys"
        shutil.copyfile(self.client_key.with_suffix(".pub"), authorized)
        os.chmod(authorized, 0o600)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        clear_stale_pyenv_lock()
        for name in self.names:
            self.hosts.append(self._start_one(name, authorized))

    def _start_one(self, name: str, authorized: Path) -> SshHost:
        d = self.workdir / name
        d.mkdir(mode=0o700, exist_ok=True)
        host_key = d / "ssh_host_ed25519_key"
        _keygen(host_key, f"hugelab-fleet-test-{name}")
        port = free_port()
        config = d / "sshd_config"
        config.write_text(SSHD_CONFIG.format(port=port, address=ADDRESS, host_key=host_key,
                                             authorized_keys=authorized))
        subprocess.run([SSHD, "-t", "-f", str(config)], check=True, capture_output=True)
        host = SshHost(name, port, self.cache_root / name, config, d / "sshd.log")
        with host.log.open("wb") as log:
            # setpriv: sshd dies with this process even when a test session is killed
            host.process = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", SSHD,
                                             "-D", "-e", "-f", str(config)],
                                            stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT)
        _wait_banner(port, host.process, host.log)
        return host

    def host(self, name: str) -> SshHost:
        return next(h for h in self.hosts if h.name == name)

    def cut(self, name: str) -> list[int]:
        """The host drops off: its sshd and every SSH session it serves end (their pids), so
        a client's open connection breaks too. What its sessions started in the background
        (an Ansible async job: its own session, reparented) goes on, as on a real host."""
        host = self.host(name)
        proc = host.process
        if proc is None or proc.poll() is not None:
            return []
        sessions = _descendants(proc.pid)
        proc.kill()
        proc.wait()
        for pid in sessions:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return [proc.pid, *sessions]

    def restore(self, name: str) -> None:
        """The host is back: its sshd again, on the same port with the same keys. Call it
        from the main thread (the server dies with the thread that started it)."""
        host = self.host(name)
        with host.log.open("ab") as log:
            host.process = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", SSHD,
                                             "-D", "-e", "-f", str(host.config)],
                                            stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT)
        _wait_banner(host.port, host.process, host.log)

    def stop(self) -> None:
        for host in self.hosts:
            proc = host.process
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def host_vars(self, host: SshHost) -> dict[str, str]:
        """The inventory variables of one host."""
        out = {
            "ansible_host": host.address,
            "ansible_port": str(host.port),
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.client_key),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                                       "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
            "ansible_python_interpreter": "/usr/bin/python3",
            "hugelab_root": str(host.root),
            # runs, experiment files and each host's own SQLite store: fresh for every fleet
            "hugelab_workdir": str(self.workdir / host.name / "work"),
            # the run's async job polled every second (the role's default: 5 s): a run's end,
            # its failure or a lost host is seen sooner; what is polled and reported is the same
            "hugelab_poll_s": "1",
        }
        if self.state_dir is not None:
            out["hugelab_state_dir"] = str(self.state_dir)
        return out

    def inventory(self, path: Path, *, unreachable: Sequence[str] = (),
                  hostvars: Mapping[str, Mapping[str, str]] | None = None) -> Path:
        """An INI inventory of the hosts (group `fleet`), with more variables per host from
        `hostvars`, plus hosts named in `unreachable` pointed at a closed port of 127.0.0.1."""
        lines = ["[fleet]"]
        for host in self.hosts:
            more = dict((hostvars or {}).get(host.name, {}))
            lines.append(_ini_line(host.name, {**self.host_vars(host), **more}))
        for name in unreachable:
            ghost = SshHost(name, closed_port(), self.cache_root / name, Path(), Path())
            lines.append(_ini_line(name, {**self.host_vars(ghost),
                                          "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                                          "-o UserKnownHostsFile=/dev/null -o ConnectTimeout=3"}))
        path.write_text("\n".join(lines) + "\n")
        return path


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first), from /proc's children lists."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            kids = [int(k) for k in Path(f"/proc/{parent}/task/{parent}/children")
                    .read_text().split()]
        except OSError:
            continue
        out += kids
        todo += kids
    return out


def closed_port() -> int:
    """A loopback port nothing listens on (picked, then released: connections are refused)."""
    return free_port()


def _ini_line(name: str, hostvars: dict[str, str]) -> str:
    parts = [name]
    for key, value in hostvars.items():
        parts.append(f"{key}='{value}'" if " " in value else f"{key}={value}")
    return " ".join(parts)


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)
