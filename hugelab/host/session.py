"""A host session: lock, put back what a killed run left, hand out a HostControl, always restore."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from hugelab.host.control import HostControl, restore_journal
from hugelab.host.journal import Journal, locked, state_dir
from hugelab.host.paths import REAL, HostPaths


class Terminated(BaseException):
    """SIGTERM/SIGHUP arrived: unwind like Ctrl-C so every finally block restores the host."""


# Runs under the lock before any journal is replayed: what must go before the host is put back
# (hugelab.recovery passes one that kills a dead run's workloads and guests). Returns what it did.
Cleanup = Callable[[], list[str]]


def recover(paths: HostPaths = REAL, journal_path: Path | None = None,
            lock_wait_s: float = 10.0, before: Cleanup | None = None) -> list[str]:
    """Put back the host settings a previous (killed) hugelab left in its journal, after
    `before` (under the lock). Waits up to `lock_wait_s` for a dying hugelab's lock."""
    jpath = journal_path or state_dir() / "journal.json"
    done: list[str] = []
    with locked(jpath, wait_s=lock_wait_s):
        if before is not None:
            done += before()  # first: a live mapping keeps a shrunk pool's pages (surplus)
        journal = Journal.load(jpath)
        if journal is not None and len(journal):
            done += restore_journal(journal, paths)
        elif journal is not None:
            journal.clear()
    return done


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
                 *, compact_deadline_s: float = 10.0,
                 before: Cleanup | None = None, lock_wait_s: float = 0.0
                 ) -> Iterator[HostControl]:
    """Everything changed through the yielded HostControl is restored on any exit but SIGKILL;
    after a SIGKILL the journal remains, and the next session (or `hugelab recover`) restores."""
    jpath = journal_path or state_dir() / "journal.json"
    old_handlers = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with locked(jpath, wait_s=lock_wait_s):
            if before is not None:
                before()
            stale = Journal.load(jpath)
            if stale is not None:
                restore_journal(stale, paths)
            control = HostControl(paths, Journal(jpath), compact_deadline_s=compact_deadline_s)
            try:
                yield control
            finally:
                with signals_held():  # a second Ctrl-C must not cut a restore in half
                    restore_journal(control.journal, paths, control.writer, control.rmdir)
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
