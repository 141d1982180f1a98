"""A user's domain as an arm runs it, checked before any host change: libvirtd answers, the
domain exists and is not running with writable disks, a hugetlbfs mount libvirt knows exists
for file-backed RAM; an arm that did not set `mem` / `vcpus` takes the domain's own (read from
its inactive XML). hugelab's own guests under libvirtd with file backing are checked too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from hugelab import kernel
from hugelab.experiment import Arm, Experiment
from hugelab.vm.common.libvirtd import DomainError, connect, libvirt_module
from hugelab.vm.domains import domain as dx
from hugelab.vm.domains.demokey import demo_key_path, public_half
from hugelab.vm.domains.imagerecipe import SSH_KEY_ARG

LOCAL_URIS = ("qemu:///system",)


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
        if check:
            _check_ssh_key(arm, root)
    finally:
        conn.close()
    return replace(arm, vm=replace(vm, mem_mib=vm.mem_mib or dx.memory_mib(root),
                                   vcpus=vm.vcpus or dx.vcpus(root)))


def _check_ssh_key(arm: Arm, root: Any) -> None:
    """An SSH arm's key against the key a demo domain's kernel command line lets in: a
    mismatch would fail every trial's boot with "Permission denied (publickey)" 300 s later
    (a demo domain defined under another state directory, an example's key path kept)."""
    vm = arm.vm
    assert vm is not None
    wanted = dx.kernel_ssh_key(root, SSH_KEY_ARG)
    given = public_half(Path(vm.ssh_key)) if vm.access == "ssh" and vm.ssh_key else None
    if wanted is None or given is None or given == wanted:
        return
    ours = demo_key_path()
    fix = f'ssh_key = "{ours}" (this state directory\'s key, which the domain takes)' \
        if public_half(ours) == wanted else \
        f"run `hugelab vm demo-domain {vm.domain}` again to let this state directory's key in, " \
        f'then ssh_key = "{ours}"'
    raise DomainError(f"arm '{arm.name}': domain '{vm.domain}' lets in over SSH only the key its "
                      f"kernel command line names ({SSH_KEY_ARG}), and ssh_key = "
                      f"\"{vm.ssh_key}\" is another key",
                      hint=fix)


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
    """Any hugetlbfs mount of that page size (a mount without pagesize= has the default: 2M)."""
    want = {"2M": "2M", "1G": "1024M"}[size]
    return any((m.pagesize or "2M") == want
               for m in kernel.hugetlbfs_mounts(Path(mounts).read_text()))
