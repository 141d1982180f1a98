"""A server kind's life cycle, written once: a key-value server started where its arm runs,
loaded by its own client, its own memory read just before it stops, then stopped.

A server kind (Redis, memcached) is a frozen dataclass over `ServerKind` that supplies only
what is its own; the base runs it natively, in hugelab's own guests (the ServerSide the guest
trial passes in as `server`, hugelab.vm.netserver), in a user's libvirt domain (its own daemon
there, hugelab.workloads.guestside) and as one of design "interleaved"'s servers (the hooks of
hugelab.workloads.requests.RequestServer). Its `KIND` still declares its tools, its
`ServerInGuest` (port, readiness probe and stopper in its own protocol, argv for the guest
NIC: `answers` and `tell` below), its judge and its cost.

What a kind supplies
  class attributes
    tool          its server program, also the comm its own evidence is filed under
    domain        `InDomain` (serverplace): its port, daemon argv, owner and log in a
                  user's domain
  fields          port, process_thp, app, server (a ServerSide; None: hugelab's own choice)
  methods
    server_argv(port, files)      the server in the foreground on 127.0.0.1:port (pure);
                                  `files` its private directory (None: it has none)
    load(client, port, files)     its load generator once against the running server; what
                                  it returns is handed to `loaded`
    loaded(load, output, client)  the trial's WorkloadResult: the load's metrics parsed,
                                  the versions it knows (`output`: the server's output tail)
    describe(result, backing)     the arm's own switch as evidence for the kind's judge
                                  (Kind.judge reads it beside evidence["server"]), and its notes
    reqmix_server(host, port)     hugelab-reqmix's --server value for it (workloads.reqmix)
    request_load()                its load as ReqmixSettings fields
  optional hooks (the defaults do nothing)
    admit(backing)                a backing it cannot have refused before a server starts
                                  (default: check_backing; a kind's preflight may be stricter)
    own_files(target)             its private directory for one server (Redis: a copy of a
                                  user's RDB; MariaDB: its datadir, copied from a template),
                                  removed by drop_files after the server stopped
    reuse_key(), files_whole(files)  a key under which a stopped server's own_files are kept
                                  for the run's next server (hugelab.workloads.filepool), where
                                  its load only reads them (PostgreSQL select-only); None:
                                  copied per trial. files_whole: this one is fit to keep
                                  (PostgreSQL: its postmaster stopped cleanly)
    filled(port, files, client)   what it writes into a fresh server before any load (Redis:
                                  the keys its RDB brought, the preload), kept as `loaded`
    served(result, srv)           the request-level result's info (tool, versions)
    last_look(load, handle, files)  what it reads of its server after the load, while it
                                  still runs (MariaDB: its error log, its huge-page
                                  mappings); returns the load as `loaded` takes it
    unit, output_evidence         class attributes: its results' unit ("requests/s"), and
                                  whether its server's output is evidence (MariaDB: no, its
                                  error log is its own report)
    memory_evidence               class attribute: whether its server's THP picture is
                                  evidence["server"] (PostgreSQL: no, its shared memory
                                  segment, read in last_look, is its evidence)
    whole_trial(target, backing)  a trial it runs whole itself where `target` is, instead of
                                  the base's (PostgreSQL: inside hugelab's own guest, on the
                                  template this host built); None: the base's
    ready_timeout_s, start_failed, prepare_domain  its start (hugelab.workloads.serverplace)
    in_place(port)                what it does where its server runs (an InPlace of
                                  hugelab.workloads.serverkeep: a private directory, the
                                  process whose memory is its own, its own report, a stop that
                                  is no request); its server then runs kept, natively too, and
                                  `own_report(output)` is that report (Varnish's counters)

What the base does for every kind
  run(target, backing)    one trial: the server where the target and `server` say, the load,
                          the server's own THP picture (hugelab.workloads.servermem) read
                          just before it stops (a kept server, and every one in hugelab's own
                          guest, whose /proc this process cannot read, runs under the keeper,
                          hugelab.workloads.serverkeep, and hands its last picture back in its
                          output), the stop (its own stopper, else TERM then KILL), then
                          evidence["server"], ["server_output_tail"],
                          ["tree"] (a user's domain: the daemon's own, the guest's tree being
                          the client's) and the kind's describe(). With the kind's
                          `client_apart` (on this host only), the server's tree is pinned to
                          every CPU but the last and the client to the last (`apart`), as a
                          client on another machine loads a server; info["client_apart"].
  start (launched, then fill), stop, server_pid, request_server, request_result: one arm's
                          server in an interleaved trial, on a free loopback port of the
                          host, judged by its own server's memory (the host-wide tree holds
                          every arm's server).
  answers, tell, version  a kind's readiness probe and stopper in its own protocol (its
                          ServerInGuest's), and a program's version from its own words.
A kind's judge (Kind.judge) weighs its switch against its server's own memory with
hugelab.workloads.serverjudge.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, ClassVar

from hugelab import proc
from hugelab.errors import WorkloadError
from hugelab.workloads import filepool
from hugelab.workloads.base import Place, Target, WorkloadResult, place_of
from hugelab.workloads.guestside import LayerBuild, in_domain
from hugelab.workloads.process_thp import target_for
from hugelab.workloads.requests import start_one
from hugelab.workloads.servercpu import PinnedTarget, pin_tree, pinning
from hugelab.workloads.serverkeep import MEMORY_MARK, REPORT_MARK, first_child, marked
from hugelab.workloads.servermem import process_memory, server_tree
from hugelab.workloads.serverplace import Placement, watched_here
from hugelab.workloads.serverside import (
    LOOPBACK,
    ServerHandle,
    ServerSide,
    exchange,
    server_memory,
)
from hugelab.workloads.toolrun import check_backing, first_version


@dataclass
class Running:
    """One arm's running server in an interleaved trial."""

    handle: ServerHandle
    files: Path | None = None  # its private directory, removed when it stops
    files_kept: bool = False   # that directory kept from an earlier trial (filepool)
    loaded: Any = None         # what `filled` wrote into it (Redis: the RDB's keys)
    rate: float = 0.0          # windows of client runs: its warm-up's requests per second
    client_version: str | None = None  # windows of client runs: as the load printed it

    @property
    def port(self) -> int:
        return self.handle.client_port


def answers(port: int, request: bytes, reply: bytes) -> bool:
    """Whether a server on 127.0.0.1:port answers `request` with a reply starting `reply`:
    a kind's readiness probe, through a guest's port forward or on the host."""
    try:
        return exchange(port, request).startswith(reply)
    except OSError:
        return False


def tell(port: int, request: bytes) -> None:
    """Send `request` (a kind's own shutdown) to 127.0.0.1:port; a server already gone is
    stopped."""
    with contextlib.suppress(OSError):
        exchange(port, request)


def version(argv: list[str], pattern: str, where: Target | None = None) -> str | None:
    """A program's version from its own words (`pattern`'s group): run through `where` (a
    user's domain, whose programs are its own; the load's client) or on this host."""
    text = where.exec(argv).stdout if where is not None else \
        proc.run(argv, check=False, timeout=10).stdout
    return first_version(text, pattern)


class ServerKind(Placement):
    """The life cycle every server kind shares; see the module docstring for the contract.
    Where its server runs, and its argv there: Placement (hugelab.workloads.serverplace)."""

    unit: ClassVar[str] = "requests/s"
    output_evidence: ClassVar[bool] = True
    memory_evidence: ClassVar[bool] = True
    client_apart: bool = False  # a kind's [workload] key (kind.CLIENT_APART) where it offers it

    # -- what each kind supplies (server_argv: Placement's) -------------------------------------
    def load(self, client: Target, port: int, files: Path | None) -> Any:
        raise NotImplementedError

    def loaded(self, load: Any, output: str, client: Target) -> WorkloadResult:
        raise NotImplementedError

    def describe(self, result: WorkloadResult, backing: str) -> None:
        raise NotImplementedError

    def reqmix_server(self, host: str, port: int) -> str:
        raise NotImplementedError

    # -- hooks with defaults -------------------------------------------------------------------
    def admit(self, backing: str) -> None:
        check_backing(backing)

    def guest_build(self) -> LayerBuild | None:
        """What its trials in a user's domain boot over, built once (hugelab.vm.domains.layer):
        its data; None: every trial makes its own."""
        return None

    def own_files(self, target: Target | None) -> Path | None:
        return None

    def drop_files(self, files: Path | None) -> None:
        return None

    def reuse_key(self) -> str | None:
        return None

    def files_whole(self, files: Path) -> bool:
        return True

    def filled(self, port: int, files: Path | None, client: Target | None = None) -> Any:
        return None

    def served(self, result: WorkloadResult, srv: Running) -> None:
        return None

    def last_look(self, load: Any, handle: ServerHandle, files: Path | None) -> Any:
        return load

    def whole_trial(self, target: Target, backing: str) -> WorkloadResult | None:
        return None

    @staticmethod
    def own_report(output: str) -> dict[str, Any]:
        """The report its InPlace read just before the server stopped ({}: none)."""
        return marked(output, REPORT_MARK)

    @classmethod
    def setting(cls, table: dict[str, Any], key: str) -> Any:
        """A [workload] key's value from an experiment table, else its field's default (for a
        kind's cost estimate, before the workload is built)."""
        if key in table:
            return table[key]
        default = cls.__dataclass_fields__[key].default  # type: ignore[attr-defined]
        return None if default is MISSING else default

    # -- one trial -------------------------------------------------------------------------------
    def run(self, target: Target, backing: str) -> WorkloadResult:
        self.admit(backing)
        if (whole := self.whole_trial(target, backing)) is not None:
            return whole
        side = self.side(target)
        files, was_kept = self.files_for(target)
        try:
            result = self._trial(target, side, backing, files)
        finally:
            self.release_files(files)
        note_files(result, files, was_kept)
        return result

    def _trial(self, target: Target, side: ServerSide, backing: str,
               files: Path | None) -> WorkloadResult:
        handle = self.launch(side, self.argv_for(target, files, watched_here(side)), files)
        client = target_for(target, self.process_thp)
        memory: dict[str, object] = {}
        try:
            client, apart = self.apart(target, handle, client)
            load = self.last_look(self.load(client, handle.client_port, files), handle, files)
            if self.memory_evidence and self.in_place(handle.client_port) is None:
                memory = server_memory(handle)  # else the keeper's, from its output
        finally:
            output = handle.stop()
        memory = memory or marked(output, MEMORY_MARK)
        result = self.loaded(load, output, client)
        if self.output_evidence:
            result.evidence["server_output_tail"] = output
        if self.memory_evidence:
            result.evidence["server"] = memory
        if self.memory_evidence and in_domain(target) and memory:  # the guest's is the client's
            result.evidence["tree"] = server_tree(self.tool, memory, f"guest {target.name}")
        self.describe(result, backing)
        if apart:
            result.info["client_apart"] = apart
        return result

    def apart(self, target: Target, handle: ServerHandle, client: Target
              ) -> tuple[Target, dict[str, list[int]]]:
        """With `client_apart`, the server's whole tree pinned to every CPU but the last (its
        later children inherit it) and the client target to the last, as request-level
        interleaving pins them (servercpu.pinning); the pinning, for the trial's info."""
        if not self.client_apart:
            return client, {}
        if place_of(target) is not Place.NATIVE:  # check_places refuses it before any trial
            raise WorkloadError(f"{self.kind}: client_apart runs on this host only")
        pins = pinning(sorted(os.sched_getaffinity(0)))
        pin_tree(int(handle.proc.pid), pins["servers"])  # type: ignore[attr-defined]
        return PinnedTarget(client, pins["client"]), pins

    # -- one arm's server among interleaved ones (hugelab.workloads.requests, interleave) --------
    def start(self, backing: str) -> Running:
        """This arm's server, up on a free loopback port of the host and filled."""
        return start_one(self, backing)  # type: ignore[no-any-return]

    def launched(self, backing: str) -> Running:
        """This arm's server up, not yet filled: request-level trials launch every arm's,
        then fill them all at once (hugelab.workloads.requests.start_all)."""
        self.admit(backing)
        files, was_kept = self.files_for(None)
        try:
            handle = self.launch(self.local(None), self.argv_for(None, files, False), files)
        except BaseException:
            self.release_files(files)
            raise
        return Running(handle, files, files_kept=was_kept)

    def fill(self, srv: Running) -> None:
        srv.loaded = self.filled(srv.port, srv.files)

    def stop(self, srv: Running) -> None:
        try:
            srv.handle.stop()
        finally:
            self.release_files(srv.files)

    def server_pid(self, srv: Running) -> int:
        return int(srv.handle.proc.pid)  # type: ignore[attr-defined]

    def own_memory(self, srv: Running) -> dict[str, object]:
        """The THP picture of this arm's server, read now: a kept one's (its in_place) is its
        keeper's child's own process (Varnish: the manager's child), else the server's."""
        hooks = self.in_place(srv.port)
        if hooks is None:
            return server_memory(srv.handle)
        child = self.kept_server(srv)
        pid = hooks.own_pid(child) if child is not None else None
        return process_memory(pid) if pid is not None else {}

    def kept_server(self, srv: Running) -> int | None:
        """A kept server's own pid: its keeper's child of the kind's program (not the
        report's program the keeper may run beside it)."""
        return first_child(self.server_pid(srv), comm=self.tool)

    def request_server(self, srv: Running) -> str:
        return self.reqmix_server(LOOPBACK, srv.port)

    def request_result(self, srv: Running, metrics: dict[str, float], backing: str,
                       primary: str = "ops_per_s") -> WorkloadResult:
        """The arm's result: `metrics`, and its own server's evidence, read now."""
        result = WorkloadResult(metrics=metrics, primary=primary, unit=self.unit,
                                better="higher")
        if self.memory_evidence:
            memory = result.evidence["server"] = self.own_memory(srv)
            if memory:  # judged alone: the host-wide tree holds every arm's server
                result.evidence["tree"] = server_tree(self.tool, memory)
        self.served(result, srv)
        self.describe(result, backing)
        note_files(result, srv.files, srv.files_kept)
        return result

    # -- its private directory, kept for the run's next server where its load only reads ---------
    def files_for(self, target: Target | None) -> tuple[Path | None, bool]:
        """(its private directory, whether kept from an earlier trial of this run): one the
        run kept under its reuse_key (on this host only), else own_files'."""
        key = self.reuse_key() if target is None or place_of(target) is Place.NATIVE else None
        if key is not None and (path := filepool.take(key)) is not None:
            return path, True
        return self.own_files(target), False

    def release_files(self, files: Path | None) -> None:
        """Its directory, its server stopped: kept for the run's next server when the kind
        reuses it and it is whole (files_whole), else dropped."""
        key = self.reuse_key() if files is not None else None
        if key is None or files is None or not self.files_whole(files) or \
                not filepool.give(key, files, self.drop_files):
            self.drop_files(files)


def note_files(result: WorkloadResult, files: Path | None, was_kept: bool) -> None:
    """Whether the trial's server ran on a fresh copy of its files or on one an earlier trial
    of the run left whole (info["server_files"]); nothing for a server without files."""
    if files is not None:
        result.info["server_files"] = "kept" if was_kept else "fresh"
