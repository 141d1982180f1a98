"""After a killed hugelab: end what its trials left running, then put the host back.

Order matters: workload processes and guests go first (a process that still maps hugetlb pages
keeps them when its pool is shrunk: they stay as surplus), then the journal is replayed. Every
run does the same before its first trial, and refuses to start while a leftover lives.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

from hugelab.host import session
from hugelab.host.control import HostControl
from hugelab.host.fragment import kill_leftover_fragmenters
from hugelab.host.journal import state_dir
from hugelab.host.paths import REAL, HostPaths
from hugelab.trial.contain import (
    kill_leftover_workloads,
    refuse_if_leftovers,
    remove_dead_scratch,
)
from hugelab.vm.common.libvirtd import recover_domains
from hugelab.vm.domains import layer
from hugelab.vm.domains.ssh import remove_dead_dirs
from hugelab.vm.own.qemurecords import kill_leftover_qemus
from hugelab.workloads.registry import kinds


def kill_leftovers() -> list[str]:
    """Workload process trees, QEMUs, fragment holders and transient libvirt domains whose
    hugelab is gone, with their temporary files (any trial scratch directory of a dead owner,
    whichever state directory recorded it) and disk overlays, and its SSH connections'
    directories."""
    done = kill_leftover_workloads(state_dir()) + remove_dead_scratch()
    for declared in kinds().values():  # after its processes: a segment goes once nobody attaches
        done += declared.leftovers() if declared.leftovers else []
    done += [f"killed leftover QEMU pid {pid}" for pid in kill_leftover_qemus(state_dir())]
    done += kill_leftover_fragmenters(state_dir())  # an aged host's holder: its memory freed
    done += [f"destroyed leftover transient domain {name}" for name in recover_domains()]
    done += layer.sweep()  # a domain's layer half built by a killed run
    return done + [f"removed leftover SSH directory {d}" for d in remove_dead_dirs()]


def clear_for_a_run() -> list[str]:
    """kill_leftovers, then HostError if a workload of an earlier run still lives."""
    done = kill_leftovers()
    refuse_if_leftovers(state_dir())  # trials beside a live leftover would measure noise
    return done


def recover(paths: HostPaths = REAL, journal_path: Path | None = None,
            lock_wait_s: float = 10.0) -> list[str]:
    """`hugelab recover`: kill a dead run's leftovers, then restore its journal."""
    return session.recover(paths, journal_path, lock_wait_s, before=kill_leftovers)


def run_session(paths: HostPaths = REAL, lock_wait_s: float = 0.0
                ) -> AbstractContextManager[HostControl]:
    """The host session of a run: leftovers cleared (or refused) before anything changes.
    `lock_wait_s`: how long to wait for another hugelab changing this host (hosts of a fleet
    that share one kernel take turns)."""
    return session.host_session(paths, before=clear_for_a_run, lock_wait_s=lock_wait_s)


__all__ = ["clear_for_a_run", "kill_leftovers", "recover", "run_session"]
