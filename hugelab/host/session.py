"""A host session: lock, recover what a killed run left, hand out a HostControl, always restore."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from hugelab.host.control import HostControl, restore_journal
from hugelab.host.journal import Journal, locked, state_dir
from hugelab.host.paths import REAL, HostPaths
from hugelab.trial.contain import refuse_if_leftovers


class Terminated(BaseException):
    """SIGTERM/SIGHUP arrived: unwind like Ctrl-C so every finally block restores the host."""


def recover(paths: HostPaths = REAL, journal_path: Path | None = None,
            lock_wait_s: float = 10.0) -> list[str]:
    """Put back what a previous (killed) hugelab left: kill its leftover workloads and guests
    (and remove their files), then restore the host settings from the journal. Waits up to
    `lock_wait_s` for a dying hugelab to release the lock."""
    jpath = journal_path or state_dir() / "journal.json"
    done: list[str] = []
    with locked(jpath, wait_s=lock_wait_s):
        done += _kill_leftovers()  # first: a live mapping keeps a shrunk pool's pages (surplus)
        journal = Journal.load(jpath)
        if journal is not None and len(journal):
            done += restore_journal(journal, paths)
        elif journal is not None:
            journal.clear()
    return done


def _kill_leftovers() -> list[str]:
    """Workload process trees and QEMUs whose hugelab is gone, with their temporary files."""
    from hugelab.trial.contain import kill_leftover_workloads
    from hugelab.vm.guest import kill_leftover_qemus

    done = kill_leftover_workloads(state_dir())
    return done + [f"killed leftover QEMU pid {pid}" for pid in kill_leftover_qemus(state_dir())]


@contextmanager
def signals_held() -> Iterator[None]:
    """Defer SIGINT/SIGTERM/SIGHUP until the block ends, then deliver them.

    Python runs signal handlers in the main thread whichever thread the kernel picked, so
    swapping the handlers (not the thread's signal mask) defers them in threaded programs too.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, lambda signum, frame: pending.append(signum)) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signal.Signals(signum).name)


@contextmanager
def host_session(paths: HostPaths = REAL, journal_path: Path | None = None,
                 *, compact_deadline_s: float = 10.0) -> Iterator[HostControl]:
    """Everything changed through the yielded HostControl is restored on any exit but SIGKILL;
    after a SIGKILL the journal remains, and the next session (or `hugelab recover`) restores."""
    jpath = journal_path or state_dir() / "journal.json"
    old_handlers = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with locked(jpath):
            _kill_leftovers()
            refuse_if_leftovers(state_dir())  # trials beside a live leftover measure noise
            stale = Journal.load(jpath)
            if stale is not None:
                restore_journal(stale, paths)
            control = HostControl(paths, Journal(jpath), compact_deadline_s=compact_deadline_s)
            try:
                yield control
            finally:
                with signals_held():  # a second Ctrl-C must not cut a restore in half
                    restore_journal(control.journal, paths, control.writer)
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
