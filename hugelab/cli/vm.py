"""`hugelab vm qemu-args ARM` / `vm libvirt-xml ARM`: an arm's guest as a QEMU command line or a
libvirt domain, for users who start guests themselves."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from hugelab.cli.output import action
from hugelab.errors import ExperimentError, UsageError
from hugelab.experiment import Arm, Experiment, default_experiment, load_experiment
from hugelab.experiment.where import locate
from hugelab.owned import state_dir
from hugelab.vm.common.spec import VmSpec, safe_name
from hugelab.vm.own.initramfs import (
    InitramfsSpec,
    cached_initramfs,
    default_kernel,
    kernel_release,
    modules_dir_for,
)
from hugelab.vm.own.libvirt_xml import domain_name, domain_xml
from hugelab.vm.own.qemu_args import QemuPaths, qemu_argv
from hugelab.vm.trial import net_specs, vm_spec
from hugelab.workloads.registry import build_workload, lookup

AddOpt = Callable[[argparse.ArgumentParser], None]


def register(sub: argparse._SubParsersAction, add_json: AddOpt) -> None:
    vm = sub.add_parser("vm", help="guest tools: print the QEMU options or libvirt domain of an arm")
    vsub = vm.add_subparsers(dest="vm_command", metavar="ACTION", required=True)
    for build in (_qemu_args, _libvirt_xml, _diff, _demo_domain):
        add_json(build(vsub))  # --json last, after each action's own options

def _qemu_args(vsub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    q = action(vsub, cmd_qemu_args, "qemu-args",
               help="print the QEMU command line hugelab uses for an arm's guest",
               description="Prints the full qemu-system-x86_64 argv for ARM of EXPERIMENT: the "
               "guest RAM backend (memory-backend-ram/file/memfd, prealloc, share, "
               "hugetlbsize), the guest kernel command line (transparent_hugepage=, "
               "hugepagesz=/hugepages=), and the image-less root (host / over "
               "virtio-9p, read-only). For a kind with a server (iperf3, redis, "
               "memcached) the guest also gets a NIC on user networking "
               "(restrict=on) with a 127.0.0.1 port forward to its server; the host "
               "port shown is an example (each trial picks a free one). It shows the "
               "guest; it is not a script: the run makes what the paths name (the "
               "initramfs, built and cached in the state directory; the hugetlbfs "
               "mount of a file backing; sockets and logs), so those paths are "
               "placeholders; -kernel shows the host's bzImage, where a run boots "
               "its uncompressed image through QEMU's PVH entry (extracted once into "
               "the cache directory); and accel = auto prints kvm unless --accel "
               "says tcg. To start such a guest yourself, use `hugelab vm "
               "libvirt-xml` (its --initrd).")
    _arm_guest_args(q, "accelerator to print for accel = auto (default: kvm)")
    return q


def _arm_guest_args(p: argparse.ArgumentParser, accel_help: str) -> None:
    """ARM [EXPERIMENT] [--accel]: the arm's guest that `qemu-args` and `libvirt-xml` print."""
    p.add_argument("arm", help="arm name")
    p.add_argument("experiment", type=Path, nargs="?", help="experiment file (default: built-in)")
    p.add_argument("--accel", choices=("kvm", "tcg"), default=None, help=accel_help)

def _libvirt_xml(vsub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    x = action(vsub, cmd_libvirt_xml, "libvirt-xml",
               help="print a libvirt domain XML for an arm's guest (for virsh define)",
               description="Prints the libvirt <domain> of ARM's guest, the same guest `vm "
               "qemu-args` prints: <memoryBacking> with <hugepages><page size=.../> "
               "and <source type='file'|'memfd'/> for hugetlb-backed RAM (anon: "
               "none, THP follows the host), <access mode='shared'/> for share, "
               "<allocation mode='immediate'/> for prealloc, <numatune> and "
               "<cputune> pins, direct kernel boot with the guest command line, the "
               "host / read-only over virtio-9p, the agent's virtio-serial channel "
               "and the serial console in a log file. For file backing libvirt uses "
               "its own hugetlbfs mount (qemu.conf hugetlbfs_mount). A NIC with "
               "127.0.0.1 port forwards (iperf3, redis) is passed through "
               "<qemu:commandline> (user networking, restrict=on). Use it with: "
               "virsh define FILE. libvirt's QEMU runs as its own user: kernel and "
               "initrd must be readable by it.")
    _arm_guest_args(x, "domain type for accel = auto: kvm, or tcg (type 'qemu') (default: kvm)")
    x.add_argument("--initrd", type=Path, default=None,
                   help="guest initramfs (default: build hugelab's, cached in the state dir; "
                   "copy it where libvirt's QEMU can read it)")
    return x


def _diff(vsub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    d = action(vsub, cmd_diff, "diff",
               help="show the change an arm makes to your own libvirt domain (vm domain = ...)",
               description='For an arm whose [arms.vm] names a libvirt domain (domain = "NAME"), '
               "prints a unified diff of the domain's persistent XML against the "
               "same domain with the arm's guest memory: <memoryBacking> (hugepages "
               "and page size, source file or memfd, allocation immediate, access "
               "shared), <memory> and <vcpu>. Apply it by hand with `virsh edit "
               "NAME` to run that configuration yourself. hugelab itself never "
               "changes the definition: each trial runs a transient copy with disk "
               "overlays.")
    d.add_argument("arm", help="arm (or cell) name")
    d.add_argument("experiment", type=Path, help="experiment file")
    return d


def _demo_domain(vsub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    m = action(vsub, cmd_demo_domain, "demo-domain",
               help="build a small Debian image and define a libvirt domain booting it",
               description="Builds hugelab's Debian bookworm guest image with debootstrap "
               "(qemu-guest-agent, sysbench, stress-ng, an SSH server, PostgreSQL, "
               "MariaDB, Redis, memcached and a JRE for server arms in the guest; a "
               "few minutes the first time, then cached by its recipe in "
               "/var/cache/hugelab or $HUGELAB_CACHE_DIR), copies it where libvirt's "
               "QEMU can read it and defines domain NAME booting it directly from "
               "its kernel and initrd, its sshd taking hugelab's own key (made once "
               "in the state directory, ssh/id_ed25519). For trying `domain = NAME` "
               "in an experiment when you have no VM at hand. A domain of that name "
               "defined from the same image and key is left as it is; one of the "
               "same image with another key (another state directory's) is defined "
               "again for this key, its copies kept; one of an older image is copied "
               "and defined again; any other is refused.")
    m.add_argument("name", nargs="?", default="hugelab-demo-debian", help="domain name")
    m.add_argument("--uri", default="qemu:///system", help="libvirt URI (qemu:///system)")
    m.add_argument("--accel", choices=("kvm", "tcg"), default="tcg",
                   help="domain type: kvm, or tcg (type 'qemu', the default: works anywhere)")
    return m


def _arm_named(exp: Experiment, name: str) -> Arm:
    """The arm (or cell) NAME of `exp`, or a UsageError that lists its arms."""
    arm = next((a for a in exp.arms if a.name == name), None)
    if arm is None:
        raise UsageError(f"no arm '{name}'", hint=f"arms: {', '.join(a.name for a in exp.arms)}")
    return arm


def _hugetlbfs() -> dict[str, Path]:
    """The hugetlbfs mounts a guest's file-backed memory uses, by page size."""
    return {s: state_dir() / f"hugetlbfs-{s}" for s in ("2M", "1G")}


def _arm_spec(args: argparse.Namespace) -> tuple[str, VmSpec, str, str]:
    """(arm name, spec, kernel, resolved accel) of ARM in EXPERIMENT."""
    exp = load_experiment(args.experiment) if args.experiment else default_experiment()
    arm = _arm_named(exp, args.arm)
    if arm.vm is None:
        raise UsageError(f"arm '{arm.name}' runs natively: it has no [arms.vm] layer")
    if arm.vm.domain is not None:  # a copy of the user's own domain: its XML is theirs
        cmd = shlex.join(["hugelab", "vm", "diff", arm.name,
                          *([str(args.experiment)] if args.experiment else [])])
        raise UsageError(f"arm '{arm.name}' runs in your libvirt domain '{arm.vm.domain}', not "
                         "in a guest hugelab makes: there is no command line or domain of "
                         "hugelab's to print",
                         hint=f"{cmd} shows the change the arm makes to your domain")
    table = exp.workload_for(arm)  # a factorial cell: its scenario's values
    try:
        built = build_workload(str(table["kind"]), {k: v for k, v in table.items() if k != "kind"})
    except ExperimentError as exc:
        if args.experiment is None:
            raise
        raise locate(exc, args.experiment) from None
    size = getattr(built, "size_bytes", None)  # a buffer the guest's memory must hold
    spec = vm_spec(arm, size, _hugetlbfs())
    server = lookup(str(table.get("kind", ""))).server
    if server is not None:  # server in the guest: a NIC and a 127.0.0.1 forward (port: example)
        spec = net_specs(spec, 1, int(table.get("port") or server.port))[0]
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


def cmd_diff(args: argparse.Namespace) -> int:
    from hugelab.vm.common.libvirtd import connect
    from hugelab.vm.domains import domain as dx
    from hugelab.vm.domains import domainresolve as lg
    exp = load_experiment(args.experiment)
    arm = _arm_named(exp, args.arm)
    if arm.vm is None or arm.vm.domain is None:
        raise UsageError(f"arm '{arm.name}' does not name a libvirt domain",
                         hint="set domain = \"NAME\" in its [arms.vm] (or [vm])")
    arm = lg.resolve(arm, check=False)  # runs nothing: no mount or state checks
    assert arm.vm is not None and arm.vm.domain is not None
    spec = vm_spec(arm, None, _hugetlbfs())
    conn = connect(arm.vm.uri)
    try:
        xml = lg.user_xml(lg.lookup(conn, arm.vm.domain))
    finally:
        conn.close()
    text = dx.diff(xml, dx.with_arm(xml, spec), name=arm.vm.domain)
    if args.json:
        from hugelab.cli.output import print_json
        print_json({"arm": arm.name, "domain": arm.vm.domain, "uri": arm.vm.uri, "diff": text})
    else:
        print(text or f"no change: domain '{arm.vm.domain}' already runs as arm '{arm.name}'",
              end="" if text else "\n")
    return 0


def cmd_demo_domain(args: argparse.Namespace) -> int:
    from hugelab.host.control import require_root
    from hugelab.vm.domains.demo_domain import define_image_domain, demo_key
    require_root("hugelab vm demo-domain")
    home = define_image_domain(args.name, uri=args.uri, accel=args.accel,
                               progress=None if args.json else
                               (lambda msg: print(f"image: {msg}", file=sys.stderr)))
    if args.json:
        from hugelab.cli.output import print_json
        print_json({"domain": args.name, "uri": args.uri, "files": str(home),
                    "ssh_key": str(demo_key())})
    else:
        print(f"domain '{args.name}' is defined at {args.uri} (files in {home}); use it with "
              f'domain = "{args.name}" in an experiment\'s [vm] table (through its guest '
              f'agent; for SSH add access = "ssh" and ssh_key = "{demo_key()}")')
    return 0
