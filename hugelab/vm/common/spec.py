"""One guest's spec, whoever starts it (hugelab's own guests or users' domains): its shape, the
`vm` layer's memory backing and the guest layer's huge pages (pure: values in, errors out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hugelab.errors import VMError
from hugelab.kernel import THP_ENABLED as THP_MODES
from hugelab.units import exact, page_kb, page_label

BACKINGS = ("anon", "file", "memfd")
ACCELS = ("auto", "kvm", "tcg")
HUGETLB_SIZES_KB = (2048, 1048576)
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


def guest_mthp_writes(spec: VmSpec) -> list[tuple[str, str]]:
    """(sysfs path, mode) the guest layer writes for guest mthp, smallest size first."""
    out = []
    for label, mode in spec.guest_mthp:
        kb = page_kb(label)
        out.append((f"/sys/kernel/mm/transparent_hugepage/hugepages-{kb}kB/enabled", mode))
    return out


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
        raise VMError(f"hugetlb size {exact(size)} is not supported",
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
                      f"{page_label(size)} page size",
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



def safe_name(name: str) -> str:
    """A name QEMU's option parser reads as one value (a factorial cell's name has commas)."""
    return re.sub(r"[^A-Za-z0-9_.+=-]", "_", name)
