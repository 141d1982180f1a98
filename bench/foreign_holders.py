"""Foreign huge-page holders for the kill loop (--foreign-holders): other users of the 2 MiB
pool that come and go while hugelab runs are killed, as databases, DPDK or JVMs do on a shared
host.

Before the loop an administrator's setting is made: a persistent 2 MiB pool of ADMIN_POOL pages
and nr_overcommit_hugepages = OVERCOMMIT (surplus pages lent on demand), both put back after.
A holder is tests/hugetlb_holder.py (pages faulted in by a private mapping, reserved only, a
SysV SHM_HUGETLB segment attached or held with no process attached) with a random page count,
or a real PostgreSQL with huge_pages = on (tests/pg_server.py; its cluster is made once). It
takes its pages from wherever the kernel gives them: the administrator's pool, surplus pages,
or the free pages of the pool hugelab raised for its run.

What a holder has a claim on is read from the kernel when it arrives (the size of its hugetlb
mappings in smaps, or its segment's size) with what it has faulted in (HugetlbPages, or the
segment's rss); `problems()` says where that changed, and where the pool's held pages
(nr - free + resv) are not exactly the holders' claims, which after a `recover` (no hugelab
process left) means hugelab took or left pages.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from hugelab.host.paths import REAL
from hugelab.host.pools import read_counts
from tests.hugetlb_holder import (
    Holder,
    hugetlb_kb,
    mapped_hugetlb_kb,
    segment,
    start_holder,
    stop_holder,
)
from tests.pg_server import Server, running_server

MB2 = 2048
ADMIN_POOL = 16  # persistent 2 MiB pages an administrator set up for others before the loop
OVERCOMMIT = 48  # surplus 2 MiB pages the kernel may lend on top of the persistent pool
MAX_HOLDERS = 2
PAGES = (2, 24)  # a holder's page count: with the run's 32 (64 MiB), at most 80 pages
MODES = ("touch", "reserve", "sysv", "sysv-detached", "postgres")
PG_SHARED_BUFFERS = "16MB"  # about 10 pages of shared memory

Footprint = tuple[int, int]  # (pages it has a claim on, kB of them faulted in)


@dataclass
class Present:
    """A holder that arrived: what it held then, how to read it now, how to stop it."""
    name: str
    then: Footprint
    now: Callable[[], Footprint | None]  # None: gone (killed, or its segment removed)
    stop: Callable[[], None]


def intact(then: Footprint, now: Footprint | None) -> bool:
    """Its claim unchanged and nothing it had faulted in taken away (a PostgreSQL may fault
    in more of its shared memory as it works; a test holder never does)."""
    return now is not None and now[0] == then[0] and now[1] >= then[1]


def next_event(rng: random.Random, present: int) -> str:
    """'arrive' or 'depart': an arrival when none holds, a departure when MAX_HOLDERS do."""
    if present == 0:
        return "arrive"
    if present >= MAX_HOLDERS:
        return "depart"
    return rng.choice(("arrive", "depart"))


def _process_footprint(pid: int, proc_alive: Callable[[], bool]) -> Footprint | None:
    if not proc_alive():
        return None
    return mapped_hugetlb_kb(pid, MB2) // MB2, hugetlb_kb(pid)


def _segment_footprint(h: Holder) -> Footprint | None:
    row = segment(h.shmid) if h.shmid is not None and h.proc.poll() is None else None
    return None if row is None else (row["size"] // (MB2 * 1024), row["rss"] // 1024)


class ForeignHolders:
    """The holders of one kill loop; counts their arrivals, refusals and departures."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.present: list[Present] = []
        self.counts = {"holder_arrivals": 0, "holder_arrivals_refused": 0,
                       "holder_departures": 0, "arrivals_into_raised_pool": 0,
                       "checks_with_holders": 0, "checks_with_surplus_pages": 0}
        self.modes: dict[str, int] = {}
        self._stack = ExitStack()
        self._pg: Server | None = None
        self._found: dict[Path, str] = {}

    # -- the administrator's setting -----------------------------------------------------------
    def __enter__(self) -> ForeignHolders:
        nr, over = REAL.pool_file(MB2), REAL.pool_file(MB2, "nr_overcommit_hugepages")
        self._found = {p: p.read_text() for p in (nr, over)}
        self._stack.callback(self._put_back)
        nr.write_text(str(ADMIN_POOL))
        over.write_text(str(OVERCOMMIT))
        self._pg = self._stack.enter_context(running_server(
            huge_pages="on", shared_buffers=PG_SHARED_BUFFERS))  # made once, started as needed
        self._pg.stop("fast")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
        self._stack.close()

    def _put_back(self) -> None:
        for path, text in reversed(list(self._found.items())):
            path.write_text(text)

    # -- arrivals and departures ---------------------------------------------------------------
    def event(self) -> str:
        """One arrival or departure, at random; what happened, in words."""
        if next_event(self.rng, len(self.present)) == "depart":
            gone = self.present.pop(self.rng.randrange(len(self.present)))
            gone.stop()
            self.counts["holder_departures"] += 1
            return f"departed: {gone.name}"
        taken = {p.name.split()[0] for p in self.present}
        mode = self.rng.choice([m for m in MODES if m != "postgres" or m not in taken])
        pages = self.rng.randint(*PAGES)
        raised = read_counts(REAL, MB2).persistent > ADMIN_POOL  # a hugelab run's pool is up
        came = self._postgres() if mode == "postgres" else self._holder(mode, pages)
        if came is None:
            self.counts["holder_arrivals_refused"] += 1
            return f"refused: {mode} {pages}"
        self.present.append(came)
        self.counts["holder_arrivals"] += 1
        self.counts["arrivals_into_raised_pool"] += raised
        self.modes[mode] = self.modes.get(mode, 0) + 1
        return f"arrived: {came.name} {came.then}"

    def _holder(self, mode: str, pages: int) -> Present | None:
        h = start_holder(mode, pages, MB2)
        if h is None:
            return None
        if mode == "sysv-detached":
            def now() -> Footprint | None:
                return _segment_footprint(h)
        else:
            def now() -> Footprint | None:
                return _process_footprint(h.pid, lambda: h.proc.poll() is None)
        then = now()
        if then is None:
            stop_holder(h)
            return None
        return Present(f"{mode} {pages} pages (pid {h.pid})", then, now, lambda: stop_holder(h))

    def _postgres(self) -> Present | None:
        srv = self._pg
        assert srv is not None
        try:
            srv.start()
        except RuntimeError:  # huge_pages = on and the pool could not give its pages
            return None
        proc = srv.proc
        assert proc is not None

        def now() -> Footprint | None:
            return _process_footprint(proc.pid, lambda: proc.poll() is None)
        then = now()
        assert then is not None
        return Present(f"postgres (pid {proc.pid})", then, now, lambda: srv.stop("fast"))

    def stop_all(self) -> None:
        while self.present:
            self.present.pop().stop()
            self.counts["holder_departures"] += 1

    # -- checks --------------------------------------------------------------------------------
    def claims(self) -> int:
        return sum(p.then[0] for p in self.present)

    def problems(self) -> list[str]:
        """Holders whose pages changed, and a pool whose held pages are not the holders'
        (call it when no hugelab process holds any)."""
        out = [f"{p.name}: {p.then} -> {p.now()}" for p in self.present
               if not intact(p.then, p.now())]
        counts = read_counts(REAL, MB2)
        held = counts.held
        self.counts["checks_with_holders"] += bool(self.present)
        self.counts["checks_with_surplus_pages"] += counts.surplus > 0  # pages a holder kept
        if held != self.claims():
            out.append(f"2M pool: {held} pages held, the holders have a claim on {self.claims()}")
        return out


def host_differences(before: dict[str, str], now: dict[str, str]) -> dict[str, str]:
    """Settings of tests.hostguard.host_state() that differ, a holder's pages aside: the 2 MiB
    pool is compared by its persistent size (nr - surplus), since pages a holder took from a
    pool hugelab had raised stay its own as surplus pages when the pool is put back."""
    def persistent(s: dict[str, str]) -> str:
        return str(int(s.get(f"pool{MB2}", "0")) - int(s.get(f"surplus{MB2}", "0")))

    skip = {f"pool{MB2}", f"surplus{MB2}"}
    out = {k: f"{before.get(k)} -> {now.get(k)}" for k in before.keys() | now.keys()
           if k not in skip and before.get(k) != now.get(k)}
    if persistent(before) != persistent(now):
        out[f"persistent{MB2}"] = f"{persistent(before)} -> {persistent(now)}"
    return out
