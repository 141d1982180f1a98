"""libvirt domain XML for an image-less hugelab guest (pure: a VmSpec in, XML text out).

The same guest `qemu_args.qemu_argv` starts, for users who run their VMs under libvirt
(`virsh define FILE`). Every value goes through `xml.etree.ElementTree`, which escapes it.

Guest RAM is the arm's `<memoryBacking>` (`hugelab.vm.common.backing_xml`).

`numa_node` becomes `<numatune><memory mode='strict' nodeset=N/>` and `cpu_pin` pins every vCPU
and the emulator threads (the whole QEMU process, like `taskset` in the argv) to those CPUs.

Root filesystem, agent and console are the argv's: the host's `/` read-only over virtio-9p with
mount tag ROOT_TAG, a virtio-serial port named AGENT_PORT on a unix socket (path chosen by
libvirt unless given), and the serial console into a log file. No graphics, video, USB or
balloon.

Networking: none unless `port_forwards` names some. libvirt's own `<interface type='user'>`
cannot forward ports over slirp (only its passt backend can, and passt does not confine the
guest), so the NIC is passed to QEMU verbatim through `<qemu:commandline>`: the same
`-netdev user,restrict=on,hostfwd=tcp:127.0.0.1:H-:G` as the argv, with the NIC pinned to PCI
slot 0x1f (libvirt fills slots from 2 upwards and cannot see pass-through devices). libvirt marks
such a domain "tainted: custom-argv"; that is expected.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from hugelab.errors import VMError
from hugelab.vm.common.backing_xml import QEMU_NS, memory_backing
from hugelab.vm.common.cpumodel import libvirt_cpu
from hugelab.vm.common.spec import VmSpec, validate
from hugelab.vm.own.initramfs import AGENT_PORT, ROOT_TAG
from hugelab.vm.own.qemu_args import _cpu_list, guest_cmdline, netdev

DOMAIN_TYPES = {"kvm": "kvm", "tcg": "qemu"}
SERIAL_LOG_DIR = "/var/log/libvirt/qemu"
NIC_PCI_SLOT = "0x1f"  # the last i440fx slot; libvirt fills slots from 2 upwards


def domain_name(name: str) -> str:
    """The libvirt domain name of guest `name` (the argv's `-name hugelab-NAME`)."""
    if not name or "/" in name or any(ord(c) < 32 for c in name):
        raise VMError(f"guest name {name!r} cannot name a libvirt domain",
                      hint="use a non-empty name without '/' or control characters")
    return f"hugelab-{name}"


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def _cpu(dom: ET.Element, spec: VmSpec, accel: str) -> None:
    _sub(dom, "vcpu", str(spec.vcpus), placement="static")
    if spec.cpu_pin:
        cpus = _cpu_list(spec.cpu_pin)
        tune = _sub(dom, "cputune")
        for v in range(spec.vcpus):
            _sub(tune, "vcpupin", vcpu=str(v), cpuset=cpus)
        _sub(tune, "emulatorpin", cpuset=cpus)
    if spec.numa_node is not None:
        _sub(_sub(dom, "numatune"), "memory", mode="strict", nodeset=str(spec.numa_node))
    mode, disabled = libvirt_cpu(accel)  # the CPU of `vm qemu-args` (hugelab.vm.common.cpumodel)
    cpu = _sub(dom, "cpu", mode=mode)
    for name in disabled:
        _sub(cpu, "feature", policy="disable", name=name)


def _os(dom: ET.Element, spec: VmSpec, kernel: str, initrd: str) -> None:
    os_el = _sub(dom, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine="pc")
    _sub(os_el, "kernel", kernel)
    _sub(os_el, "initrd", initrd)
    _sub(os_el, "cmdline", guest_cmdline(spec))
    _sub(_sub(dom, "features"), "acpi")
    _sub(dom, "clock", offset="utc")
    for event in ("on_poweroff", "on_reboot", "on_crash"):  # -no-reboot: the guest just ends
        _sub(dom, event, "destroy")


def _devices(dom: ET.Element, serial_log: str,
             agent_socket: str | None) -> None:
    dev = _sub(dom, "devices")
    fs = _sub(dev, "filesystem", type="mount", accessmode="passthrough", multidevs="remap")
    _sub(fs, "driver", type="path")
    _sub(fs, "source", dir="/")
    _sub(fs, "target", dir=ROOT_TAG)
    _sub(fs, "readonly")
    _sub(dev, "controller", type="virtio-serial", index="0")
    chan = _sub(dev, "channel", type="unix")
    if agent_socket is None:
        _sub(chan, "source", mode="bind")  # libvirt picks a path under its channel directory
    else:
        _sub(chan, "source", mode="bind", path=agent_socket)
    _sub(chan, "target", type="virtio", name=AGENT_PORT)
    serial = _sub(dev, "serial", type="file")
    _sub(serial, "source", path=serial_log)
    _sub(serial, "target", port="0")
    _sub(dev, "controller", type="usb", model="none")
    _sub(_sub(dev, "video"), "model", type="none")
    _sub(dev, "memballoon", model="none")


def qemu_netdev(spec: VmSpec) -> list[str]:
    """The argv's NIC options, with the NIC on a PCI slot libvirt does not hand out itself.

    QEMU creates pass-through devices before libvirt's addressed ones, so an unaddressed NIC
    would take slot 2, which libvirt has given the 9p device."""
    args = netdev(spec)
    return [f"{a},bus=pci.0,addr={NIC_PCI_SLOT}" if a.startswith("virtio-net-pci,") else a
            for a in args]


def domain_xml(spec: VmSpec, *, name: str, kernel: str, initrd: str, accel: str,
               serial_log: str | None = None, agent_socket: str | None = None) -> str:
    """The `<domain>` document for one guest. `accel` must be resolved: kvm or tcg."""
    validate(spec)
    if accel not in DOMAIN_TYPES:
        raise VMError(f"accel {accel!r} must be resolved to kvm or tcg before building XML",
                      hint="call hugelab.vm.own.guest.probe_accel(kernel) for accel='auto'")
    dom_name = domain_name(name)
    ET.register_namespace("qemu", QEMU_NS)
    dom = ET.Element("domain", type=DOMAIN_TYPES[accel])
    _sub(dom, "name", dom_name)
    kib = str(spec.mem_mib * 1024)
    _sub(dom, "memory", kib, unit="KiB")
    _sub(dom, "currentMemory", kib, unit="KiB")
    mb = memory_backing(spec)
    if mb is not None:
        dom.append(mb)
    _cpu(dom, spec, accel)
    _os(dom, spec, str(kernel), str(initrd))
    _devices(dom, serial_log or f"{SERIAL_LOG_DIR}/{dom_name}-serial.log", agent_socket)
    net = qemu_netdev(spec)
    if net:
        cmd = _sub(dom, f"{{{QEMU_NS}}}commandline")
        for arg in net:
            _sub(cmd, f"{{{QEMU_NS}}}arg", value=arg)
    ET.indent(dom, space="  ")
    return ET.tostring(dom, encoding="unicode") + "\n"
