"""A server kind's trial inside a user's libvirt domain, driven from the host through the way
in (qemu-guest-agent or SSH: a target with `exec`, `read_file`, `write_file`).

A user's domain has its own files, so a server there runs from the guest's own installed
binaries, on data made in the guest, with the client in the guest too (as the user would run
it). Every guest-side change the trial makes goes through `GuestSide`, which records how to
undo it and undoes it at the end of the trial (`close`, in reverse order): sysfs settings (the
guest's hugetlb pool, THP modes) are written back, the server is stopped, its directory
removed. The domain's copy is transient and its disks are overlays, so nothing outlives the
copy either; undoing per trial keeps several trials in one boot (`trials_per_boot`) apart.

Every argv is a list passed to the guest's exec as it is (never through a shell), and every
path is hugelab's own (GUEST_DIR); a user's file reaches the guest through `write_file`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from hugelab import kernel
from hugelab.errors import HugelabError, ToolMissingError, WorkloadError
from hugelab.workloads.base import ExecResult, Place, place_of
from hugelab.workloads.serverside import listens
from hugelab.workloads.toolrun import check_exit

GUEST_DIR = "/var/tmp/hugelab"  # everything a trial writes in the guest, removed at its end
POOL = "/sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages"
PAGE_KB = {"hugetlb-2M": 2048, "hugetlb-1G": 1048576}


class Way(Protocol):
    """What a trial needs of the way into the guest (hugelab.vm.common.guestapi.GuestTarget)."""

    name: str

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult: ...

    def read_file(self, path: str, *, wait_s: float = 60.0) -> str: ...

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None: ...


@dataclass(frozen=True)
class LayerBuild:
    """What a server kind builds in a user's domain once, for every trial there to boot over
    (hugelab.vm.domains.layer): `key` names its content (with the domain's disks it is the
    layer's cache key), `what` says it in a line, `build(way)` makes it in a copy's guest."""

    key: str
    what: str
    build: Callable[[Way], None]


LOADED = "hugelab-loaded"  # in data a layer filled (hugelab.vm.domains.layer): load nothing more


def marked(side: GuestSide, path: str) -> bool:
    """Whether `path` exists in the guest (a layer's LOADED mark)."""
    res = side.probe(["test", "-e", path])
    return res is not None and res.returncode == 0


def keep(side: GuestSide, data: str, template: str) -> None:
    """A layer's build: the stopped server's data moved out of the trial's directory, to
    `template`, where the layer keeps it for every trial's copy."""
    side.run(["mkdir", "-p", template.rsplit("/", 1)[0]])
    side.run(["rm", "-rf", template])
    side.run(["mv", data, template])


def in_domain(target: object) -> bool:
    """Whether `target` is a way into a user's domain (which has its own files), not the host
    nor one of hugelab's own guests (which see the host's root)."""
    return place_of(target) is Place.DOMAIN


def refuse_process_thp(kind: str, mode: str | None) -> None:
    """process_thp wraps a server in hugelab-thp, which a daemon in a user's domain is not run
    under: refused there (the guest's THP mode, [arms.guest] thp, is the domain's switch)."""
    if mode is not None:
        raise WorkloadError(f"{kind}: process_thp is not offered in a user's domain",
                            hint="set the guest's THP mode instead: [arms.guest] thp = ...")


class GuestSide:
    """One trial's changes in a guest, each undone by `close` (a context manager)."""

    def __init__(self, way: Way, what: str) -> None:
        self.way = way
        self.what = what  # the kind, for messages ("postgres in guest vm0: ...")
        self.undo: list[tuple[str, Callable[[], object]]] = []
        self.undone: list[str] = []
        self.notes: dict[str, Any] = {}  # what a kind's prepare found, for the trial's info

    def __enter__(self) -> GuestSide:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- running programs --------------------------------------------------------------------
    def run(self, argv: list[str], *, timeout: float = 120.0, user: str | None = None,
            tool: str | None = None) -> ExecResult:
        """argv in the guest (as `user` through runuser), its exit checked."""
        full = ["runuser", "-u", user, "--", *argv] if user else list(argv)
        res = self.way.exec(full, timeout=timeout)
        check_exit(res, f"{tool or argv[0].rsplit('/', 1)[-1]} in guest {self.way.name}")
        return res

    def probe(self, argv: list[str], *, timeout: float = 60.0) -> ExecResult | None:
        """argv in the guest, None when the program is missing (no exit check)."""
        try:
            return self.way.exec(list(argv), timeout=timeout)
        except ToolMissingError:
            return None

    def need(self, program: str, package: str) -> None:
        """ToolMissingError naming the guest's package when `program` is not installed."""
        res = self.probe(["test", "-x", program])
        if res is None or res.returncode != 0:
            raise ToolMissingError(program, f"{package} (in the guest {self.way.name}, with "
                                            "its package manager)")

    def workdir(self, owner: str | None = None) -> str:
        """GUEST_DIR made afresh (0700, owned by `owner`), removed at the end of the trial."""
        self.run(["rm", "-rf", GUEST_DIR])
        argv = ["install", "-d", "-m", "0700"]
        if owner:  # its group stays root's: Debian's nobody has no group of that name
            argv += ["-o", owner]
        self.run([*argv, GUEST_DIR])
        self.later("its directory removed", lambda: self.run(["rm", "-rf", GUEST_DIR]))
        return GUEST_DIR

    def put(self, path: str, text: str, owner: str | None = None) -> None:
        """A file in the trial's directory (a user's script or settings)."""
        self.way.write_file(path, text)
        if owner:
            self.run(["chown", owner, path])

    def put_bytes(self, path: str, data: bytes, owner: str | None = None) -> None:
        """A binary file of the user's (a jar, a custom-format dump) in the trial's directory,
        through the way in's `write_bytes`."""
        write = getattr(self.way, "write_bytes", None)
        if write is None:
            raise WorkloadError(f"{self.what}: guest {self.way.name} cannot take a file's bytes")
        write(path, data)
        if owner:
            self.run(["chown", owner, path])

    # --- settings that outlive a process -----------------------------------------------------
    def set_sysfs(self, path: str, value: str) -> str:
        """Write a guest sysfs file, its old value written back at the end; returns the old."""
        old = self.way.read_file(path).strip()
        old_value = kernel.selected(old)
        self.way.write_file(path, value)
        self.later(f"{path} back to {old_value}", lambda: self.way.write_file(path, old_value))
        return old_value

    def grow_pool(self, backing: str, nbytes: int) -> dict[str, Any]:
        """The guest's pool of the backing's page size grown by what the server needs (other
        users of the pool keep theirs); what it was and became, for the trial's record."""
        kb = PAGE_KB[backing]
        pages = -(-nbytes // (kb * 1024))
        path = POOL.format(kb=kb)
        old = int(self.way.read_file(path).strip() or 0)
        self.set_sysfs(path, str(old + pages))
        got = int(self.way.read_file(path).strip() or 0)
        if got < old + pages:
            raise WorkloadError(f"{self.what} in guest {self.way.name}: the guest's "
                                f"{kb // 1024} MiB pool grew to {got} pages, not the "
                                f"{old + pages} the server needs (the guest's memory is short)",
                                hint="give the guest more memory (mem in [arms.vm]) or ask for "
                                     "smaller shared memory")
        return {"page_kb": kb, "before": old, "set": old + pages, "server_pages": pages}

    def later(self, what: str, undo: Callable[[], object]) -> None:
        self.undo.append((what, undo))

    def close(self) -> None:
        """Undo every change, newest first; an undo that fails does not stop the others (the
        transient copy ends with the trial anyway), but is named in `undone`."""
        while self.undo:
            what, undo = self.undo.pop()
            try:
                undo()
                self.undone.append(what)
            except HugelabError as exc:
                self.undone.append(f"{what}: failed ({exc.message})")

    # --- evidence ----------------------------------------------------------------------------
    def smaps(self, pid: int) -> str:
        return self.way.read_file(f"/proc/{pid}/smaps")

    def way_read(self, path: str) -> str | None:
        """A guest file's text, None when it cannot be read (a process that is gone)."""
        try:
            return self.way.read_file(path)
        except HugelabError:
            return None


# --- a kind's daemon in the guest, its client in the guest too ---------------------------------
READY_S = 120.0  # a server's start under TCG


class DomainServers:
    """A ServerSide (hugelab.workloads.serverside) for a server in a user's domain: `daemon(argv,
    pidfile)` turns the kind's foreground argv into its own daemon mode (redis --daemonize
    yes, memcached -d -P), so the server outlives its exec and the client runs next to it in
    the guest against the guest's 127.0.0.1:`port` (`client_port` is that guest port). Ports are
hugelab's own, not the servers' defaults: a user's guest may run its own server there."""

    def __init__(self, way: Way, port: int, daemon: Callable[[list[str], str], list[str]],
                 owner: str | None = None,
                 prepare: Callable[[GuestSide, str], None] | None = None,
                 log: str | None = None, ready_s: float = READY_S) -> None:
        self.way, self.port, self.daemon, self.owner = way, port, daemon, owner
        self.prepare = prepare  # before the daemon starts: e.g. its data directory made
        self.log = log  # the daemon's log, whose tail says why it did not start
        self.ready_s = ready_s  # how long its start may take (its daemon's run, its listener)

    def start(self, argv_for_port: Callable[[int], list[str]], tool: str) -> DomainHandle:
        side = GuestSide(self.way, tool)
        try:
            top = side.workdir(owner=self.owner)  # the daemon writes its pid file there
            if self.prepare is not None:
                self.prepare(side, top)
            pidfile = f"{top}/{tool}.pid"
            try:
                side.run(self.daemon(argv_for_port(self.port), pidfile), tool=tool,
                         timeout=self.ready_s + 30)
            except WorkloadError as exc:  # told in the daemon's own words, where it has a log
                if not (said := self._said(side)):
                    raise
                raise WorkloadError(f"{exc.message}:\n  {said}", hint=exc.hint) from exc
            pid = self._wait(side, pidfile, tool)
            side.later(f"{tool} stopped", lambda: _stop(side, pid))
        except BaseException:
            side.close()
            raise
        return DomainHandle(self.port, side, pid, tool)

    def _wait(self, side: GuestSide, pidfile: str, tool: str) -> int:
        """The daemon's pid once it listens on its port; WorkloadError past ready_s, or at
        once when the process its pid file names is gone (with its log's tail)."""
        deadline = time.monotonic() + self.ready_s
        pid = None
        while time.monotonic() < deadline:
            try:
                pid = pid or int(self.way.read_file(pidfile).strip())
                if listens(self.way.read_file("/proc/net/tcp"), self.port):
                    return pid
            except (HugelabError, ValueError):
                pass
            if pid and side.way_read(f"/proc/{pid}/stat") is None:
                break
            time.sleep(0.5)
        said = self._said(side)
        raise WorkloadError(f"{tool} in guest {self.way.name} did not listen on "
                            f"127.0.0.1:{self.port}" + (f" (it exited):\n  {said}" if said else
                                                        f" within {self.ready_s:.0f} s"),
                            hint="another server of the guest's may hold that port")

    def _said(self, side: GuestSide) -> str:
        """The last lines of the daemon's log ("" without one)."""
        return "\n  ".join((side.way_read(self.log) or "").strip().splitlines()[-5:]) \
            if self.log else ""


class DomainHandle:
    """A daemon started by DomainServers (a ServerHandle): its memory read through the way
    in, stopped (and its directory removed) by `stop`."""

    def __init__(self, port: int, side: GuestSide, pid: int, tool: str) -> None:
        self.client_port, self.side, self.pid, self.tool = port, side, pid, tool

    def memory(self) -> dict[str, object]:
        from hugelab.workloads.servermem import process_memory
        return process_memory(self.pid, read=self.side.way_read)

    def stop(self) -> str:
        self.side.close()
        return "; ".join(self.side.undone)


def _stop(side: GuestSide, pid: int) -> None:
    """SIGTERM, then SIGKILL past 30 s; returns when /proc/PID is gone."""
    side.probe(["kill", str(pid)])
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        if side.way_read(f"/proc/{pid}/stat") is None:
            return
        time.sleep(0.2)
    side.probe(["kill", "-KILL", str(pid)])

