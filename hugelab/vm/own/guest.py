"""Image-less QEMU guests: boot, talk to the in-guest agent, shut down, clean up.

    with Guest(VmSpec(mem_mib=512, backing="file", hugetlbfs_path="/mnt/huge2M")) as g:
        r = g.target.exec(["/bin/cat", "/proc/meminfo"])     # a Target, like NativeTarget
        g.qmp.cmd("query-memdev")                             # QMP (qemu.qmp legacy sync client)
        g.evidence()                                          # QEMU smaps of guest RAM

Every QEMU started here is recorded in the state directory (`HUGELAB_STATE_DIR`, default
/var/lib/hugelab) until it is gone, so `kill_leftover_qemus()` can end the ones a SIGKILLed
hugelab left behind. Results travel over the agent's virtio-serial channel, never the console.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from hugelab import identity
from hugelab.errors import CommandError, ToolMissingError, VMError
from hugelab.host.journal import write_private
from hugelab.identity import alive, starttime
from hugelab.proc import package_of, wait_for, which
from hugelab.proc import start as start_process
from hugelab.trial.procscan import merge_peak
from hugelab.units import exact
from hugelab.vm.common.evidence import qemu_memory_evidence
from hugelab.vm.common.guestapi import write_guest_mthp
from hugelab.vm.common.spec import VmSpec, validate
from hugelab.vm.own import accel
from hugelab.vm.own.initramfs import (
    InitramfsSpec,
    cached_initramfs,
    default_kernel,
    kernel_release,
    modules_dir_for,
)
from hugelab.vm.own.qemu_args import QemuPaths, qemu_argv
from hugelab.vm.own.qmp import QMP
from hugelab.workloads.base import ExecResult

DEFAULT_STATE_DIR = "/var/lib/hugelab"
BOOT_TIMEOUT_S = {"kvm": 60.0, "tcg": 180.0}
EXEC_SLACK_S = {"kvm": 30.0, "tcg": 120.0}  # agent round trip on top of a command's own timeout
SERIAL_TAIL_LINES = 25
GUEST_THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"

# --- state directory: which QEMUs are ours ------------------------------------------------------


def state_dir() -> Path:
    """The state directory (created 0700)."""
    d = Path(os.environ.get("HUGELAB_STATE_DIR", DEFAULT_STATE_DIR))
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(d, 0o700)
    return d


def _is_qemu(pid: int) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("qemu-system")
    except OSError:
        return False


def _record_path(d: Path, pid: int) -> Path:
    return d / f"qemu-{pid}.json"


def register_qemu(d: Path, pid: int, tmpdir: Path) -> Path:
    """Record a QEMU we started (file 0600, written atomically) so a later `recover` can end it."""
    rec = {**identity.record(pid, prefix=""), **identity.record(), "tmpdir": str(tmpdir),
           "started": time.time()}
    path = _record_path(d, pid)
    write_private(path, json.dumps(rec))
    return path


def register_pending(d: Path, tmpdir: Path) -> Path:
    """Record a QEMU about to start, before its pid exists: a SIGKILL between Popen and
    register_qemu then still leaves a trace, and recover finds the QEMU by its tmpdir."""
    path = d / f"pending-qemu-{tmpdir.name}.json"
    write_private(path, json.dumps({"pid": None, **identity.record(), "tmpdir": str(tmpdir)}))
    return path


def _qemus_using(tmpdir: str) -> list[int]:
    """QEMU processes whose command line names `tmpdir` (their sockets and logs live there)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not _is_qemu(int(entry.name)):
            continue
        try:
            if tmpdir.encode() in (entry / "cmdline").read_bytes():
                out.append(int(entry.name))
        except OSError:
            continue
    return out


def _terminate(pid: int, grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; for processes that are not our children."""
    start = starttime(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_for(lambda: not alive(pid, start), grace_s):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid, start), grace_s)


def _remove_tmpdir(path: str | None) -> None:
    if path and Path(path).name.startswith("hugelab-vm-"):
        shutil.rmtree(path, ignore_errors=True)


def kill_leftover_qemus(state: Path | str | None = None, *, include_live_owners: bool = False) -> list[int]:
    """End QEMUs recorded in the state directory whose hugelab process is gone.

    Returns the pids that were killed. Records of QEMUs that already exited are removed.
    A QEMU whose owning hugelab still runs is left alone unless `include_live_owners`.
    """
    d = Path(state) if state is not None else state_dir()
    killed: list[int] = []
    for path in sorted([*d.glob("qemu-*.json"), *d.glob("pending-qemu-*.json")]):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if identity.recorded_alive(rec) and not include_live_owners:
            continue
        if rec.get("pid") is None:  # killed between Popen and register_qemu: find it by tmpdir
            pids = _qemus_using(str(rec.get("tmpdir"))) if rec.get("tmpdir") else []
        else:
            pid = int(rec["pid"])
            pids = [pid] if identity.recorded_alive(rec, prefix="") and _is_qemu(pid) else []
        for pid in pids:
            _terminate(pid)
            killed.append(pid)
        _remove_tmpdir(rec.get("tmpdir"))
        path.unlink(missing_ok=True)
    return killed


# --- the agent channel ---------------------------------------------------------------------------


class AgentChannel:
    """JSON-lines requests to the in-guest agent over QEMU's chardev unix socket."""

    def __init__(self, path: Path, alive: Callable[[], bool]) -> None:
        self.path = path
        self._alive = alive
        self._sock: socket.socket | None = None
        self._buf = b""
        self._next_id = 1
        self._lock = threading.Lock()

    def connect(self, deadline: float) -> None:
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(self.path))
                self._sock = s
                return
            except OSError:
                s.close()
                if time.monotonic() > deadline or not self._alive():
                    raise VMError(f"cannot connect to the agent socket {self.path}") from None
                time.sleep(0.05)

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def _read_line(self, deadline: float | None) -> bytes:
        assert self._sock is not None
        while b"\n" not in self._buf:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError
            self._sock.settimeout(0.25)
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError:
                if not self._alive():
                    raise VMError("QEMU exited while waiting for the guest agent") from None
                continue
            if not chunk:
                raise VMError("the guest agent channel closed (guest powered off or crashed?)")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, op: str, wait_s: float | None, **fields: Any) -> dict[str, Any]:
        """Send one request, return its reply; VMError when the agent does not answer in time."""
        if self._sock is None:
            raise VMError("the guest agent is not connected")
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            msg = json.dumps({"id": rid, "op": op, **fields}).encode() + b"\n"
            try:
                self._sock.sendall(msg)
            except OSError as exc:
                raise VMError(f"cannot send to the guest agent: {exc}") from exc
            deadline = None if wait_s is None else time.monotonic() + wait_s
            while True:
                try:
                    line = self._read_line(deadline)
                except TimeoutError:
                    raise VMError(f"the guest agent did not answer '{op}' within {wait_s:.0f}s",
                                  hint="the guest may be hung; see its serial log") from None
                reply = json.loads(line)
                if reply.get("id") == rid:
                    return reply


class GuestTarget:
    """The Target protocol inside a guest: argv runs via the agent, rusage from the guest."""

    def __init__(self, channel: AgentChannel, name: str = "vm0", *, slack_s: float = 60.0,
                 env: dict[str, str] | None = None, sample_s: float | None = 0.25) -> None:
        self.name = name
        self.channel = channel
        self.slack_s = slack_s
        self.env = env
        self.sample_s = sample_s
        self.trees: list[dict[str, Any]] = []  # in-guest process-tree evidence, one per exec

    def tree(self) -> dict[str, Any]:
        """The peak of every sampled exec's tree so far (see hugelab.trial.procscan)."""
        seen = [t for t in self.trees if t.get("samples")]
        out: dict[str, Any] = {}
        for t in seen:
            out = merge_peak(out, t)
        if seen:
            out["samples"] = sum(int(t["samples"]) for t in seen)
        return out

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        wait = None if timeout is None else timeout + self.slack_s
        reply = self.channel.request("exec", wait, argv=argv, timeout=timeout, env=self.env,
                                     sample=self.sample_s)
        if isinstance(reply.get("tree"), dict):
            self.trees.append(reply["tree"])
        if not reply.get("ok"):
            if reply.get("kind") == "enoent":
                tool = Path(argv[0]).name
                raise ToolMissingError(tool, package_of(tool))
            raise VMError(f"guest could not run {argv[0]}: {reply.get('error')}")
        if reply.get("timed_out"):
            raise CommandError(argv, -1, f"timed out after {timeout}s (in guest {self.name})\n"
                               f"{reply.get('stderr', '')}")
        return ExecResult(argv, int(reply["returncode"]), reply["stdout"], reply["stderr"],
                          float(reply["wall_s"]), {k: float(v) for k, v in reply["rusage"].items()})

    def read_file(self, path: str, *, wait_s: float = 60.0) -> str:
        reply = self.channel.request("read", wait_s, path=path)
        if not reply.get("ok"):
            raise VMError(f"guest cannot read {path}: {reply.get('error')}")
        return str(reply["data"])

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None:
        """Write a guest file (sysfs: THP mode, pools) with one write()."""
        reply = self.channel.request("write", wait_s, path=path, data=data)
        if not reply.get("ok"):
            raise VMError(f"guest cannot write {data!r} to {path}: {reply.get('error')}")

    def ping(self, wait_s: float | None = 30.0) -> dict[str, Any]:
        return self.channel.request("ping", wait_s)


# --- host-side checks ----------------------------------------------------------------------------


def hugetlbfs_page_kb(path: str, mounts_text: str, default_kb: int = 2048) -> int | None:
    """Page size (KiB) of the hugetlbfs mounted at `path`, None if `path` is no hugetlbfs."""
    want = os.path.realpath(path)
    found = None
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[1] != want:
            continue
        found = None  # the last mount on a path wins
        if parts[2] != "hugetlbfs":
            continue
        found = default_kb
        for opt in parts[3].split(","):
            if opt.startswith("pagesize="):
                found = _size_kb(opt.split("=", 1)[1])
    return found


def _size_kb(text: str) -> int:
    units = {"K": 1, "M": 1024, "G": 1024 * 1024}
    text = text.strip().upper().removesuffix("B")
    if text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text) // 1024


def _check_file_backing(spec: VmSpec) -> None:
    assert spec.hugetlbfs_path is not None
    mounts = Path("/proc/mounts").read_text()
    page_kb = hugetlbfs_page_kb(spec.hugetlbfs_path, mounts)
    if page_kb is None:
        raise VMError(f"{spec.hugetlbfs_path} is not a hugetlbfs mount",
                      hint="mount one: mount -t hugetlbfs -o pagesize=2M none DIR")
    if spec.hugetlb_size_kb is not None and spec.hugetlb_size_kb != page_kb:
        raise VMError(f"{spec.hugetlbfs_path} has {exact(page_kb)} pages, not the "
                      f"{exact(spec.hugetlb_size_kb)} the arm asks for",
                      hint="mount hugetlbfs with the matching pagesize= option")


_HINTS = (
    ("could not set up host forwarding", "a forwarded 127.0.0.1 port was taken between choosing "
     "it and starting QEMU: run the trial again"),
    ("unable to map backing store", "the host hugetlb pool is too small for the guest's RAM: "
     "reserve more pages (nr_hugepages) of that size, or use a smaller guest"),
    ("cannot allocate memory", "the host could not allocate guest RAM: reserve more huge pages "
     "or free host memory"),
    ("failed to set msr", "KVM is present but cannot run this guest: use accel='tcg'"),
    ("could not access kvm", "KVM is not usable here: use accel='tcg'"),
    ("kvm", "KVM failed: use accel='tcg' (or accel='auto' to probe)"),
    ("kernel panic", "the guest kernel panicked: see the serial log lines above"),
    ("hugelab-init: fatal", "the guest init failed: see the serial log lines above"),
)


def failure_hint(text: str) -> str:
    low = text.lower()
    for needle, hint in _HINTS:
        if needle in low:
            return hint
    return "see the QEMU and serial log lines above; try a larger boot timeout under TCG"


def _tail(path: Path, n: int = SERIAL_TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


# --- the guest -----------------------------------------------------------------------------------


class Guest:
    """One QEMU guest as a context manager; any exit shuts QEMU down and removes its files
    (a hugelab.vm.common.guestapi.Guest)."""

    def __init__(self, spec: VmSpec, *, name: str = "vm0", boot_timeout: float | None = None,
                 qemu: str = "qemu-system-x86_64", state: Path | str | None = None,
                 python: str = "/usr/bin/python3") -> None:
        validate(spec)
        self.spec = spec
        self.name = name
        self.boot_timeout = boot_timeout
        self.qemu = qemu
        self._state = Path(state) if state is not None else None
        self.python = python
        self.accel: str | None = None
        self.kernel: Path | None = None
        self.argv: list[str] = []
        self.boot_s: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmpdir: Path | None = None
        self._record: Path | None = None
        self._qmp: QMP | None = None
        self._channel: AgentChannel | None = None
        self._target: GuestTarget | None = None
        self._closed = False

    # -- public ---------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def target(self) -> GuestTarget:
        if self._target is None:
            raise VMError("the guest is not running")
        return self._target

    @property
    def qmp(self) -> QMP:
        if self._qmp is None:
            raise VMError("the guest is not running")
        return self._qmp

    @property
    def qemu_pid(self) -> int:
        if self._proc is None:
            raise VMError("the guest is not running")
        return self._proc.pid

    @property
    def paths(self) -> QemuPaths:
        assert self._tmpdir is not None
        return QemuPaths(self._tmpdir / "serial.log", self._tmpdir / "qmp.sock",
                         self._tmpdir / "agent.sock", self._tmpdir / "initrd")

    def serial_log(self) -> str:
        return self.paths.serial_log.read_text(errors="replace") if self._tmpdir else ""

    def memdev(self) -> list[dict[str, Any]]:
        """QMP query-memdev: QEMU's own account of the guest-RAM backend."""
        return list(self.qmp.cmd("query-memdev"))  # type: ignore[call-overload]

    def evidence(self) -> dict[str, Any]:
        """QEMU smaps of guest RAM plus QMP's memdev view."""
        ev = qemu_memory_evidence(self.qemu_pid, self.spec.mem_bytes)
        ev["memdev"] = self.memdev()
        ev["accel"] = self.accel
        return ev

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- start ----------------------------------------------------------------------------------
    def _resolve(self) -> tuple[Path, str, Path]:
        kernel = Path(self.spec.kernel) if self.spec.kernel else default_kernel()
        release = kernel_release(kernel)
        accel = self.spec.accel
        if accel == "auto":
            accel = probe_accel(kernel, qemu=self.qemu)
        if self.spec.backing == "file":
            _check_file_backing(self.spec)
        which(self.qemu)
        state = self._state or state_dir()
        initrd = cached_initramfs(InitramfsSpec(release, modules_dir_for(release),
                                                python=self.python), state / "initramfs")
        return kernel, accel, initrd

    def start(self) -> None:
        if self._proc is not None or self._closed:
            raise VMError("a Guest can be started once")
        kernel, accel, initrd = self._resolve()
        self.kernel, self.accel = kernel, accel
        self._tmpdir = self._workdir()
        try:
            self._launch(kernel, accel, initrd)
        except BaseException as exc:
            detail = self._failure_detail()
            exited = self._proc.poll() if self._proc is not None else None
            self.close()
            if not isinstance(exc, Exception):
                raise
            why = exc.message if isinstance(exc, VMError) else f"{type(exc).__name__}: {exc}"
            if exited is not None:
                why = f"QEMU exited with status {exited} ({why})"
            hint = exc.hint if isinstance(exc, VMError) and exc.hint else failure_hint(detail)
            raise VMError(f"guest {self.name} failed to boot: {why}\n{detail}", hint=hint) from exc

    def _workdir(self) -> Path:
        """Where the guest's sockets, logs and initrd link live while it runs."""
        return Path(tempfile.mkdtemp(prefix="hugelab-vm-"))

    def _launch(self, kernel: Path, accel: str, initrd: Path) -> None:
        assert self._tmpdir is not None
        paths = self.paths
        os.symlink(initrd, paths.initrd)
        self.argv = qemu_argv(self.spec, paths, kernel=kernel, accel=accel, qemu=self.qemu,
                              name=self.name)
        log = open(self._tmpdir / "qemu.log", "wb")  # noqa: SIM115 - closed below
        pending = register_pending(self._state or state_dir(), self._tmpdir)
        t0 = time.monotonic()
        try:
            self._proc = start_process(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        except BaseException:
            pending.unlink(missing_ok=True)
            raise
        finally:
            log.close()
        self._record = register_qemu(self._state or state_dir(), self._proc.pid, self._tmpdir)
        pending.unlink(missing_ok=True)
        timeout = self.boot_timeout or BOOT_TIMEOUT_S[accel]
        deadline = t0 + timeout
        self._wait_for_socket(paths.qmp_socket, deadline)
        self._qmp = QMP(str(paths.qmp_socket))  # an event may precede the greeting
        self._qmp.connect()
        self._qmp.settimeout(30.0)
        self._connect_agent(paths.agent_socket, t0, timeout, accel)

    def _connect_agent(self, socket: Path, t0: float, timeout: float, accel: str) -> None:
        """hugelab's agent answers on `socket` before t0 + timeout; then the guest layer."""
        deadline = t0 + timeout
        self._channel = AgentChannel(socket, self.alive)
        self._channel.connect(deadline)
        self._target = GuestTarget(self._channel, self.name, slack_s=EXEC_SLACK_S[accel])
        remaining = max(1.0, deadline - time.monotonic())
        try:
            self._target.ping(remaining)
        except VMError as exc:
            if self.alive():
                raise VMError(f"the guest agent did not answer within {timeout:.0f}s",
                              hint="the guest is slow or hung (see the serial log); "
                                   "raise boot_timeout under TCG") from exc
            raise VMError("QEMU exited during boot") from exc
        self.boot_s = time.monotonic() - t0
        self._apply_guest_layer()

    def _apply_guest_layer(self) -> None:
        """Make the guest layer true: THP mode via sysfs, pools checked against the ask.

        `transparent_hugepage=` on the command line is not enough: a kernel with less than
        512 MiB of RAM turns THP off at boot whatever the command line says.
        """
        t = self.target
        if self.spec.guest_thp is not None:
            t.write_file(GUEST_THP_ENABLED, self.spec.guest_thp)
        write_guest_mthp(t, self.spec)
        for size_kb, want in ((2048, self.spec.guest_hugepages_2m),
                              (1048576, self.spec.guest_hugepages_1g)):
            if not want:
                continue
            path = f"/sys/kernel/mm/hugepages/hugepages-{size_kb}kB/nr_hugepages"
            try:
                got = int(t.read_file(path))
            except VMError:
                got = 0
            if got < want:
                raise VMError(f"the guest reserved {got} of the {want} huge pages of "
                              f"{exact(size_kb)} it was asked for",
                              hint="give the guest more memory, or (1G) a CPU with pdpe1gb")

    def _wait_for_socket(self, path: Path, deadline: float) -> None:
        if not wait_for(path.exists, deadline - time.monotonic(), interval_s=0.02,
                        unless=lambda: not self.alive()):
            if not self.alive():
                raise VMError("QEMU exited during startup")
            raise VMError(f"QEMU did not create {path.name} in time")

    def _failure_detail(self) -> str:
        if self._tmpdir is None:
            return ""
        parts = []
        qlog = _tail(self._tmpdir / "qemu.log", 10)
        if qlog:
            parts.append("QEMU says:\n" + qlog)
        serial = _tail(self._tmpdir / "serial.log")
        if serial:
            parts.append("serial console (last lines):\n" + serial)
        return "\n".join(parts)

    # -- stop -----------------------------------------------------------------------------------
    def close(self) -> None:
        """QMP quit, then SIGTERM, then SIGKILL; then remove sockets, logs and the state record."""
        self._closed = True
        try:
            self._stop_qemu()
        finally:
            for closer in (self._channel.close if self._channel else None,
                           self._qmp.close if self._qmp else None):
                if closer is not None:
                    with contextlib.suppress(Exception):
                        closer()
            self._channel = self._target = None
            self._qmp = None
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
            if self._record is not None:
                self._record.unlink(missing_ok=True)
                self._record = None

    def _stop_qemu(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.poll() is None and self._qmp is not None:
                with contextlib.suppress(Exception):
                    self._qmp.settimeout(3.0)
                    self._qmp.cmd("quit")
                self._wait(proc, 5.0)
            if proc.poll() is None:
                proc.terminate()
                self._wait(proc, 5.0)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    @staticmethod
    def _wait(proc: subprocess.Popen[bytes], seconds: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(seconds)


# --- the accelerator probe -----------------------------------------------------------------------


def _boot_probe(kernel: Path, qemu: str, timeout: float) -> str | None:
    """Boot a small guest under KVM and run /bin/true; None on success, else why not."""
    spec = VmSpec(mem_mib=256, vcpus=1, accel="kvm", kernel=str(kernel))
    try:
        with Guest(spec, name="kvm-probe", boot_timeout=timeout, qemu=qemu) as g:
            if g.target.exec(["/bin/true"], timeout=timeout).returncode != 0:
                return "probe guest booted under KVM but could not run /bin/true"
    except VMError as exc:
        first = exc.message.splitlines()
        detail = next((ln for ln in first if "qemu-system" in ln), first[0] if first else "")
        return f"KVM probe failed: {detail.strip()}"
    return None


def probe_accel(kernel: str | Path | None = None, *, qemu: str = "qemu-system-x86_64") -> str:
    """"kvm" if a guest with this kernel boots under KVM (the agent answers), else "tcg";
    probed once per kernel and process (hugelab.vm.own.accel keeps the answer and its reason)."""
    return accel.probe_accel(kernel, qemu=qemu, boot=_boot_probe)
