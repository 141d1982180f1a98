"""Containment: every process of a native trial can be found, measured and killed as a whole.

    with TrialScope("block 3 arm thp") as scope:      # record written before any process starts
        p = proc.spawn(["some-tool", "--arg"])             # new session, token in env, parent-death
        ...
    scope.tree                                        # peak smaps evidence of the whole tree
    scope.folios                                      # folio sizes of its largest mappings

A scope writes `workload-<token>.json` (0600) to the state directory *before* the first process
starts, and removes it when every process of the trial is gone. Each process is started by
`hugelab.proc.spawn()` (which finds the scope bound to its thread) in a new session, with the
parent-death signal (SIGKILL, through util-linux `setpriv`) and `HUGELAB_TRIAL=<token>` in its
environment, which every descendant inherits, even one that leaves the session. `TMPDIR` points
to the scope's private directory (on tmpfs when the host has /dev/shm), so the workload's
temporary files go where the scope can remove them.

After a SIGKILL of hugelab, `kill_leftover_workloads()` (run by `hugelab recover` and at the
start of every host session) kills every process of a dead owner's scopes, removes their
directories and records; `remove_dead_scratch()` (run there too) removes any scratch directory
whose owner record (`owned.claim`, written right after it is made) names a dead hugelab,
whichever state directory recorded it, and any empty one a run was killed while making or
removing (`owned.stale_empty`: unchanged for a minute; a live scope's holds its record).
Works the same with cgroup v1 or v2: it needs no cgroup at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hugelab import identity, owned
from hugelab.errors import HostError
from hugelab.host.journal import ensure_private_dir, state_dir, write_private
from hugelab.identity import boot_id, clock_ticks_now, starttime
from hugelab.proc import bind
from hugelab.trial.folios import FolioSampler
from hugelab.trial.procscan import TreeSampler, find_members

RECORD_PREFIX = "workload-"
SCRATCH_PARENTS = ("/dev/shm", tempfile.gettempdir())
SCRATCH_PREFIX = "hugelab-trial-"
KILL_WAIT_S = 5.0
EMPTY_SCRATCH_AGE_S = 60.0  # an empty, unclaimed scratch directory this old is a killed run's


class TrialScope:
    """One trial's processes: recorded before they start, sampled while they run, killed at the
    end (a workload that outlives its trial is killed, counted and reported)."""

    def __init__(self, label: str = "", *, state: Path | None = None,
                 sample_interval_s: float = 0.25, folios: bool = False) -> None:
        self.label = label
        self.token = uuid.uuid4().hex
        self.state = state or state_dir()
        self.sample_interval_s = sample_interval_s
        self.sessions: dict[int, int | None] = {}  # session id (its leader's pid) -> start
        self.since = 0
        self.scratch: str | None = None
        self.tree: dict[str, Any] = {}
        self.folios: dict[str, Any] = {}  # with folios=True: hugelab.trial.folios evidence
        self._want_folios = folios
        self._folio_sampler: FolioSampler | None = None
        self.leftovers_killed = 0
        self._record = self.state / f"{RECORD_PREFIX}{self.token}.json"
        self._lock = threading.Lock()
        self._sampler: TreeSampler | None = None

    # -- record -------------------------------------------------------------------------------
    def _write(self) -> None:
        rec = {"token": self.token, "label": self.label, **identity.record(),
               "since": self.since, "sessions": [[s, t] for s, t in self.sessions.items()],
               "scratch": self.scratch, "created": time.time()}
        write_private(self._record, json.dumps(rec))

    def add_session(self, pid: int) -> None:
        with self._lock:
            self.sessions[pid] = starttime(pid)
            self._write()

    # -- lifecycle ----------------------------------------------------------------------------
    def members(self) -> list[int]:
        # the sampler's thread asks while add_session may be adding a spawned session: it
        # reads a copy taken under the same lock (iterating the live dict raced: "dictionary
        # changed size during iteration" in a Redis trial)
        with self._lock:
            sessions = dict(self.sessions)
        return find_members(sessions, self.token, since=self.since)

    def __enter__(self) -> TrialScope:
        ensure_private_dir(self.state)
        self.since = clock_ticks_now()
        parent = next((p for p in SCRATCH_PARENTS if os.access(p, os.W_OK)), None)
        self.scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent)
        try:
            owned.claim(Path(self.scratch))  # found by owner, whatever state directory recovers
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)  # unclaimed, no sweep would find it
            raise
        self._write()
        bind(self)
        self._sampler = TreeSampler(self.members, self.sample_interval_s).start()
        if self._want_folios:
            self._folio_sampler = FolioSampler(self.members).start()
        return self

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """The tree sampled once before and once after, and not in between: for a phase whose
        timing is the measurement (a request-level trial's windows), which the sampler's
        reads of every member's /proc files would otherwise take CPU from."""
        sampler = self._sampler
        if sampler is None:
            yield
            return
        sampler.pause()
        try:
            yield
        finally:
            sampler.resume()

    def __exit__(self, *exc: object) -> None:
        bind(None)
        try:
            if self._sampler is not None:
                self.tree = self._sampler.stop()
            if self._folio_sampler is not None:
                self.folios = self._folio_sampler.stop()
        finally:
            self.leftovers_killed = len(kill_members(self.members))
            if self.scratch:
                shutil.rmtree(self.scratch, ignore_errors=True)
            if not self.members():  # a process that would not die stays on record for recover
                self._record.unlink(missing_ok=True)


# -- killing ----------------------------------------------------------------------------------

def kill_members(members: Callable[[], list[int]], wait_s: float = KILL_WAIT_S) -> list[int]:
    """SIGKILL every member until none is left (or `wait_s` passes); the pids killed."""
    killed: list[int] = []
    deadline = time.monotonic() + wait_s
    while True:
        pids = members()
        if not pids or time.monotonic() > deadline:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            if pid not in killed:
                killed.append(pid)
        time.sleep(0.05)


def _records(state: Path) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(state.glob(f"{RECORD_PREFIX}*.json")):
        try:
            out.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
    return out


def _record_members(rec: dict[str, Any]) -> Callable[[], list[int]]:
    """The live processes of a recorded scope: none when the record is from another boot (its
    sessions' start times count from that boot's start)."""
    if rec.get("boot_id") != boot_id():
        return lambda: []
    sessions = {int(s[0]): s[1] for s in rec.get("sessions") or [] if isinstance(s, list)}
    return lambda: find_members(sessions, str(rec.get("token") or ""),
                                since=int(rec.get("since") or 0))


def _remove_scratch(path: object) -> None:
    if isinstance(path, str) and Path(path).name.startswith(SCRATCH_PREFIX):
        shutil.rmtree(path, ignore_errors=True)


def kill_leftover_workloads(state: Path | None = None) -> list[str]:
    """Kill the processes of every scope whose hugelab is gone; remove its files and record."""
    d = state or state_dir()
    if not d.is_dir():
        return []
    done = []
    for path, rec in _records(d):
        if identity.recorded_alive(rec):
            continue
        killed = kill_members(_record_members(rec))
        if killed:
            done.append(f"killed {len(killed)} leftover workload process(es) of "
                        f"{rec.get('label') or 'a trial'} (pids {', '.join(map(str, killed))})")
        if rec.get("scratch") and Path(str(rec["scratch"])).exists():
            done.append(f"removed {rec['scratch']}")
        _remove_scratch(rec.get("scratch"))
        if not _record_members(rec)():
            path.unlink(missing_ok=True)
    return done


def remove_dead_scratch(parents: tuple[str, ...] = SCRATCH_PARENTS) -> list[str]:
    """Scratch directories of dead hugelabs that no record named (a run killed, then recovered
    with another state directory), and empty ones left by a run killed while it made or
    removed its own: removed; what was removed."""
    done = []
    for parent in parents:
        for top in owned.dead_claimed(Path(parent), SCRATCH_PREFIX):
            shutil.rmtree(top, ignore_errors=True)
            done.append(f"removed {top}")
        for top in owned.stale_empty(Path(parent), SCRATCH_PREFIX, EMPTY_SCRATCH_AGE_S):
            with contextlib.suppress(OSError):  # rmdir: only while it is still empty
                top.rmdir()
                done.append(f"removed {top} (empty)")
    return done


def alive_leftovers(state: Path | None = None) -> list[int]:
    """Pids of workloads recorded by a dead hugelab that are still alive."""
    d = state or state_dir()
    if not d.is_dir():
        return []
    return [pid for _p, rec in _records(d) if not identity.recorded_alive(rec)
            for pid in _record_members(rec)()]


def refuse_if_leftovers(state: Path | None = None) -> None:
    """HostError when a workload of an earlier run is still alive (after trying to kill it)."""
    kill_leftover_workloads(state)
    left = alive_leftovers(state)
    if left:
        raise HostError(f"workload processes of an earlier run are still alive "
                        f"(pids {', '.join(map(str, left[:10]))}): trials now would measure noise",
                        hint="hugelab could not kill them; end them by hand, then run again")
