"""A user's guest reached over SSH, for guests without qemu-guest-agent.

hugelab adds a NIC of its own to the transient copy whose only way in is a 127.0.0.1 port
forward to the guest's SSH port (see hugelab.vm.domains.domain._ssh_nic), and talks to it with OpenSSH's
client: argv lists, never a local shell; the remote command is one string for the guest user's
shell, every word quoted with shlex. One master connection per copy (ControlMaster) keeps each
round trip cheap. A domain that pins its host key (hugelab's demo domains pin their image's,
made by that image's build: see hugelab.vm.domains.image) is trusted with that key only: it is
written to the connection's known_hosts and ssh checks it strictly, so a guest showing another
key is refused at once. Otherwise the copy's host key is accepted on first contact into a
known_hosts file of the copy's own: it is the copy hugelab just started, reached through its
own loopback forward.
Authentication is ssh's: `key` (a private key file) or ssh's defaults (~/.ssh, ssh-agent);
hugelab never handles a password (BatchMode).

A user other than root runs the workload as itself and writes guest settings (/sys) through
`sudo -n`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from hugelab.errors import CommandError, ToolMissingError, VMError
from hugelab.identity import alive, boot_id, starttime
from hugelab.proc import package_of, run_bytes, start, which
from hugelab.vm.domains.remote import RemoteTarget
from hugelab.workloads.base import ExecResult

ROUND_TRIP_S = 30.0  # one small command (cat, kill, command -v)
CONNECT_S = 5
# a boot's probe: one made before the guest's network is up hangs until this (slirp holds the
# host's side open), so it is short, or the copy's first answer comes seconds after its sshd's
PROBE_CONNECT_S = 2
DIR_PREFIX = "hugelab-ssh-"
OWNER = "owner"  # in each directory: "PID STARTTIME BOOT_ID" of the hugelab that made it
UNOWNED_GRACE_S = 600  # a directory without an owner file (just made, or by an older hugelab)


class SshError(VMError):
    """The guest cannot be reached over SSH, or refused a command."""


class Ssh:
    """Connection settings and the master connection of one copy (context: `close`)."""

    def __init__(self, port: int, *, user: str = "root", key: str | None = None,
                 host: str = "127.0.0.1", host_key: str | None = None) -> None:
        self.port = port
        self.user = user
        self.key = key
        self.host = host
        self.host_key = host_key.strip() if host_key else None
        self.dir = tempfile.mkdtemp(prefix=DIR_PREFIX)  # 0700: known_hosts, the master
        pid = os.getpid()
        Path(self.dir, OWNER).write_text(f"{pid} {starttime(pid)} {boot_id()}\n")  # for recover
        self.ssh = which("ssh")
        if self.host_key:
            with open(f"{self.dir}/known_hosts", "w", encoding="ascii") as f:
                f.write(known_hosts_line(host, port, self.host_key))

    def options(self, connect_s: int = CONNECT_S) -> list[str]:
        opts = {"BatchMode": "yes",
                "StrictHostKeyChecking": "yes" if self.host_key else "accept-new",
                "UserKnownHostsFile": f"{self.dir}/known_hosts", "GlobalKnownHostsFile":
                "/dev/null", "ControlMaster": "auto", "ControlPath": f"{self.dir}/master",
                "ControlPersist": "60", "ConnectTimeout": str(connect_s), "LogLevel": "ERROR",
                "ServerAliveInterval": "15"}
        if self.key:
            opts["IdentitiesOnly"] = "yes"
        out = ["-p", str(self.port), "-T"]
        for k, v in opts.items():
            out += ["-o", f"{k}={v}"]
        if self.key:
            out += ["-i", self.key]
        return out

    def argv(self, remote: list[str], connect_s: int = CONNECT_S) -> list[str]:
        """ssh's argv running `remote` (argv in the guest) as one quoted command string."""
        return [self.ssh, *self.options(connect_s), f"{self.user}@{self.host}", "--",
                shlex.join(remote)]

    def run(self, remote: list[str], *, data: bytes | None = None,
            timeout: float = ROUND_TRIP_S, connect_s: int = CONNECT_S
            ) -> subprocess.CompletedProcess[bytes]:
        try:
            return run_bytes(self.argv(remote, connect_s), input=data, check=False,
                             timeout=timeout)
        except CommandError as exc:  # without check, only a timeout
            raise SshError(f"ssh {self.user}@{self.host}:{self.port}: "
                           f"{shlex.join(remote[:2])} did not end within {timeout:.0f}s") from exc

    def ready(self) -> str | None:
        """None when the guest's SSH server lets us in, else why not (ssh's last words)."""
        try:
            cp = self.run(["true"], timeout=CONNECT_S * 3, connect_s=PROBE_CONNECT_S)
        except SshError as exc:
            return exc.message
        if cp.returncode == 0:
            return None
        said = cp.stderr.decode(errors="replace")
        if self.host_key and "Host key verification failed" in said:
            raise SshError(f"the guest at {self.host}:{self.port} shows another SSH host key "
                           f"than the one its domain pins ({self.host_key[:40]}...)",
                           hint="the domain's disk is not of the image its metadata names: "
                           "define it again (hugelab vm demo-domain)")
        lines = said.strip().splitlines()
        return lines[-1] if lines else f"ssh exited {cp.returncode}"

    def close(self) -> None:
        if os.path.exists(f"{self.dir}/master"):
            with contextlib.suppress(CommandError):  # a master that does not answer: ends idle
                run_bytes([self.ssh, *self.options(), "-O", "exit", f"{self.user}@{self.host}"],
                          check=False, timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def remove_dead_dirs(top: Path | None = None, now: float | None = None) -> list[str]:
    """`hugelab recover`: the directories (`hugelab-ssh-*` in the temporary directory `top`)
    of SSH connections whose hugelab is gone - killed before it closed them - with their
    master connection stopped; what was removed. A live hugelab's are left alone."""
    top = Path(tempfile.gettempdir()) if top is None else top
    now = time.time() if now is None else now
    out = []
    for d in sorted(top.glob(f"{DIR_PREFIX}*")):
        if d.is_symlink() or not d.is_dir() or not _dead(d, now):
            continue
        if (d / "master").exists():  # a ControlPersist master outlives its hugelab a while
            with contextlib.suppress(CommandError):
                run_bytes([which("ssh"), "-o", f"ControlPath={d}/master", "-O", "exit",
                           "hugelab-leftover"], check=False, timeout=10)
        shutil.rmtree(d, ignore_errors=True)
        out.append(str(d))
    return out


def _dead(d: Path, now: float) -> bool:
    try:
        pid, start, *boot = (d / OWNER).read_text().split()  # an older hugelab's: no boot id
        return not alive(int(pid), int(start) if start.isdigit() else None, *boot[:1])
    except FileNotFoundError:
        try:
            return now - d.stat().st_mtime > UNOWNED_GRACE_S
        except OSError:
            return False
    except (OSError, ValueError):
        return False


def known_hosts_line(host: str, port: int, key: str) -> str:
    """The known_hosts line trusting `key` (an OpenSSH public key line) for host:port."""
    kind, blob = key.split()[:2]
    where = host if port == 22 else f"[{host}]:{port}"
    return f"{where} {kind} {blob}\n"


class SshTarget(RemoteTarget):
    """The Target protocol in a user's guest, over SSH."""

    def __init__(self, ssh: Ssh, name: str, *, slack_s: float = 60.0) -> None:
        super().__init__(name, slack_s=slack_s)
        self.ssh = ssh
        self.found: set[str] = set()
        self.sudo = [] if ssh.user == "root" else ["sudo", "-n"]

    def read(self, path: str) -> str | None:
        try:
            cp = self.ssh.run(["cat", path])
        except SshError:
            return None
        return cp.stdout.decode(errors="replace") if cp.returncode == 0 else None

    def _install(self, guest_path: str, data: bytes) -> None:
        cp = self.ssh.run(["sh", "-c", 'cat > "$0" && chmod 0755 "$0"', guest_path], data=data,
                          timeout=120)
        if cp.returncode != 0:
            raise SshError(cp.stderr.decode(errors="replace").strip() or "ssh failed")

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None:
        cp = self.ssh.run([*self.sudo, "sh", "-c", 'cat > "$0"', path], data=data.encode())
        if cp.returncode != 0:
            raise VMError(f"guest {self.name} cannot write {path}: "
                          f"{cp.stderr.decode(errors='replace').strip()}",
                          hint=None if not self.sudo else f"{self.ssh.user} needs sudo without "
                          "a password for hugelab's guest settings")

    def _check_program(self, program: str) -> None:
        """A missing program is an error naming its package, before anything runs."""
        if program in self.found:
            return
        cp = self.ssh.run(["sh", "-c", 'command -v "$0"', program])
        if cp.returncode == 255:
            raise SshError(f"ssh to guest {self.name} failed: "
                           f"{cp.stderr.decode(errors='replace').strip()}")
        if cp.returncode != 0:
            tool = os.path.basename(program)
            raise ToolMissingError(tool, f"{package_of(tool)} (in the guest "
                                         f"{self.name}, with its package manager)")
        self.found.add(program)

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        argv = self.with_tools([str(a) for a in argv])
        self._check_program(argv[0])
        pidfile = f"/tmp/hugelab-{secrets.token_hex(6)}.pid"
        # sshd starts the command in a session of its own: its pid is also its process group,
        # which `stop` kills whole
        remote = ["sh", "-c", 'echo "$$" > "$0" && exec "$@"', pidfile, *argv]
        known: dict[str, int] = {}

        def pid() -> int | None:
            if "pid" not in known:
                text = (self.read(pidfile) or "").strip()
                if text.isdigit():
                    known["pid"] = int(text)
            return known.get("pid")

        t0 = time.monotonic()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            p = start(self.ssh.argv(remote), stdin=subprocess.DEVNULL, stdout=out, stderr=err)

            def stop() -> None:
                root = pid()
                if root is not None:
                    self.ssh.run(["kill", "-KILL", "--", f"-{root}"])
                p.kill()
                p.wait()

            try:
                self._watch(argv, t0, timeout, lambda: p.poll() is not None, pid, stop)
            except BaseException:
                if p.poll() is None:
                    stop()
                raise
            wall = time.monotonic() - t0
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(errors="replace"), err.read().decode(
                errors="replace")
        if p.returncode == 255 and "pid" not in known and not stdout:
            raise CommandError(argv, 255, f"ssh to guest {self.name} failed: {stderr.strip()}")
        return self.explain(ExecResult(argv, int(p.returncode), stdout, stderr, wall, {}))

    def info(self) -> dict[str, Any]:
        return {"channel": "ssh", "user": self.ssh.user, "port_forward":
                f"{self.ssh.host}:{self.ssh.port}"}
