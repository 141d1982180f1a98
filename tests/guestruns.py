"""What the real guest-run tests share (test_vm_run, test_vm_mthp, test_vm_workloads): a state
directory and a store of the test's own with the host checked unchanged afterwards, optionally
a private copy of hugelab-mem under /tmp, the Runner on the real host with its journal in the
test's directory, and the QEMU processes alive."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hugelab.experiment import Experiment
from hugelab.host.session import host_session
from hugelab.runner import Runner, RunOutcome
from hugelab.store import Store
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import Workload
from hugelab.workloads.build import ensure_hugelab_mem
from tests.hostguard import host_state


@contextlib.contextmanager
def guest_env(tmp: Path, monkeypatch: pytest.MonkeyPatch, *, own_mem_binary: bool = False
              ) -> Iterator[tuple[Path, Store]]:
    """(tmp, a store in it), HUGELAB_STATE_DIR under tmp; the host as found afterwards.
    `own_mem_binary`: hugelab-mem copied under tmp (/tmp, like a checkout there: guests must
    still see it, the guest's /tmp being an overlay over the host's, not an empty tmpfs)."""
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp / "state"))
    if own_mem_binary:
        binary = tmp / "bin" / "hugelab-mem"
        binary.parent.mkdir()
        shutil.copy2(ensure_hugelab_mem(), binary)
        monkeypatch.setenv("HUGELAB_MEM_BIN", str(binary))
    before = host_state()
    store = Store(tmp / "s.db")
    yield tmp, store
    store.close()
    after = host_state()
    assert after == before, {k: (before.get(k), after.get(k)) for k in {*before, *after}
                             if before.get(k) != after.get(k)}


def run_on_host(tmp: Path, store: Store, exp: Experiment, workload: Workload) -> RunOutcome:
    """`exp` run for real (native target, host changes journaled under tmp/state)."""
    return Runner(exp, store, workload, target=NativeTarget(),
                  session=lambda: host_session(journal_path=tmp / "state" / "journal.json")
                  ).run()


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid: int, starttime: str) -> bool:
    """`pid` is still the same process and not a zombie."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X") and st[19] == starttime


def qemus_under(ancestor: int) -> dict[int, str]:
    """{pid: starttime} of live qemu-system processes descended from `ancestor`."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if not Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("qemu-system"):
                continue
        except OSError:
            continue
        st = proc_stat(pid)
        p = pid
        while st is not None and p > 1:
            p = int(st[1])
            if p == ancestor:
                out[pid] = proc_stat(pid)[19]  # type: ignore[index]
                break
            st = proc_stat(p)
    return out


def own_qemus() -> list[int]:
    """PIDs of the live QEMUs this test process started (a parallel run's guests do not count)."""
    return sorted(qemus_under(os.getpid()))
