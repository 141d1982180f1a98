"""A trial in a user's own VM: a transient copy of their libvirt domain, reached through
qemu-guest-agent with libvirt's agent API (libvirt-python), evidenced on both sides, destroyed.

- `resolve(arm)`: the domain exists, libvirtd answers; an arm that did not set `mem` / `vcpus`
  takes the domain's own (read from its inactive XML), before any host change.
- `DomainGuest`: a guest as `hugelab.vm.common.guestapi.Guest` declares it. Before the
  copy starts it writes a 0600 record (domain name, URI, overlay directory) to the state
  directory; `recover_domains()` (called by `hugelab recover` and at every run's start) destroys
  what a killed run left and deletes its overlays. Writable disks become qcow2 overlays over the
  user's images in OVERLAY_ROOT (where libvirt's QEMU user can read them); the user's images and
  persistent definition are never written. A running domain is refused unless every disk is
  read-only: two QEMUs writing one image corrupt it.
- `QgaTarget`: the Target protocol over `guest-exec` / `guest-exec-status` / `guest-file-*`.
  While a workload runs it samples the workload's process tree in the guest (smaps_rollup of the
  exec'd pid and its descendants, read with guest-file-read), so the evidence rules are the same
  as for hugelab's own guests. A program missing in the guest is an error naming its package.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self

from hugelab.errors import HugelabError, ToolMissingError, VMError
from hugelab.experiment import Arm, Experiment, VmLayer
from hugelab.proc import package_of, run
from hugelab.vm.common.evidence import qemu_memory_evidence
from hugelab.vm.common.guestapi import GuestTarget, write_guest_mthp
from hugelab.vm.common.libvirtd import (
    OVERLAY_ROOT,
    PID_DIR,
    DomainError,
    connect,
    destroy,
    libvirt_module,
    transient_name,
    write_record,
)
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.domains import domain as dx
from hugelab.vm.domains.remote import RemoteTarget
from hugelab.vm.domains.ssh import Ssh, SshTarget
from hugelab.workloads.base import ExecResult
from hugelab.workloads.command import free_port

LOCAL_URIS = ("qemu:///system",)
AGENT_WAIT_S = {"kvm": 120.0, "tcg": 300.0}
COPY_CHUNK = 48 << 10  # qemu-ga reads requests in small buffers: keep each write small


@dataclass(frozen=True)
class Access:
    """How hugelab reaches the copy's guest (the arm's vm access, ssh_user, ssh_key)."""

    mode: str = "auto"  # auto | agent | ssh
    ssh_user: str = "root"
    ssh_key: str | None = None

    @classmethod
    def of(cls, vm: VmLayer) -> Access:
        return cls(vm.access, vm.ssh_user, vm.ssh_key)

    @property
    def ssh(self) -> bool:
        """Whether the copy gets the SSH NIC and hugelab tries SSH: always for "ssh"; for
        "auto" when the arm names a key (else the copy is as the agent alone needs it, so a
        domain that worked through its agent is not changed) and this host has ssh."""
        if self.mode == "ssh":
            return True
        return self.mode == "auto" and self.ssh_key is not None and \
            shutil.which("ssh") is not None


SSH_PORT = 22
_AGENT_HINT = ("install and enable qemu-guest-agent in the guest (hugelab adds its virtio-serial "
               "channel org.qemu.guest_agent.0)")
_SSH_HINT = ("or let hugelab in over SSH: an SSH server on port 22 that takes ssh_user's key "
             "(ssh_key, or ssh's defaults), and DHCP on the NIC hugelab adds (NetworkManager "
             "and systemd-networkd configure a new NIC by default)")
_ACCESS_HINTS = {"agent": _AGENT_HINT, "ssh": _SSH_HINT.removeprefix("or "),
                 "auto": f"{_AGENT_HINT}; {_SSH_HINT}"}


def lookup(conn: Any, name: str) -> Any:
    lv = libvirt_module()
    try:
        return conn.lookupByName(name)
    except lv.libvirtError as exc:
        if exc.get_error_code() != lv.VIR_ERR_NO_DOMAIN:
            raise DomainError(f"libvirt cannot look up domain '{name}': "
                              f"{exc.get_error_message()}") from exc
        try:
            known = ", ".join(sorted(d.name() for d in conn.listAllDomains())) or "none"
        except lv.libvirtError:
            known = "(cannot list them)"
        raise DomainError(f"no libvirt domain named '{name}' at {conn.getURI()}",
                          hint=f"domains there: {known}") from exc


def user_xml(dom: Any) -> str:
    """The domain's persistent (inactive) definition; never the secure one (no passwords)."""
    lv = libvirt_module()
    return str(dom.XMLDesc(lv.VIR_DOMAIN_XML_INACTIVE))


def resolve(arm: Arm, *, check: bool = True) -> Arm:
    """The arm with the domain's own memory and vCPUs where it did not set them; errors a user
    can act on (libvirtd down, no such domain, a running domain with writable disks, no
    hugetlbfs mount for file backing) before anything changes. `check=False`: only the
    memory and vCPUs (for `vm diff`, which runs nothing)."""
    vm = arm.vm
    if vm is None or vm.domain is None:
        return arm
    if vm.uri not in LOCAL_URIS:
        raise DomainError(f"arm '{arm.name}': uri {vm.uri!r}: hugelab runs a domain's copy on "
                          "this host only (its overlays, pools and evidence are local)",
                          hint="run hugelab on the domain's host, with uri = "
                          "\"qemu:///system\"")
    if check and vm.backing == "file" and vm.page_size and not _hugetlbfs_mounted(vm.page_size):
        raise DomainError(
            f"arm '{arm.name}': libvirt backs a domain's RAM with hugetlbfs files only from a "
            f"hugetlbfs mount of {vm.page_size} pages that existed when libvirtd started, and "
            "this host has none",
            hint=f"mount one (mount -t hugetlbfs -o pagesize={vm.page_size} none "
            f"/dev/hugepages{vm.page_size}), name it in hugetlbfs_mount in "
            "/etc/libvirt/qemu.conf and restart libvirtd; or use backing = \"memfd\" with "
            "page_size, which needs no mount")
    conn = connect(vm.uri)
    try:
        dom = lookup(conn, vm.domain)
        root = dx.parse(user_xml(dom))
        writable = [d.target for d in dx.disks(root) if not d.readonly]
        if check and dom.isActive() and writable:
            raise DomainError(f"domain '{vm.domain}' is running: a copy would write its disks "
                              f"({', '.join(writable)}) beside it",
                              hint="shut it down first (virsh shutdown), or mark its disks "
                              "<readonly/>")
    finally:
        conn.close()
    return replace(arm, vm=replace(vm, mem_mib=vm.mem_mib or dx.memory_mib(root),
                                   vcpus=vm.vcpus or dx.vcpus(root)))


def check_own_libvirt_file(arm: Arm, mounts: str = "/proc/mounts") -> None:
    """hugelab's own guest under manager = "libvirt" with backing = "file": libvirt ignores
    the hugetlbfs mount hugelab makes and uses one it knows (hugetlbfs_mount in qemu.conf, or
    one mounted when libvirtd started); without any, the guest fails only when it starts.
    DomainError before any change."""
    vm = arm.vm
    if vm is None or vm.domain is not None or vm.manager != "libvirt" or vm.backing != "file":
        return
    size = vm.page_size or "2M"
    if not _hugetlbfs_mounted(size, mounts):
        raise DomainError(
            f"arm '{arm.name}': manager = \"libvirt\" with backing = \"file\": libvirt backs "
            f"guest RAM with hugetlbfs files only from a mount of {size} pages it knows "
            "(hugetlbfs_mount in /etc/libvirt/qemu.conf, or one mounted before libvirtd "
            "started), not from the one hugelab mounts, and this host has none",
            hint=f"mount one (mount -t hugetlbfs -o pagesize={size} none /dev/hugepages{size}) "
            "and restart libvirtd; or backing = \"memfd\" with page_size, which needs no "
            "mount; or manager = \"qemu\", for which hugelab mounts its own")


def resolve_experiment(exp: Experiment) -> Experiment:
    """`resolve` for every arm that names a domain (no libvirt connection otherwise), after
    checking hugelab's own libvirt guests with file backing (check_own_libvirt_file)."""
    for a in exp.arms:
        check_own_libvirt_file(a)
    if not any(a.vm is not None and a.vm.domain is not None for a in exp.arms):
        return exp
    return replace(exp, arms=tuple(resolve(a) for a in exp.arms))


def _hugetlbfs_mounted(size: str, mounts: str = "/proc/mounts") -> bool:
    """Any hugetlbfs mount of that page size (the default size when none is given: 2M)."""
    want = {"2M": "2M", "1G": "1024M"}[size]
    for line in Path(mounts).read_text().splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[2] == "hugetlbfs":
            opts = dict(o.split("=", 1) for o in parts[3].split(",") if "=" in o)
            if opts.get("pagesize", "2M") == want:
                return True
    return False


# --- the agent ---------------------------------------------------------------------------------

class Agent:
    """qemu-guest-agent commands through libvirt (libvirt_qemu.qemuAgentCommand)."""

    def __init__(self, dom: Any) -> None:
        self.dom = dom
        self.lock = threading.Lock()

    def call(self, command: str, arguments: dict[str, Any] | None = None,
             timeout_s: float = 30.0) -> Any:
        import libvirt_qemu
        lv = libvirt_module()
        msg = json.dumps({"execute": command, **({"arguments": arguments} if arguments else {})})
        try:
            with self.lock:
                out = libvirt_qemu.qemuAgentCommand(self.dom, msg, max(1, int(timeout_s)), 0)
        except lv.libvirtError as exc:
            raise DomainError(f"guest agent: {command}: {exc.get_error_message()}",
                              hint="is qemu-guest-agent installed and running in the guest?"
                              ) from exc
        return json.loads(out).get("return")

    def read(self, path: str) -> str | None:
        """A small guest file (procfs), or None when it cannot be opened."""
        try:
            handle = self.call("guest-file-open", {"path": path, "mode": "r"})
        except DomainError:
            return None
        try:
            chunks = []
            while True:
                r = self.call("guest-file-read", {"handle": handle, "count": 65536})
                chunks.append(base64.b64decode(r.get("buf-b64", "")))
                if r.get("eof") or not r.get("count"):
                    break
            return b"".join(chunks).decode(errors="replace")
        except DomainError:
            return None
        finally:
            try:
                self.call("guest-file-close", {"handle": handle})
            except DomainError:
                pass


class QgaTarget(RemoteTarget):
    """The Target protocol in a user's guest, through qemu-guest-agent."""

    def __init__(self, agent: Agent, name: str, *, slack_s: float = 60.0) -> None:
        super().__init__(name, slack_s=slack_s)
        self.agent = agent

    def read(self, path: str) -> str | None:
        return self.agent.read(path)

    def _install(self, guest_path: str, data: bytes) -> None:
        try:
            handle = self.agent.call("guest-file-open", {"path": guest_path, "mode": "wb"})
            for i in range(0, len(data), COPY_CHUNK):
                self.agent.call("guest-file-write", {
                    "handle": handle,
                    "buf-b64": base64.b64encode(data[i:i + COPY_CHUNK]).decode()})
            self.agent.call("guest-file-close", {"handle": handle})
            pid = self.agent.call("guest-exec", {"path": "/bin/chmod",
                                                 "arg": ["0755", guest_path]})["pid"]
            while not self.agent.call("guest-exec-status", {"pid": pid}).get("exited"):
                time.sleep(0.1)  # guest-exec returns at once: wait for the mode to be set
        except DomainError as exc:
            raise VMError(exc.message) from exc

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        argv = self.with_tools([str(a) for a in argv])
        t0 = time.monotonic()
        try:
            started = self.agent.call("guest-exec", {"path": argv[0], "arg": argv[1:],
                                                     "capture-output": True})
        except DomainError as exc:
            if "No such file" in exc.message or "not found" in exc.message.lower():
                tool = Path(argv[0]).name
                raise ToolMissingError(tool, f"{package_of(tool)} (in the guest "
                                             f"{self.name}, with its package manager)") from exc
            raise
        pid = int(started["pid"])  # guest-exec failed above when the program is missing
        last: dict[str, Any] = {}

        def exited() -> bool:
            last.update(self.agent.call("guest-exec-status", {"pid": pid}))
            return bool(last.get("exited"))

        self._watch(argv, t0, timeout, exited, lambda: pid, lambda: None)
        status = last
        out = base64.b64decode(status.get("out-data", "")).decode(errors="replace")
        err = base64.b64decode(status.get("err-data", "")).decode(errors="replace")
        code = -int(status["signal"]) if status.get("signal") else int(status.get("exitcode", 0))
        if status.get("out-truncated") or status.get("err-truncated"):
            err += "\n[hugelab: the guest agent truncated this output]"
        return self.explain(ExecResult(argv, code, out, err, time.monotonic() - t0, {}))

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None:
        try:
            handle = self.agent.call("guest-file-open", {"path": path, "mode": "w"})
            self.agent.call("guest-file-write", {
                "handle": handle, "buf-b64": base64.b64encode(data.encode()).decode()})
            self.agent.call("guest-file-close", {"handle": handle})
        except DomainError as exc:
            raise VMError(f"guest cannot write {path}: {exc.message}") from exc


# --- the transient copy ------------------------------------------------------------------------

class DomainGuest:
    """A transient copy of the arm's domain for one trial (context manager; a
    hugelab.vm.common.guestapi.Guest)."""

    def __init__(self, spec: VmSpec, *, domain: str, uri: str, name: str = "vm0",
                 access: Access | None = None) -> None:
        self.spec = spec
        self.domain = domain
        self.uri = uri
        self.name = name
        self.access = access or Access()
        self.ssh: Ssh | None = None
        self._target: GuestTarget | None = None
        self.accel = "unknown"
        self.boot_s: float | None = None
        self.dom: Any = None
        self.conn: Any = None
        self.record: Path | None = None
        self.overlays = OVERLAY_ROOT / transient_name(domain, name)
        self.dom_name = self.overlays.name
        self.xml = ""

    @property
    def target(self) -> GuestTarget:
        """The way in (its agent, or SSH) once the copy answered."""
        if self._target is None:
            raise VMError(f"the copy of '{self.domain}' is not running")
        return self._target

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _overlays(self, disks: list[dx.Disk], nvram: str | None) -> tuple[dict[str, str],
                                                                          str | None]:
        """qcow2 overlays over the writable disks (0600: they hold what the guest writes;
        libvirt hands them to its QEMU user), and a private copy of the UEFI variables."""
        OVERLAY_ROOT.mkdir(parents=True, exist_ok=True)
        os.chmod(OVERLAY_ROOT, 0o711)
        self.overlays.mkdir(mode=0o711)
        out = {}
        for i, d in enumerate(x for x in disks if not x.readonly):
            path = self.overlays / f"{i}-{d.target}.qcow2"
            run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", d.format, "-b", d.source,
                 str(path)])
            os.chmod(path, 0o600)
            out[d.source] = str(path)
        vars_copy = None
        if nvram:
            vars_copy = str(self.overlays / "VARS.fd")
            shutil.copyfile(nvram, vars_copy)
            os.chmod(vars_copy, 0o600)
        return out, vars_copy


    def start(self) -> None:
        lv = libvirt_module()
        self.conn = connect(self.uri)
        original = lookup(self.conn, self.domain)
        xml = user_xml(original)
        root = dx.parse(xml)
        disks = dx.disks(root)
        if original.isActive() and any(not d.readonly for d in disks):
            raise DomainError(f"domain '{self.domain}' is running: a second copy of its "
                              "writable disks would run beside it",
                              hint="shut it down first (virsh shutdown), or mark its disks "
                              "<readonly/>")
        # before anything exists that a killed run would leave
        self.record = write_record(self.dom_name, self.uri, self.overlays, self.domain)
        overlays, vars_copy = self._overlays(disks, dx.nvram(root))
        forward = None
        if self.access.ssh:
            self.ssh = Ssh(free_port(), user=self.access.ssh_user, key=self.access.ssh_key,
                           host_key=dx.host_key(root))
            forward = (self.ssh.port, SSH_PORT)
        self.xml = dx.transient_xml(xml, self.spec, name=self.dom_name, overlays=overlays,
                                    private=str(self.overlays), nvram_copy=vars_copy,
                                    ssh_forward=forward)
        t0 = time.monotonic()
        try:  # autodestroy: libvirtd ends the copy when this connection goes (a killed run)
            self.dom = self.conn.createXML(self.xml, lv.VIR_DOMAIN_START_AUTODESTROY)
        except lv.libvirtError as exc:
            file = self.spec.backing == "file"
            raise DomainError(f"libvirt could not start a copy of '{self.domain}': "
                              f"{exc.get_error_message()}",
                              hint="for hugetlbfs file backing libvirt needs its own hugetlbfs "
                              "mount: set hugetlbfs_mount in /etc/libvirt/qemu.conf or mount one "
                              "before libvirtd starts" if file else None) from exc
        self.accel = "kvm" if dx.parse(self.dom.XMLDesc(0)).get("type") == "kvm" else "tcg"
        self._target = self._wait_access(t0)
        self._guest_settings()

    def _guest_settings(self) -> None:
        """The arm's guest layer, written through the agent or SSH (hugelab's own guests get it
        on their kernel command line)."""
        spec = self.spec
        if spec.guest_thp:
            self.target.write_file("/sys/kernel/mm/transparent_hugepage/enabled", spec.guest_thp)
        write_guest_mthp(self.target, spec)
        for kb, pages in ((2048, spec.guest_hugepages_2m), (1048576, spec.guest_hugepages_1g)):
            if pages:
                self.target.write_file(f"/sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages",
                                       str(pages))

    def _wait_access(self, t0: float) -> GuestTarget:
        """The first way into the guest that answers: its agent, or SSH (access = auto tries
        both, every second, until the boot limit)."""
        agent = Agent(self.dom) if self.access.mode != "ssh" else None
        limit = AGENT_WAIT_S.get(self.accel, 600.0)
        last: dict[str, str] = {}
        while time.monotonic() - t0 < limit:
            if agent is not None:
                try:
                    agent.call("guest-ping", timeout_s=2)
                    self.boot_s = time.monotonic() - t0
                    return QgaTarget(agent, self.name)
                except DomainError as exc:
                    last["agent"] = exc.message
            if self.ssh is not None:
                why = self.ssh.ready()
                if why is None:
                    self.boot_s = time.monotonic() - t0
                    return SshTarget(self.ssh, self.name)
                last["ssh"] = why
            if not self.alive():
                raise DomainError(f"the copy of '{self.domain}' stopped while booting",
                                  hint="see its log in /var/log/libvirt/qemu/"
                                  f"{self.dom_name}.log")
            time.sleep(1.0)
        tried = "; ".join(f"{k}: {v}" for k, v in last.items())
        raise DomainError(f"the copy of '{self.domain}' did not answer within {limit:.0f}s "
                          f"({tried})", hint=_ACCESS_HINTS[self.access.mode if self.ssh else "agent"])

    @property
    def qemu_pid(self) -> int:
        try:
            return int((PID_DIR / f"{self.dom_name}.pid").read_text().strip())
        except (OSError, ValueError) as exc:
            raise VMError(f"cannot find the QEMU process of {self.dom_name} "
                          f"({PID_DIR}/{self.dom_name}.pid): {exc}") from exc

    def evidence(self) -> dict[str, Any]:
        ev = qemu_memory_evidence(self.qemu_pid, self.spec.mem_bytes)
        ev["accel"] = self.accel
        ssh = self._target.ssh if isinstance(self._target, SshTarget) else None
        ev["domain"] = {"of": self.domain, "transient": self.dom_name, "uri": self.uri,
                        "access": "ssh" if ssh else "agent"}
        if ssh is not None:  # a demo domain's key is pinned; any other domain's taken as shown
            ev["domain"]["host_key"] = "pinned" if ssh.host_key else "accepted on first contact"
        return ev

    def alive(self) -> bool:
        try:
            return bool(self.dom is not None and self.dom.isActive())
        except HugelabError:
            return False
        except Exception:  # noqa: BLE001 - libvirtError: the domain is gone
            return False

    def close(self) -> None:
        if self.ssh is not None:
            self.ssh.close()
            self.ssh = None
        if self.conn is not None and not destroy(self.conn, self.dom_name):
            return  # still there: the record stays for recover, and so do its overlays
        shutil.rmtree(self.overlays, ignore_errors=True)
        if self.record is not None:
            self.record.unlink(missing_ok=True)
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
            self.conn = None


