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

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hugelab.errors import VMError
from hugelab.vm.own.initramfs import AGENT_PORT, ROOT_TAG

BACKINGS = ("anon", "file", "memfd")
ACCELS = ("auto", "kvm", "tcg")
THP_MODES = ("always", "madvise", "never")
HUGETLB_SIZES_KB = (2048, 1048576)
HOST_FWD_ADDR = "127.0.0.1"  # the only host address a guest port forward ever binds
GUEST_HEADROOM_MIB = 160  # what the guest kernel + agent need besides its hugetlb pools


@dataclass(frozen=True)
class VmSpec:
    """One guest's shape and memory backing (the `vm` and `guest` layers of an arm)."""

    mem_mib: int = 512
    vcpus: int = 1
    backing: str = "anon"  # anon | file | memfd
    prealloc: bool = False
    share: bool = False
    hugetlbfs_path: str | None = None  # file backing: a hugetlbfs mount point
    hugetlb_size_kb: int | None = None  # memfd: hugetlbsize; file: expected page size (checked)
    numa_node: int | None = None  # bind guest RAM to this host node
    cpu_pin: tuple[int, ...] | None = None  # host CPUs for the whole QEMU process
    kernel: str | None = None  # bzImage; None = the host's own or newest in /boot
    accel: str = "auto"  # auto | kvm | tcg
    guest_cmdline_extra: tuple[str, ...] = ()
    guest_thp: str | None = None  # always | madvise | never; None = guest kernel default
    guest_hugepages_2m: int = 0
    # guest multi-size THP, (size, mode) pairs: ("64K", "always") -> hugepages-64kB/enabled
    guest_mthp: tuple[tuple[str, str], ...] = ()
    guest_hugepages_1g: int = 0
    # (host port, guest port) TCP forwards: 127.0.0.1:host on the host -> 10.0.2.15:guest
    port_forwards: tuple[tuple[int, int], ...] = ()

    @property
    def mem_bytes(self) -> int:
        return self.mem_mib << 20


@dataclass(frozen=True)
class QemuPaths:
    """Host-side files of one running guest (all inside its private temp directory)."""

    serial_log: Path
    qmp_socket: Path
    agent_socket: Path
    initrd: Path


def guest_mthp_writes(spec: VmSpec) -> list[tuple[str, str]]:
    """(sysfs path, mode) the guest layer writes for guest mthp, smallest size first."""
    out = []
    for label, mode in spec.guest_mthp:
        kb = int(label[:-1]) * (1024 if label.endswith("M") else 1)
        out.append((f"/sys/kernel/mm/transparent_hugepage/hugepages-{kb}kB/enabled", mode))
    return out


def write_guest_mthp(target: Any, spec: VmSpec) -> None:
    """Make guest mthp true through a guest target (its write_file), with a clear error for a
    guest kernel without that size (multi-size THP came in Linux 6.8)."""
    for path, mode in guest_mthp_writes(spec):
        try:
            target.write_file(path, mode)
        except VMError as exc:
            raise VMError(f"the guest cannot set {path} to {mode!r}: {exc.message}",
                          hint="multi-size THP needs a guest kernel of Linux 6.8 or later "
                               "offering that size") from exc


def _hugetlb_label(size_kb: int) -> str:
    return "1G" if size_kb == 1048576 else f"{size_kb // 1024}M"


def _validate_shape(spec: VmSpec) -> None:
    if spec.mem_mib < 128:
        raise VMError(f"guest memory {spec.mem_mib} MiB is too small",
                      hint="give the guest at least 128 MiB (256-512 MiB under TCG)")
    if spec.vcpus < 1:
        raise VMError(f"vcpus must be >= 1, not {spec.vcpus}")
    if spec.accel not in ACCELS:
        raise VMError(f"unknown accel {spec.accel!r}", hint=f"use one of {', '.join(ACCELS)}")
    if spec.numa_node is not None and spec.numa_node < 0:
        raise VMError(f"numa_node must be >= 0, not {spec.numa_node}")
    if spec.cpu_pin is not None and (not spec.cpu_pin or min(spec.cpu_pin) < 0):
        raise VMError(f"cpu_pin must list host CPU numbers, not {spec.cpu_pin!r}")


def _validate_backing(spec: VmSpec) -> None:
    if spec.backing not in BACKINGS:
        raise VMError(f"unknown vm backing {spec.backing!r}",
                      hint=f"use one of {', '.join(BACKINGS)}")
    size = spec.hugetlb_size_kb
    if size is not None and size not in HUGETLB_SIZES_KB:
        raise VMError(f"hugetlb size {size} kB is not supported",
                      hint="use 2048 (2M) or 1048576 (1G)")
    if spec.backing == "anon":
        if spec.hugetlbfs_path or size is not None:
            raise VMError("anon backing takes no hugetlbfs path or hugetlb size",
                          hint="use backing='file' (hugetlbfs) or 'memfd' (hugetlb memfd)")
    elif spec.backing == "file":
        if not spec.hugetlbfs_path:
            raise VMError("file backing needs a hugetlbfs mount path",
                          hint="mount one (mount -t hugetlbfs -o pagesize=2M none DIR) "
                               "and set hugetlbfs_path")
    elif spec.hugetlbfs_path:
        raise VMError("memfd backing takes no hugetlbfs path",
                      hint="set hugetlb_size_kb (2048 or 1048576) for a hugetlb memfd")
    if size is not None and spec.mem_bytes % (size * 1024):
        raise VMError(f"guest memory {spec.mem_mib} MiB is not a multiple of the "
                      f"{_hugetlb_label(size)} page size",
                      hint="round mem_mib up to a whole number of huge pages")


def _validate_guest(spec: VmSpec) -> None:
    if spec.guest_thp is not None and spec.guest_thp not in THP_MODES:
        raise VMError(f"unknown guest THP mode {spec.guest_thp!r}",
                      hint=f"use one of {', '.join(THP_MODES)}")
    if spec.guest_hugepages_2m < 0 or spec.guest_hugepages_1g < 0:
        raise VMError("guest hugetlb pool sizes must be >= 0")
    pool_mib = spec.guest_hugepages_2m * 2 + spec.guest_hugepages_1g * 1024
    if spec.guest_hugepages_1g and pool_mib + 1024 + GUEST_HEADROOM_MIB > spec.mem_mib:
        # gigantic pages need 1G-aligned free gigabytes; the first one holds the kernel
        raise VMError(f"{spec.guest_hugepages_1g} guest 1G pages need more than "
                      f"{spec.mem_mib} MiB of guest memory",
                      hint=f"give the guest at least {pool_mib + 1024 + GUEST_HEADROOM_MIB} MiB")
    if pool_mib and pool_mib + GUEST_HEADROOM_MIB > spec.mem_mib:
        raise VMError(f"guest pools ({pool_mib} MiB) leave less than {GUEST_HEADROOM_MIB} MiB "
                      f"of the guest's {spec.mem_mib} MiB for its kernel",
                      hint="give the guest more memory or reserve fewer guest huge pages")


def _validate_net(spec: VmSpec) -> None:
    hosts: set[int] = set()
    for fwd in spec.port_forwards:
        if (not isinstance(fwd, tuple) or len(fwd) != 2
                or not all(isinstance(p, int) and not isinstance(p, bool) for p in fwd)):
            raise VMError(f"port forward {fwd!r} must be a (host port, guest port) pair")
        if not all(0 < p < 65536 for p in fwd):
            raise VMError(f"port forward {fwd!r} has a port outside 1-65535")
        if fwd[0] in hosts:
            raise VMError(f"host port {fwd[0]} is forwarded twice")
        hosts.add(fwd[0])


def validate(spec: VmSpec) -> None:
    """Raise VMError (with a hint) for a combination QEMU or the guest cannot honour."""
    _validate_shape(spec)
    _validate_backing(spec)
    _validate_guest(spec)
    _validate_net(spec)


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
            parts += ["hugetlb=on", f"hugetlbsize={_hugetlb_label(spec.hugetlb_size_kb)}"]
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


def safe_name(name: str) -> str:
    """A name QEMU's option parser reads as one value (a factorial cell's name has commas)."""
    return re.sub(r"[^A-Za-z0-9_.+=-]", "_", name)


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
        "-cpu", "host" if accel == "kvm" else "max",
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
