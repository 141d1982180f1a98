"""Users' domains in a dry run: each arm resolved as the run resolves it (the domain's memory
and vCPUs, the checks that refuse a run before anything changes), or, when libvirtd cannot be
reached, the arm as the file gives it and a list of what could not be checked, so the dry run
still shows the rest."""

from __future__ import annotations

from dataclasses import replace

from hugelab.experiment import Arm, Experiment
from hugelab.vm.common.libvirtd import DomainError, connect
from hugelab.vm.domains.domainresolve import check_own_libvirt_file, resolve

UNCHECKED = ("that the domain exists", "its memory and vCPUs (the cells show the file's, or "
             "none) and the host pool its RAM needs", "that it is shut off, or its disks read-only")


def resolve_or_note(exp: Experiment) -> tuple[Experiment, list[str]]:
    """`exp` with its domain arms resolved; where libvirtd is not reachable, those arms as
    given and one warning per libvirt URI naming what the dry run could not check."""
    unreachable: dict[str, str] = {}
    arms: list[Arm] = []
    for a in exp.arms:
        check_own_libvirt_file(a)  # before the rest: nothing to reach
        vm = a.vm
        if vm is None or vm.domain is None:
            arms.append(a)
            continue
        if vm.uri not in unreachable:
            try:
                connect(vm.uri).close()
            except DomainError as exc:  # the message, and how to reach it (start libvirtd)
                unreachable[vm.uri] = exc.message + (f" ({exc.hint})" if exc.hint else "")
        arms.append(a if vm.uri in unreachable else resolve(a))
    notes = [f"{why}: the dry run could not check, for the domain arms "
             f"({', '.join(a.name for a in exp.arms if a.vm and a.vm.uri == uri and a.vm.domain)}), "
             f"{'; '.join(UNCHECKED)}; the run checks them before any change"
             for uri, why in unreachable.items()]
    return replace(exp, arms=tuple(arms)), notes
