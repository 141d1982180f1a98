"""hugelab's own image-less guest, started and owned by libvirtd (an arm's vm manager =
"libvirt"), for hosts where libvirt owns every VM.

The guest is the one `Guest` starts with QEMU directly (same kernel, initramfs, agent, memory
backing: `hugelab.vm.own.libvirt_xml.domain_xml`), started as a transient domain with autodestroy
(libvirtd ends it when hugelab's connection goes, as when hugelab is killed). Its files (the
initramfs copy and the serial log) live in a directory under OVERLAY_ROOT that libvirt's QEMU
user can read; a 0600 record in the state directory, written before the domain starts, lets
`hugelab recover` destroy the domain and delete the directory after a kill. QEMU's monitor
belongs to libvirt: QMP evidence (query-memdev) goes through libvirt-qemu's monitor command.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from hugelab.errors import VMError
from hugelab.vm.common import libvirtd
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.own.guest import BOOT_TIMEOUT_S, Guest
from hugelab.vm.own.initramfs import AGENT_PORT
from hugelab.vm.own.libvirt_xml import domain_xml


class LibvirtGuest(Guest):
    """`Guest`, but libvirtd starts, owns and ends its QEMU."""

    def __init__(self, spec: VmSpec, *, name: str = "vm0", uri: str = "qemu:///system",
                 **kw: Any) -> None:
        super().__init__(spec, name=name, **kw)
        self.uri = uri
        self.unique = libvirtd.transient_name("own", name).removeprefix("hugelab-")
        self.dom_name = f"hugelab-{self.unique}"
        self.conn: Any = None
        self.dom: Any = None
        self.record: Path | None = None
        self.xml = ""

    def boot_image(self, kernel: Path) -> Path:
        """The bzImage itself: libvirt's QEMU runs as its own user, who cannot read hugelab's
        private cache of uncompressed kernels (hugelab.vm.common.pvh)."""
        return kernel

    def _workdir(self) -> Path:
        libvirtd.OVERLAY_ROOT.mkdir(parents=True, exist_ok=True)
        os.chmod(libvirtd.OVERLAY_ROOT, 0o711)
        # the record first: nothing may exist that a killed run would leave unrecorded
        work = libvirtd.OVERLAY_ROOT / self.dom_name
        self.record = libvirtd.write_record(self.dom_name, self.uri, work, "hugelab's own guest")
        work.mkdir(mode=0o755)  # libvirt's QEMU user reads the initrd, virtlogd writes logs
        os.chmod(work, 0o755)
        return work

    def _launch(self, kernel: Path, accel: str, initrd: Path) -> None:
        assert self._tmpdir is not None
        lv = libvirtd.libvirt_module()
        copy = self._tmpdir / "initrd.cpio"
        shutil.copyfile(initrd, copy)
        os.chmod(copy, 0o644)
        self.xml = domain_xml(self.spec, name=self.unique, kernel=str(kernel), initrd=str(copy),
                              accel=accel, serial_log=str(self.paths.serial_log))
        self.conn = libvirtd.connect(self.uri)
        t0 = time.monotonic()
        try:
            self.dom = self.conn.createXML(self.xml, lv.VIR_DOMAIN_START_AUTODESTROY)
        except lv.libvirtError as exc:
            raise VMError(f"libvirt could not start guest {self.name}: "
                          f"{exc.get_error_message()}",
                          hint="for hugetlbfs file backing libvirt needs its own hugetlbfs "
                          "mount (hugetlbfs_mount in /etc/libvirt/qemu.conf); memfd needs none"
                          if self.spec.backing == "file" else None) from exc
        self._connect_agent(self._agent_socket(), t0,
                            self.boot_timeout or BOOT_TIMEOUT_S[accel], accel)

    def _agent_socket(self) -> Path:
        """The unix socket libvirt gave hugelab's agent channel (it picks the path)."""
        live = ET.fromstring(self.dom.XMLDesc(0))
        for chan in live.iterfind("devices/channel"):
            target, source = chan.find("target"), chan.find("source")
            if target is not None and target.get("name") == AGENT_PORT and source is not None:
                path = source.get("path")
                if path:
                    return Path(path)
        raise VMError(f"libvirt gave guest {self.name} no socket for hugelab's agent channel")

    @property
    def qemu_pid(self) -> int:
        try:
            return int((libvirtd.PID_DIR / f"{self.dom_name}.pid").read_text().strip())
        except (OSError, ValueError) as exc:
            raise VMError(f"cannot find the QEMU process of {self.dom_name}: {exc}") from exc

    def memdev(self) -> list[dict[str, Any]]:
        import libvirt_qemu
        out = libvirt_qemu.qemuMonitorCommand(self.dom, json.dumps({"execute": "query-memdev"}),
                                              0)
        return list(json.loads(out).get("return", []))

    def evidence(self) -> dict[str, Any]:
        ev = super().evidence()
        ev["domain"] = {"transient": self.dom_name, "uri": self.uri, "manager": "libvirt"}
        return ev

    def alive(self) -> bool:
        try:
            return bool(self.dom is not None and self.dom.isActive())
        except Exception:  # noqa: BLE001 - libvirtError: the domain is gone
            return False

    def close(self) -> None:
        self._closed = True
        if self._channel is not None:
            with contextlib.suppress(Exception):
                self._channel.close()
        self._channel = self._target = None
        if self.conn is not None and not libvirtd.destroy(self.conn, self.dom_name):
            return  # still there: the record stays for recover, and so does its directory
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
        if self.record is not None:
            self.record.unlink(missing_ok=True)
            self.record = None
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None
