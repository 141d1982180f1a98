"""A trial in a user's own VM: a transient copy of their libvirt domain, reached through
qemu-guest-agent with libvirt's agent API (libvirt-python), evidenced on both sides, destroyed.

- the arm's domain is checked and resolved before any host change (`domainresolve.py`).
- `DomainGuest`: a guest as `hugelab.vm.common.guestapi.Guest` declares it. Before the
  copy starts it writes a 0600 record (domain name, URI, overlay directory) to the state
  directory; `recover_domains()` (called by `hugelab recover` and at every run's start) destroys
  what a killed run left and deletes its overlays. Writable disks become qcow2 overlays over the
  user's images in OVERLAY_ROOT (where libvirt's QEMU user can read them); the user's images and
  persistent definition are never written. A running domain is refused unless every disk is
  read-only: two QEMUs writing one image corrupt it.
- the way in: qemu-guest-agent (`qga.py`) or SSH (`ssh.py`), whichever answers first.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from hugelab.errors import HugelabError, VMError
from hugelab.experiment import VmLayer
from hugelab.proc import run
from hugelab.vm.common.evidence import qemu_memory_evidence
from hugelab.vm.common.guestapi import GuestTarget, apply_guest_layer
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
from hugelab.vm.domains.domainresolve import lookup, user_xml
from hugelab.vm.domains.qga import Agent, QgaTarget
from hugelab.vm.domains.ssh import Ssh, SshTarget
from hugelab.workloads.serverside import free_port

AGENT_WAIT_S = {"kvm": 120.0, "tcg": 300.0}


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


class SilentGuest(DomainError):
    """The copy runs but no way into its guest answered within the boot limit."""


# --- the transient copy ------------------------------------------------------------------------

class DomainGuest:
    """A transient copy of the arm's domain for one trial (context manager; a
    hugelab.vm.common.guestapi.Guest)."""

    def __init__(self, spec: VmSpec, *, domain: str, uri: str, name: str = "vm0",
                 access: Access | None = None, layer: Mapping[str, str] | None = None,
                 keep: Path | None = None) -> None:
        self.spec = spec
        self.domain = domain
        self.uri = uri
        self.name = name
        self.access = access or Access()
        self.ssh: Ssh | None = None
        self._target: GuestTarget | None = None
        self.accel = "unknown"
        self.boot_s: float | None = None
        self.boot_retried: str | None = None  # why the first boot was given up, when it was
        self.dom: Any = None
        self.conn: Any = None
        self.record: Path | None = None
        self.overlays = OVERLAY_ROOT / transient_name(domain, name)
        self.dom_name = self.overlays.name
        # a prepared layer (hugelab.vm.domains.layer): disk -> the overlay this copy's stack over
        self.layer = dict(layer or {})
        # a layer's build: its overlays made in `keep` (a directory of 0711) and kept there
        self.keep = keep
        if keep is not None:
            self.overlays = keep
        self.overlay_names: dict[str, str] = {}  # disk -> its overlay's file name
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
        libvirt hands them to its QEMU user), and a private copy of the UEFI variables; made
        again over the same paths for a second boot."""
        out = {}
        for i, d in enumerate(x for x in disks if not x.readonly):
            path = self.overlays / f"{i}-{d.target}.qcow2"
            under = self.layer.get(d.source)  # the layer's overlay of this disk, when built
            run(["qemu-img", "create", "-q", "-f", "qcow2", "-F",
                 "qcow2" if under else d.format, "-b", under or d.source, str(path)])
            os.chmod(path, 0o600)
            out[d.source] = str(path)
            self.overlay_names[d.source] = path.name
        vars_copy = None
        if nvram:
            vars_copy = str(self.overlays / "VARS.fd")
            shutil.copyfile(nvram, vars_copy)
            os.chmod(vars_copy, 0o600)
        return out, vars_copy


    def start(self) -> None:
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
        if self.keep is None:
            OVERLAY_ROOT.mkdir(parents=True, exist_ok=True)
            os.chmod(OVERLAY_ROOT, 0o711)
            self.overlays.mkdir(mode=0o711)
        overlays, vars_copy = self._overlays(disks, dx.nvram(root))
        forward = None
        if self.access.ssh:
            self.ssh = Ssh(free_port(), user=self.access.ssh_user, key=self.access.ssh_key,
                           host_key=dx.host_key(root))
            forward = (self.ssh.port, SSH_PORT)
        self.xml = dx.transient_xml(xml, self.spec, name=self.dom_name, overlays=overlays,
                                    private=str(self.overlays), nvram_copy=vars_copy,
                                    ssh_forward=forward)
        try:
            self._target = self._boot()
        except SilentGuest as exc:  # a boot that hung (seen once under TCG on a loaded host):
            if not destroy(self.conn, self.dom_name):  # once more, on fresh overlays
                raise
            self.boot_retried = exc.message
            self._overlays(disks, dx.nvram(root))  # the same paths: the XML holds
            try:
                self._target = self._boot()
            except SilentGuest as again:
                raise SilentGuest(f"{again.message}, booted twice", hint=again.hint) from exc
        apply_guest_layer(self.target, self.spec, write_pools=True)  # through agent or SSH

    def _boot(self) -> GuestTarget:
        """The copy started from self.xml, and the first way into it that answers."""
        lv = libvirt_module()
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
        return self._wait_access(t0)

    def _wait_access(self, t0: float) -> GuestTarget:
        """The first way into the guest that answers: its agent, or SSH (access = auto tries
        both, four times a second, until the boot limit)."""
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
            time.sleep(0.25)
        tried = "; ".join(f"{k}: {v}" for k, v in last.items())
        raise SilentGuest(f"the copy of '{self.domain}' did not answer within {limit:.0f}s "
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

    def power_off(self, limit_s: float) -> None:
        """The guest's file systems synced and the guest powered off cleanly (a layer's build:
        every copy over it then mounts a clean file system); past `limit_s`, ended anyway (its
        data was synced)."""
        self.target.exec(["sync"], timeout=limit_s)
        try:
            self.target.exec(["systemctl", "--no-block", "poweroff"], timeout=30)
        except HugelabError:
            pass  # the way in may go before it answers
        deadline = time.monotonic() + limit_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.5)

    def close(self) -> None:
        if self.ssh is not None:
            self.ssh.close()
            self.ssh = None
        if self.conn is not None and not destroy(self.conn, self.dom_name):
            return  # still there: the record stays for recover, and so do its overlays
        if self.keep is None:
            shutil.rmtree(self.overlays, ignore_errors=True)
        if self.record is not None:
            self.record.unlink(missing_ok=True)
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
            self.conn = None


