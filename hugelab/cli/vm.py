"""`hugelab vm qemu-args ARM` / `vm libvirt-xml ARM`: an arm's guest as a QEMU command line or a
libvirt domain, for users who start guests themselves."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from pathlib import Path

from hugelab.errors import UsageError
from hugelab.experiment import default_experiment, load_experiment
from hugelab.host.journal import state_dir
from hugelab.vm.initramfs import (
    InitramfsSpec,
    cached_initramfs,
    default_kernel,
    kernel_release,
    modules_dir_for,
)
from hugelab.vm.libvirt_xml import domain_name, domain_xml
from hugelab.vm.netserver import GUEST_PORTS
from hugelab.vm.qemu_args import QemuPaths, VmSpec, qemu_argv, safe_name
from hugelab.vm.trial import net_specs, vm_spec

AddOpt = Callable[[argparse.ArgumentParser], None]


def register(sub: argparse._SubParsersAction, add_json: AddOpt) -> None:
    vm = sub.add_parser("vm", help="guest tools: print the QEMU options or libvirt domain of an arm")
    vsub = vm.add_subparsers(dest="vm_command", metavar="ACTION", required=True)
    q = vsub.add_parser(
        "qemu-args", help="print the QEMU command line hugelab uses for an arm's guest",
        description="Prints the full qemu-system-x86_64 argv for ARM of EXPERIMENT: the guest "
        "RAM backend (memory-backend-ram/file/memfd, prealloc, share, hugetlbsize), the guest "
        "kernel command line (transparent_hugepage=, hugepagesz=/hugepages=), and the image-less "
        "root (host / over virtio-9p, read-only). For iperf3 and redis the guest also gets a NIC on "
        "user networking (restrict=on) with a 127.0.0.1 port forward to its server; the host "
        "port shown is an example (each trial picks a free one). Paths of sockets and logs are "
        "placeholders.")
    q.add_argument("arm", help="arm name")
    q.add_argument("experiment", type=Path, nargs="?", help="experiment file (default: built-in)")
    q.add_argument("--accel", choices=("kvm", "tcg"), default=None,
                   help="accelerator to print for accel = auto (default: kvm)")
    add_json(q)
    q.set_defaults(func=cmd_qemu_args)
    x = vsub.add_parser(
        "libvirt-xml", help="print a libvirt domain XML for an arm's guest (for virsh define)",
        description="Prints the libvirt <domain> of ARM's guest, the same guest `vm qemu-args` "
        "prints: <memoryBacking> with <hugepages><page size=.../> and <source type='file'|"
        "'memfd'/> for hugetlb-backed RAM (anon: none, THP follows the host), <access "
        "mode='shared'/> for share, <allocation mode='immediate'/> for prealloc, <numatune> and "
        "<cputune> pins, direct kernel boot with the guest command line, the host / read-only "
        "over virtio-9p, the agent's virtio-serial channel and the serial console in a log "
        "file. For file backing libvirt uses its own hugetlbfs mount (qemu.conf "
        "hugetlbfs_mount). A NIC with 127.0.0.1 port forwards (iperf3, redis) is passed through "
        "<qemu:commandline> (user networking, restrict=on). Use it with: virsh define FILE. "
        "libvirt's QEMU runs as its own user: kernel and initrd must be readable by it.")
    x.add_argument("arm", help="arm name")
    x.add_argument("experiment", type=Path, nargs="?", help="experiment file (default: built-in)")
    x.add_argument("--accel", choices=("kvm", "tcg"), default=None,
                   help="domain type for accel = auto: kvm, or tcg (type 'qemu') (default: kvm)")
    x.add_argument("--initrd", type=Path, default=None,
                   help="guest initramfs (default: build hugelab's, cached in the state dir; "
                   "copy it where libvirt's QEMU can read it)")
    add_json(x)
    x.set_defaults(func=cmd_libvirt_xml)


def _arm_spec(args: argparse.Namespace) -> tuple[str, VmSpec, str, str]:
    """(arm name, spec, kernel, resolved accel) of ARM in EXPERIMENT."""
    exp = load_experiment(args.experiment) if args.experiment else default_experiment()
    arm = next((a for a in exp.arms if a.name == args.arm), None)
    if arm is None:
        raise UsageError(f"no arm '{args.arm}'", hint=f"arms: {', '.join(a.name for a in exp.arms)}")
    if arm.vm is None:
        raise UsageError(f"arm '{arm.name}' runs natively: it has no [arms.vm] layer")
    size = None
    from hugelab.workloads.hugelab_mem import parse_size
    table = exp.workload_for(arm)  # a factorial cell: its scenario's values
    if "size" in table:
        size = parse_size(str(table["size"]))
    hugetlbfs = {s: state_dir() / f"hugetlbfs-{s}" for s in ("2M", "1G")}
    spec = vm_spec(arm, size, hugetlbfs)
    kind = str(table.get("kind", ""))
    if kind in GUEST_PORTS:  # server in the guest: a NIC and a 127.0.0.1 forward (port: example)
        spec = net_specs(spec, 1, int(table.get("port") or GUEST_PORTS[kind]))[0]
    kernel = spec.kernel or str(default_kernel())
    accel = args.accel or (spec.accel if spec.accel != "auto" else "kvm")
    return arm.name, spec, kernel, accel


def cmd_qemu_args(args: argparse.Namespace) -> int:
    name, spec, kernel, accel = _arm_spec(args)
    run_dir = Path("/run/hugelab") / safe_name(name)  # a cell's name has commas, spaces
    paths = QemuPaths(run_dir / "serial.log", run_dir / "qmp.sock", run_dir / "agent.sock",
                      run_dir / "initrd.cpio")
    argv = qemu_argv(spec, paths, kernel=kernel, accel=accel, name=name)
    if args.json:
        from hugelab.cli.output import print_json
        print_json({"arm": name, "argv": argv})
    else:
        print(shlex.join(argv))
    return 0


def cmd_libvirt_xml(args: argparse.Namespace) -> int:
    name, spec, kernel, accel = _arm_spec(args)
    initrd = args.initrd
    if initrd is None:
        release = kernel_release(Path(kernel))
        initrd = cached_initramfs(InitramfsSpec(release, modules_dir_for(release)),
                                  state_dir() / "initramfs")
    xml = domain_xml(spec, name=safe_name(name), kernel=kernel, initrd=str(initrd), accel=accel)
    if args.json:
        from hugelab.cli.output import print_json
        print_json({"arm": name, "domain": domain_name(safe_name(name)), "xml": xml})
    else:
        print(xml, end="")
    return 0
