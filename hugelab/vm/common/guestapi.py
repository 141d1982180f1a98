"""What a guest trial needs of a guest, whatever kind it is: the one interface every kind of
guest implements, so `hugelab.vm.trial` handles them alike and mypy checks each against it.

The kinds, and where each lives:

- hugelab's own image-less guest under QEMU (`hugelab.vm.own.guest.Guest`), whose target talks
  to hugelab's in-guest agent over virtio-serial (`hugelab.vm.own.agenttarget.AgentTarget`);
- the same guest started and owned by libvirtd (`hugelab.vm.own.libvirt_own.LibvirtGuest`);
- a transient copy of a user's libvirt domain (`hugelab.vm.domains.libvirt_guest.DomainGuest`),
  whose target is its qemu-guest-agent (`hugelab.vm.domains.qga.QgaTarget`) or, for a guest
  without one, SSH (`hugelab.vm.domains.ssh.SshTarget`).

A guest is a context manager: entering it boots the guest and makes its guest layer (THP
modes, pools) true, or raises a `hugelab.errors.VMError` (a `HugelabError`) after cleaning up
what it started; leaving it (or `close`) ends the guest and removes its files and records. A
`close` while a workload still runs ends the guest under it (a server the guest cannot stop).

`apply_guest_layer` makes the guest layer true through any guest's target, the same way in
every kind of guest (THP mode, multi-size THP with `write_guest_mthp`, pools read back).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol, Self

from hugelab.errors import VMError
from hugelab.units import exact
from hugelab.vm.common.spec import VmSpec, guest_mthp_writes
from hugelab.workloads.base import ExecResult


class GuestTarget(Protocol):
    """Where a workload runs in a guest: a `hugelab.workloads.base.Target` that also reads
    and writes guest files and keeps the evidence of the processes it ran."""

    name: str  # the guest's name ("vm0"), as the trial records it

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        """Run argv in the guest to its end (CommandError past `timeout` plus slack);
        ToolMissingError naming the package when the guest lacks argv[0]."""
        ...

    def read_file(self, path: str, *, wait_s: float = 60.0) -> str:
        """A guest file's text (procfs, sysfs); VMError when it cannot be read."""
        ...

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None:
        """Write a guest file (sysfs: THP modes, pools); VMError when it cannot."""
        ...

    def tree(self) -> dict[str, Any]:
        """The peak of the process trees of every exec so far, sampled while they ran
        (hugelab.trial.procscan's fields; {} when nothing was sampled)."""
        ...


class Guest(Protocol):
    """One running guest of a trial (see the module docstring)."""

    @property
    def name(self) -> str:
        """The guest's name in its trial ("vm0")."""
        ...

    @property
    def spec(self) -> VmSpec:
        """What the guest was asked to be: memory, backing, guest layer, port forwards."""
        ...

    @property
    def accel(self) -> str | None:
        """"kvm" or "tcg" once booted ("unknown" where the kind cannot tell)."""
        ...

    @property
    def boot_s(self) -> float | None:
        """Seconds from start until the guest answered; None before."""
        ...

    @property
    def boot_retried(self) -> str | None:
        """Why a first boot was given up (it did not answer) and the guest booted once more;
        None when it was not."""
        ...

    @property
    def target(self) -> GuestTarget:
        """Where workloads run in the guest; VMError when the guest is not running."""
        ...

    @property
    def qemu_pid(self) -> int:
        """The host pid of the guest's QEMU; VMError when there is none."""
        ...

    def evidence(self) -> dict[str, Any]:
        """QEMU's side of the guest's RAM (hugelab.vm.common.evidence) and how it ran."""
        ...

    def alive(self) -> bool:
        """Whether the guest still runs."""
        ...

    def close(self) -> None:
        """End the guest and remove what it left; safe to call twice."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


def write_guest_mthp(target: GuestTarget, spec: VmSpec) -> None:
    """Make guest mthp true through a guest target (its write_file), with a clear error for a
    guest kernel without that size (multi-size THP came in Linux 6.8)."""
    for path, mode in guest_mthp_writes(spec):
        try:
            target.write_file(path, mode)
        except VMError as exc:
            raise VMError(f"the guest cannot set {path} to {mode!r}: {exc.message}",
                          hint="multi-size THP needs a guest kernel of Linux 6.8 or later "
                               "offering that size") from exc


GUEST_THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def apply_guest_layer(target: GuestTarget, spec: VmSpec, *, write_pools: bool) -> None:
    """Make the arm's guest layer true through any guest's target: its THP mode, its
    multi-size THP, and its pools (written here with `write_pools`; hugelab's own guests
    reserve theirs on the kernel command line), each pool checked against the ask.

    `transparent_hugepage=` on a command line is not enough: a kernel with less than 512 MiB
    of RAM turns THP off at boot whatever the command line says."""
    if spec.guest_thp is not None:
        target.write_file(GUEST_THP_ENABLED, spec.guest_thp)
    write_guest_mthp(target, spec)
    for size_kb, want in ((2048, spec.guest_hugepages_2m), (1048576, spec.guest_hugepages_1g)):
        if not want:
            continue
        path = f"/sys/kernel/mm/hugepages/hugepages-{size_kb}kB/nr_hugepages"
        if write_pools:
            target.write_file(path, str(want))
        try:
            got = int(target.read_file(path))
        except VMError:
            got = 0
        if got < want:
            raise VMError(f"the guest reserved {got} of the {want} huge pages of "
                          f"{exact(size_kb)} it was asked for",
                          hint="give the guest more memory, or (1G) a CPU with pdpe1gb")

