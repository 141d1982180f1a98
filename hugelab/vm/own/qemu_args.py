"""QEMU command line for an image-less hugelab guest (pure: values in, argv out).

Guest RAM is always one explicit memory backend (`-machine ...,memory-backend=mem0`), so the
`vm` layer's backing is exactly what the arm asked for:

- `anon`  -> `memory-backend-ram`. QEMU madvise()s guest RAM with MADV_HUGEPAGE, so it gets THP
  whenever the host THP mode is `always` or `madvise`, and 4k pages when it is `never`.
- `file`  -> `memory-backend-file` with `mem-path` on a hugetlbfs mount (hugetlb pages of the
  mount's page size, taken from the host pool of that size).
- `memfd` -> `memory-backend-memfd`, with `hugetlb=on,hugetlbsize=` when a hugetlb size is named
  (plain shmem memfd otherwise).

The guest kernel command line carries the guest layer: `transparent_hugepage=` and the guest's
hugetlb pools (`hugepagesz=2M hugepages=N`, `hugepagesz=1G hugepages=N`).

Networking is off unless `port_forwards` names some: then the guest gets one virtio NIC on QEMU
user networking with `restrict=on` (the guest can reach nothing outside, the host included) and
one `hostfwd` per (host port, guest port) pair, always bound to 127.0.0.1 on the host. The
guest's /init gives the NIC slirp's default address (initramfs.GUEST_NET_ADDR).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hugelab.errors import VMError
from hugelab.units import page_label
from hugelab.vm.common.cpumodel import qemu_cpu
from hugelab.vm.common.spec import VmSpec, safe_name, validate
from hugelab.vm.own.initramfs import AGENT_PORT, ROOT_TAG

HOST_FWD_ADDR = "127.0.0.1"  # the only host address a guest port forward ever binds


@dataclass(frozen=True)
class QemuPaths:
    """Host-side files of one running guest (all inside its private temp directory)."""

    serial_log: Path
    qmp_socket: Path
    agent_socket: Path
    initrd: Path


def netdev(spec: VmSpec) -> list[str]:
    """`-netdev`/`-device` options for the guest NIC; none without port forwards.

    User networking with restrict=on: the guest reaches nothing outside; only the listed
    forwards, bound to 127.0.0.1 on the host, reach the guest."""
    if not spec.port_forwards:
        return []
    fwds = ",".join(f"hostfwd=tcp:{HOST_FWD_ADDR}:{host}-:{guest}"
                    for host, guest in spec.port_forwards)
    return ["-netdev", f"user,id=net0,restrict=on,{fwds}",
            "-device", "virtio-net-pci,netdev=net0"]


def memory_backend(spec: VmSpec) -> str:
    """The `-object memory-backend-*` value for guest RAM (id mem0)."""
    size = f"size={spec.mem_mib}M"
    if spec.backing == "anon":
        parts = ["memory-backend-ram", "id=mem0", size]
    elif spec.backing == "file":
        parts = ["memory-backend-file", "id=mem0", size, f"mem-path={spec.hugetlbfs_path}"]
    else:
        parts = ["memory-backend-memfd", "id=mem0", size]
        if spec.hugetlb_size_kb is not None:
            parts += ["hugetlb=on", f"hugetlbsize={page_label(spec.hugetlb_size_kb)}"]
    parts.append(f"prealloc={'on' if spec.prealloc else 'off'}")
    parts.append(f"share={'on' if spec.share else 'off'}")
    if spec.numa_node is not None:
        parts += [f"host-nodes={spec.numa_node}", "policy=bind"]
    return ",".join(parts)


def guest_cmdline(spec: VmSpec) -> str:
    """Kernel command line: serial console, our init, and the guest layer's huge pages."""
    args = ["console=ttyS0", "loglevel=4", "panic=-1", "rdinit=/init", "8250.nr_uarts=1",
            "no_timer_check"]
    if spec.guest_thp is not None:
        args.append(f"transparent_hugepage={spec.guest_thp}")
    if spec.guest_hugepages_1g:
        args += ["hugepagesz=1G", f"hugepages={spec.guest_hugepages_1g}"]
    if spec.guest_hugepages_2m:
        args += ["hugepagesz=2M", f"hugepages={spec.guest_hugepages_2m}"]
    if spec.port_forwards:
        args.append("hugelab.net=1")  # /init brings up eth0
    args += list(spec.guest_cmdline_extra)
    return " ".join(args)


def _cpu_list(cpus: tuple[int, ...]) -> str:
    return ",".join(str(c) for c in sorted(set(cpus)))


def qemu_argv(spec: VmSpec, paths: QemuPaths, *, kernel: str | Path, accel: str | None = None,
              qemu: str = "qemu-system-x86_64", name: str = "vm0") -> list[str]:
    """Full argv for one guest. `accel` overrides spec.accel and must be resolved (kvm|tcg)."""
    validate(spec)
    accel = accel or spec.accel
    if accel not in ("kvm", "tcg"):
        raise VMError(f"accel {accel!r} must be resolved to kvm or tcg before building argv",
                      hint="call hugelab.vm.own.guest.probe_accel(kernel) for accel='auto'")
    argv: list[str] = []
    if spec.cpu_pin:
        argv += ["taskset", "--cpu-list", _cpu_list(spec.cpu_pin)]
    argv += [
        qemu,
        "-name", f"hugelab-{safe_name(name)},debug-threads=on",
        "-machine", "pc,memory-backend=mem0",
        "-accel", accel,
        "-cpu", qemu_cpu(accel),
        "-smp", str(spec.vcpus),
        "-m", f"{spec.mem_mib}M",
        "-object", memory_backend(spec),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-chardev", f"file,id=con0,path={paths.serial_log}",
        "-serial", "chardev:con0",
        "-chardev", f"socket,id=qmp0,path={paths.qmp_socket},server=on,wait=off",
        "-mon", "chardev=qmp0,mode=control",
        "-fsdev", "local,id=fsroot,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", f"virtio-9p-pci,fsdev=fsroot,mount_tag={ROOT_TAG}",
        "-device", "virtio-serial-pci,id=vser0",
        "-chardev", f"socket,id=agent0,path={paths.agent_socket},server=on,wait=off",
        "-device", f"virtserialport,bus=vser0.0,chardev=agent0,name={AGENT_PORT}",
        *netdev(spec),
        "-kernel", str(kernel),
        "-initrd", str(paths.initrd),
        "-append", guest_cmdline(spec),
    ]
    return argv
