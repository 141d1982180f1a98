"""Image-less QEMU guests: boot, talk to the in-guest agent, shut down, clean up.

    with Guest(VmSpec(mem_mib=512, backing="file", hugetlbfs_path="/mnt/huge2M")) as g:
        r = g.target.exec(["/bin/cat", "/proc/meminfo"])     # a Target, like NativeTarget
        g.qmp.cmd("query-memdev")                             # QMP (qemu.qmp legacy sync client)
        g.evidence()                                          # QEMU smaps of guest RAM

Every QEMU started here is recorded (qemurecords.py) until it is gone; the agent is reached
through agentchannel.py, and `target` is an agenttarget.AgentTarget. A file backing is checked
first (backingcheck.py); a failed boot says why (bootfailure.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from hugelab.errors import VMError
from hugelab.proc import start as start_process
from hugelab.proc import wait_for, which
from hugelab.vm.common import pvh
from hugelab.vm.common.evidence import qemu_memory_evidence
from hugelab.vm.common.guestapi import apply_guest_layer
from hugelab.vm.common.spec import VmSpec, validate
from hugelab.vm.own import accel
from hugelab.vm.own.agentchannel import AgentChannel
from hugelab.vm.own.agenttarget import AgentTarget
from hugelab.vm.own.backingcheck import check_file_backing
from hugelab.vm.own.bootfailure import failure_detail, failure_hint
from hugelab.vm.own.initramfs import (
    InitramfsSpec,
    cached_initramfs,
    default_kernel,
    kernel_release,
    modules_dir_for,
)
from hugelab.vm.own.qemu_args import QemuPaths, qemu_argv
from hugelab.vm.own.qemurecords import register_pending, register_qemu, state_dir
from hugelab.vm.own.qmp import QMP, stop_qemu
from hugelab.vm.own.qmp import connect as qmp_connect

BOOT_TIMEOUT_S = {"kvm": 60.0, "tcg": 180.0}
EXEC_SLACK_S = {"kvm": 30.0, "tcg": 120.0}  # agent round trip on top of a command's own timeout


# --- the guest -----------------------------------------------------------------------------------


class Guest:
    """One QEMU guest as a context manager; any exit shuts QEMU down and removes its files
    (a hugelab.vm.common.guestapi.Guest)."""

    def __init__(self, spec: VmSpec, *, name: str = "vm0", boot_timeout: float | None = None,
                 qemu: str = "qemu-system-x86_64", state: Path | str | None = None,
                 python: str = "/usr/bin/python3", console_silence_s: float | None = None) -> None:
        validate(spec)
        self.spec = spec
        self.name = name
        self.boot_timeout = boot_timeout
        # a boot whose console stays empty this long has failed (the KVM probe: a kernel this
        # KVM cannot run spins without a line, and would otherwise hold the whole timeout)
        self.console_silence_s = console_silence_s
        self.qemu = qemu
        self._state = Path(state) if state is not None else None
        self.python = python
        self.accel: str | None = None
        self.kernel: Path | None = None
        self.argv: list[str] = []
        self.boot_s: float | None = None
        self.boot_retried: str | None = None  # one boot here: a failed boot fails the trial
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmpdir: Path | None = None
        self._record: Path | None = None
        self._qmp: QMP | None = None
        self._channel: AgentChannel | None = None
        self._target: AgentTarget | None = None
        self._closed = False

    # -- public ---------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def target(self) -> AgentTarget:
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
            check_file_backing(self.spec)
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
            self._launch(self.boot_image(kernel), accel, initrd)
        except BaseException as exc:
            detail = failure_detail(self._tmpdir)
            exited = self._proc.poll() if self._proc is not None else None
            self.close()
            if not isinstance(exc, Exception):
                raise
            why = exc.message if isinstance(exc, VMError) else f"{type(exc).__name__}: {exc}"
            if exited is not None:
                why = f"QEMU exited with status {exited} ({why})"
            hint = exc.hint if isinstance(exc, VMError) and exc.hint else failure_hint(detail)
            raise VMError(f"guest {self.name} failed to boot: {why}\n{detail}", hint=hint) from exc

    def boot_image(self, kernel: Path) -> Path:
        """What QEMU boots for the bzImage `kernel`: its uncompressed PVH kernel where it has
        one (hugelab.vm.common.pvh: 3 s less a boot under TCG), else the bzImage."""
        return pvh.boot_image(kernel) or kernel

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
        wait_for_socket(paths.qmp_socket, deadline, self.alive)
        self._qmp = qmp_connect(str(paths.qmp_socket), deadline, self.alive)
        self._qmp.settimeout(30.0)
        if self.console_silence_s is not None:
            wait_for_console(paths.serial_log, min(deadline, t0 + self.console_silence_s),
                             self.alive, self.console_silence_s)
        self._connect_agent(paths.agent_socket, t0, timeout, accel)

    def _connect_agent(self, socket: Path, t0: float, timeout: float, accel: str) -> None:
        """hugelab's agent answers on `socket` before t0 + timeout; then the guest layer."""
        deadline = t0 + timeout
        self._channel = AgentChannel(socket, self.alive)
        self._channel.connect(deadline)
        self._target = AgentTarget(self._channel, self.name, slack_s=EXEC_SLACK_S[accel])
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
        apply_guest_layer(self.target, self.spec, write_pools=False)  # pools: on the cmdline

    # -- stop -----------------------------------------------------------------------------------
    def close(self) -> None:
        """QMP quit, then SIGTERM, then SIGKILL; then remove sockets, logs and the state record."""
        self._closed = True
        try:
            stop_qemu(self._proc, self._qmp)
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


# --- the accelerator probe -----------------------------------------------------------------------


def wait_for_socket(path: Path, deadline: float, alive: Callable[[], bool]) -> None:
    """QEMU creates `path` before `deadline`, else an error saying whether it exited."""
    if not wait_for(path.exists, deadline - time.monotonic(), interval_s=0.02,
                    unless=lambda: not alive()):
        if not alive():
            raise VMError("QEMU exited during startup")
        raise VMError(f"QEMU did not create {path.name} in time")


def wait_for_console(log: Path, deadline: float, alive: Callable[[], bool],
                     silence_s: float) -> None:
    """The guest's first console line before `deadline` (our init says "hugelab-init: ..."
    first thing), else the boot has failed: QEMU runs, the guest prints nothing."""
    def spoke() -> bool:
        try:
            return log.stat().st_size > 0
        except OSError:
            return False
    if not wait_for(spoke, deadline - time.monotonic(), interval_s=0.05,
                    unless=lambda: not alive()):
        if not alive():
            raise VMError("QEMU exited during boot")
        raise VMError(f"the guest printed nothing on its console within {silence_s:.0f}s")


def _boot_probe(kernel: Path, qemu: str, timeout: float) -> str | None:
    """Boot a small guest under KVM and run /bin/true; None on success, else why not. A guest
    silent on its console for accel.PROBE_SILENCE_S has failed: under a working KVM our init
    speaks within a second or two; a kernel this KVM cannot run never does."""
    spec = VmSpec(mem_mib=256, vcpus=1, accel="kvm", kernel=str(kernel))
    try:
        with Guest(spec, name="kvm-probe", boot_timeout=timeout, qemu=qemu,
                   console_silence_s=min(timeout, accel.PROBE_SILENCE_S)) as g:
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
