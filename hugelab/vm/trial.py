"""One trial of a guest arm: boot the arm's guests, run the workload in all of them at once,
collect host-side (QEMU smaps) and guest-side (vmstat) evidence, shut everything down.

Client/server workloads (a kind that declares `server`) run host<->guest: the server in each
guest, the client on the host against 127.0.0.1:P, where P is a free host port forwarded (QEMU
user networking, restrict=on) to the server's port in that guest (hugelab.vm.netserver)."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hugelab.errors import HugelabError, internal_error
from hugelab.experiment import Arm
from hugelab.host.control import size_kb_from_name
from hugelab.host.paths import REAL, HostPaths, parse_vmstat, read_text
from hugelab.proc import carry
from hugelab.trial.native import NativeTarget
from hugelab.units import page_kb, page_label
from hugelab.vm import reps
from hugelab.vm.common.evidence import qemu_folio_evidence
from hugelab.vm.common.guestapi import Guest
from hugelab.vm.common.spec import VmSpec, validate
from hugelab.vm.netserver import GuestServer
from hugelab.workloads.base import Target, Workload, WorkloadResult
from hugelab.workloads.registry import kind_of
from hugelab.workloads.serverkind import ServerKind
from hugelab.workloads.serverside import LOOPBACK, free_port

if TYPE_CHECKING:
    from hugelab.vm.domains.layer import Layer

GUEST_VMSTAT_PREFIXES = ("thp_", "compact_", "pgfault", "htlb_")


@dataclass
class GuestOutcome:
    target: str
    result: WorkloadResult | None
    error: str | None
    evidence: dict[str, Any] = field(default_factory=dict)
    monitors: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    cause: str | None = None  # when failed: "environment" (retried on resume) | "workload"


def guest_pool_pages(arm: Arm, workload_bytes: int | None) -> tuple[int, int]:
    """Guest hugetlb pools (2M, 1G): as the arm says, or what the in-guest workload needs."""
    g = arm.guest
    two = g.pools_2m if g and g.pools_2m is not None else 0
    one = g.pools_1g if g and g.pools_1g is not None else 0
    if workload_bytes and arm.backing == "hugetlb-2M" and not (g and g.pools_2m is not None):
        two = math.ceil(workload_bytes / (2 << 20))
    if workload_bytes and arm.backing == "hugetlb-1G" and not (g and g.pools_1g is not None):
        one = math.ceil(workload_bytes / (1 << 30))
    return two, one


def guest_thp(arm: Arm) -> str | None:
    """The guest's THP mode: as the arm says, or `madvise` when the workload in the guest asks
    for THP (backing thp or thp-collapse: hugelab-mem madvises its buffer) - a guest kernel
    with under 512 MiB of RAM boots with THP off, which would flag every such trial."""
    if arm.guest and arm.guest.thp is not None:
        return arm.guest.thp
    return "madvise" if arm.backing in ("thp", "thp-collapse") else None


def guest_mthp(arm: Arm) -> tuple[tuple[str, str], ...]:
    """The guest's multi-size THP modes: as the arm's guest mthp says; an mthp-<S> backing in
    the guest also gets S `madvise` (hugelab-mem madvises its buffer) and 2M `never` (so the
    buffer gets S folios or 4 KiB pages, as natively) unless guest mthp names them."""
    given = dict(arm.guest.mthp) if arm.guest else {}
    if arm.mthp_kb:
        given = {arm.backing.removeprefix("mthp-"): "madvise", "2M": "never", **given}
    return tuple(sorted(given.items(), key=lambda sm: page_kb(sm[0])))


def host_pool_need(arm: Arm) -> tuple[str, int] | None:
    """(size, pages) of the host pool one trial of this arm takes: all its guests' RAM."""
    vm = arm.vm
    if vm is None or vm.page_size is None:
        return None
    page_mib = size_kb_from_name(vm.page_size) // 1024
    return vm.page_size, vm.vms * math.ceil(vm.mem_mib / page_mib)


def vm_spec(arm: Arm, workload_bytes: int | None, hugetlbfs: dict[str, Path]) -> VmSpec:
    vm = arm.vm
    assert vm is not None
    two, one = guest_pool_pages(arm, workload_bytes)
    size_kb = size_kb_from_name(vm.page_size) if vm.page_size else None
    spec = VmSpec(
        mem_mib=vm.mem_mib, vcpus=vm.vcpus, backing=vm.backing, prealloc=vm.prealloc, share=vm.share,
        hugetlbfs_path=str(hugetlbfs[vm.page_size]) if vm.backing == "file" and vm.page_size else None,
        hugetlb_size_kb=size_kb, numa_node=vm.numa_node, cpu_pin=vm.cpu_pin, kernel=vm.kernel,
        accel=vm.accel, guest_thp=guest_thp(arm), guest_mthp=guest_mthp(arm),
        guest_hugepages_2m=two, guest_hugepages_1g=one)
    try:
        validate(spec)
    except HugelabError as exc:
        raise HugelabError(f"arm '{arm.name}': {exc.message}", hint=exc.hint) from exc
    return spec


def _guest_vmstat(guest: Guest) -> dict[str, int]:
    try:
        text = guest.target.read_file("/proc/vmstat")
    except HugelabError:
        return {}
    return {k: v for k, v in parse_vmstat(text).items() if k.startswith(GUEST_VMSTAT_PREFIXES)}


GUEST_MEMINFO_KEYS = ("MemTotal", "AnonHugePages", "ShmemPmdMapped", "HugePages_Total",
                      "HugePages_Free", "HugePages_Rsvd", "HugePages_Surp", "Hugepagesize",
                      "Hugetlb")


def _guest_meminfo(guest: Guest) -> dict[str, int]:
    """The guest's own view of its huge pages (KiB, or pages for HugePages_*)."""
    try:
        text = guest.target.read_file("/proc/meminfo")
    except HugelabError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in GUEST_MEMINFO_KEYS and rest.split():
            out[key] = int(rest.split()[0])
    return out


def server_guest_port(workload: object) -> int | None:
    """The port a client/server workload's server listens on in the guest; None for others."""
    declared = kind_of(workload)
    if declared is None or declared.server is None:
        return None
    port = getattr(workload, "port", None)
    return int(port) if port else declared.server.port


def server_budget_s(workload: object, ready_s: float) -> float:
    """How long a guest server may live: readiness, the client's own bound, and slack."""
    exec_timeout = getattr(workload, "exec_timeout", None)
    if callable(exec_timeout):
        client = float(exec_timeout())
    else:
        client = float(getattr(workload, "duration_s", 60)) + 60.0
    return ready_s + client + 60.0


def net_specs(spec: VmSpec, n: int, guest_port: int | None) -> list[VmSpec]:
    """One spec per guest; with a server port, each forwards its own free 127.0.0.1 port."""
    if guest_port is None:
        return [spec] * n
    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in ports and p not in {h for h, _ in spec.port_forwards}:
            ports.append(p)
    return [dataclasses.replace(spec, port_forwards=(*spec.port_forwards, (p, guest_port)))
            for p in ports]


def _run_one(g: Guest, workload: Workload, backing: str, guest_port: int | None,
             client: Target) -> WorkloadResult:
    """The workload in guest `g`; a client/server one with its server there, client on host."""
    if guest_port is None:
        return workload.run(g.target, backing)
    host_port = next(h for h, gp in g.spec.port_forwards if gp == guest_port)
    ready_s = 120.0 if g.accel == "tcg" else 30.0
    declared = kind_of(workload)
    side = GuestServer(g.target, host_port, guest_port, ready_timeout_s=ready_s,
                       max_run_s=server_budget_s(workload, ready_s),
                       how=declared.server if declared else None)
    try:
        result = dataclasses.replace(workload, server=side).run(client, backing)  # type: ignore[type-var]
    finally:
        if side.stuck():
            g.close()  # the agent is still busy with a server it cannot stop: end the guest
    result.info["placement"] = {"server": f"guest {g.name}", "client": "host",
                                "host_port": host_port, "guest_port": guest_port,
                                "host_address": LOOPBACK}
    return result


def _run_reps(g: Guest, workload: Workload, backing: str, guest_port: int | None,
              client: Target, k: int, workload_s: list[float], i: int) -> WorkloadResult:
    """k trials of the workload in one boot of `g` (see hugelab.vm.reps); the time they took
    is added to workload_s[i]. The first failure fails the boot."""
    results, walls = [], []
    for _ in range(k):
        t = time.monotonic()
        try:
            results.append(_run_one(g, workload, backing, guest_port, client))
        finally:
            walls.append(time.monotonic() - t)
            workload_s[i] += walls[-1]
    return results[0] if k == 1 else reps.combine(results, walls)


def _guest(arm: Arm, spec: VmSpec, name: str, layer: Layer | None = None) -> Guest:
    """hugelab's own image-less guest (under QEMU, or libvirtd), or a transient copy of the
    user's libvirt domain (reached through its agent or SSH; over `layer`, when its kind built
    one): each a hugelab.vm.common.guestapi.Guest, which mypy checks here."""
    assert arm.vm is not None
    if arm.vm.domain is None and arm.vm.manager == "libvirt":
        from hugelab.vm.own.libvirt_own import LibvirtGuest
        return LibvirtGuest(spec, name=name, uri=arm.vm.uri)
    if arm.vm.domain is None:
        from hugelab.vm.own.guest import Guest as QemuGuest
        return QemuGuest(spec, name=name)
    from hugelab.vm.domains.libvirt_guest import Access, DomainGuest
    return DomainGuest(spec, domain=arm.vm.domain, uri=arm.vm.uri, name=name,
                       access=Access.of(arm.vm), layer=layer.overlays if layer else None)


def _layer(arm: Arm, workload: Workload, spec: VmSpec) -> Layer | None:
    """The prepared layer a server kind's trials in a user's domain boot over (built by the
    first trial that needs it: hugelab.vm.domains.layer); None where there is none."""
    assert arm.vm is not None
    build = workload.guest_build() if isinstance(workload, ServerKind) else None
    if arm.vm.domain is None or build is None:
        return None
    from hugelab.vm.domains import layer
    from hugelab.vm.domains.libvirt_guest import Access
    return layer.ensure(arm.vm.domain, arm.vm.uri, spec, build, Access.of(arm.vm))


def run_guest_trial(arm: Arm, workload: Workload, spec: VmSpec,
                    client: Target | None = None) -> list[GuestOutcome]:
    """Boot arm.vm.vms guests, run the workload in all at once, return one outcome per guest.

    A kind with a server runs it in each of hugelab's own guests and its client on the host
    (`client`, default a NativeTarget) through that guest's 127.0.0.1 port forward; in a
    user's domain both run in the guest."""
    assert arm.vm is not None
    names = arm.targets()
    k = arm.vm.trials_per_boot
    # a user's domain runs a server kind's server and client inside (hugelab.workloads.guestside)
    guest_port = None if arm.vm.domain else server_guest_port(workload)
    client = client or NativeTarget()
    try:
        layer = _layer(arm, workload, spec)
    except HugelabError as exc:  # its cause is the build's: a guest without the server, ...
        why = f"the domain's layer was not built: {exc.message}" + \
            (f"\nhint: {exc.hint}" if exc.hint else "")
        return [GuestOutcome(n, None, why, cause=exc.cause) for n in names]
    t0 = time.monotonic()  # the boot on, not a layer's build
    workload_s = [0.0] * len(names)
    with ExitStack() as stack:
        try:
            guests = [stack.enter_context(_guest(arm, s, n, layer))
                      for s, n in zip(net_specs(spec, len(names), guest_port), names, strict=True)]
        except HugelabError as exc:
            why = f"guest boot failed{pool_state(spec)}: {exc.message}"
            if exc.hint:
                why += f"\nhint: {exc.hint}"
            return [GuestOutcome(n, None, why, cause="environment") for n in names]
        before = [_guest_vmstat(g) for g in guests]
        outcomes: list[GuestOutcome | None] = [None] * len(guests)

        def work(i: int) -> None:
            g = guests[i]
            try:
                outcomes[i] = GuestOutcome(g.target.name, _run_reps(
                    g, workload, arm.backing, guest_port, client, k, workload_s, i), None)
            except HugelabError as exc:
                outcomes[i] = GuestOutcome(g.target.name, None, exc.message, cause=exc.cause)
            except Exception as exc:  # noqa: BLE001 - a bug fails this guest's trial only
                outcomes[i] = GuestOutcome(g.target.name, None, internal_error(exc),
                                           cause="environment")

        threads = [threading.Thread(target=carry(work), args=(i,)) for i in range(len(guests))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        guest_wall = time.monotonic() - t0  # boot to the end of the workload
        final: list[GuestOutcome] = []
        for i, (g, b, o) in enumerate(zip(guests, before, outcomes, strict=True)):
            assert o is not None
            final.append(_settle(o, g, b, arm, spec, guest_port))
            o.provenance.update({"guest_wall_s": round(guest_wall, 3),
                                 "workload_s": round(workload_s[i], 3)})
            if layer is not None:  # what the copy booted over, and where it is kept
                o.provenance["layer"] = {"what": layer.what, "path": str(layer.path)}
        return final


def _settle(o: GuestOutcome, g: Guest, before: dict[str, int], arm: Arm, spec: VmSpec,
            guest_port: int | None) -> GuestOutcome:
    """A guest's outcome with what the guest and QEMU show after its trials: the guest's vmstat
    deltas and meminfo, QEMU's evidence, the guest's process tree, and the provenance."""
    assert arm.vm is not None
    after = _guest_vmstat(g)
    o.monitors = {"guest_vmstat": {k: after[k] - v for k, v in before.items()
                                   if k in after and after[k] != v},
                  "guest_meminfo": _guest_meminfo(g)}
    o.evidence = {"qemu": _qemu_evidence(g, arm.vm.mthp is not None)}
    tree = {**(g.target.tree() if g.alive() else {}), "where": f"guest {g.name}"}
    if o.result is not None and "tree" in o.result.evidence:  # a daemon's own (a domain's
        o.monitors["guest_tree"] = tree                          # server): the clients' here
    else:
        o.evidence["tree"] = tree
    o.provenance = {"accel": g.accel, "boot_s": g.boot_s, "vm_backing": spec.backing,
                    **({"boot_retried": g.boot_retried} if g.boot_retried else {}),
                    "trials_per_boot": arm.vm.trials_per_boot,
                    "vm_page_kb": spec.hugetlb_size_kb, "prealloc": spec.prealloc,
                    "guest_thp": spec.guest_thp, "guest_mem_mib": spec.mem_mib,
                    **({"guest_mthp": dict(spec.guest_mthp)} if spec.guest_mthp else {})}
    if guest_port is not None:
        o.provenance["network"] = {"netdev": "user,restrict=on", "nic": "virtio-net-pci",
                                   "port_forwards": [list(f) for f in g.spec.port_forwards]}
    return o


def _qemu_evidence(g: Guest, folios: bool) -> dict[str, Any]:
    """QEMU's side of a guest (hugelab.vm.common.evidence); with `folios` (vm mthp) also the folio
    sizes of guest RAM, since smaps cannot tell a 64K folio from a 4K page."""
    try:
        ev = g.evidence()
        if folios:
            ev["folios"] = qemu_folio_evidence(g.qemu_pid, ev)
    except (HugelabError, OSError) as exc:
        return {"error": str(exc)}
    return ev


def pool_state(spec: VmSpec, paths: HostPaths = REAL) -> str:
    """' (the 1G pool had 0 of 3 pages free)' for a hugetlb-backed guest, else ''."""
    if not spec.hugetlb_size_kb:
        return ""
    kb = spec.hugetlb_size_kb
    total = (read_text(paths.pool_file(kb), "?") or "?").strip()
    free = (read_text(paths.pool_file(kb, "free_hugepages"), "?") or "?").strip()
    return f" (the {page_label(kb)} pool had {free} of {total} pages free)"
