"""Where a server kind's server runs, and its argv there: the placement half of the base
(hugelab.workloads.serverkind). Natively on this host (a LocalServer, on the kind's port or a
free one); in hugelab's own guest (the ServerSide the guest trial passes in as `server`, whose
servers this process cannot see, so every one runs under the keeper,
hugelab.workloads.serverkeep); or as its own daemon in a user's libvirt domain (`InDomain`,
hugelab.workloads.guestside). The argv is the kind's `server_argv` under the arm's
process_thp, and under the keeper where the kind keeps its server itself (`in_place`).

Optional hooks of a kind's start here (the defaults are every key-value kind's):
  ready_timeout_s          how long its server may take to listen on this host (MariaDB:
                           InnoDB's start, 120 s; default 10 s)
  start_failed(exc, files) a start that failed, in the server's own words where it keeps
                           them apart from its output (MariaDB: its error log in `files`);
                           default: `exc` as it is
  local(port)              its server as a subprocess of this process: a LocalServer, whose
                           `ready(port, pid)` and `stop_grace_s` a kind that does not listen
                           on 127.0.0.1 sets (PostgreSQL: its private socket on a fixed
                           port, ready when its postmaster.pid says so, 30 s to stop)
  prepare_domain(side, top)  what the guest needs before its server starts in a user's
                           domain; default: its InDomain's `prepare` (MariaDB: its datadir);
                           a kind whose preparation is its workload's overrides it
                           (PostgreSQL: initdb, the guest's pool sized by that server)"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hugelab.errors import WorkloadError
from hugelab.workloads.base import Place, Target
from hugelab.workloads.guestside import (
    READY_S,
    DomainServers,
    GuestSide,
    in_domain,
    refuse_process_thp,
)
from hugelab.workloads.process_thp import wrap
from hugelab.workloads.serverkeep import InPlace, keep_argv
from hugelab.workloads.serverside import (
    LocalServer,
    ServerHandle,
    ServerSide,
    default_server,
)


@dataclass(frozen=True)
class InDomain:
    """How a kind's server runs as its own daemon in a user's domain: on `port` (hugelab's,
    not the server's default, which a user's own server may hold), `argv(argv, pidfile)` its
    foreground argv turned daemon (its pid in `pidfile`), owned by `owner`, writing `log`;
    `prepare(side, top)` what the guest needs before it starts (MariaDB: its datadir);
    `ready_s` how long its start may take (PostgreSQL under TCG: 300 s)."""

    port: int
    argv: Callable[[list[str], str], list[str]]
    owner: str | None = None
    log: str | None = None
    prepare: Callable[[GuestSide, str], None] | None = None
    ready_s: float = READY_S


def watched_here(side: Any) -> bool:
    """Whether a server side runs its servers where this process cannot read their /proc
    (hugelab's own guest: the side declares `place`), so every server there is kept."""
    return getattr(side, "place", Place.NATIVE) is Place.GUEST


class Placement:
    """Where a kind's server runs (`side`) and its argv there (`argv_for`)."""

    tool: ClassVar[str]
    domain: ClassVar[InDomain]
    kind: str
    port: int | None
    process_thp: str | None
    server: ServerSide | None
    ready_timeout_s: ClassVar[float] = 10.0

    def server_argv(self, port: int, files: Path | None = None) -> list[str]:
        raise NotImplementedError

    def in_place(self, port: int) -> InPlace | None:
        return None

    def start_failed(self, exc: WorkloadError, files: Path | None) -> WorkloadError:
        return exc

    def prepare_domain(self, side: GuestSide, top: str) -> None:
        """What the guest needs before its server starts in a user's domain."""
        if self.domain.prepare is not None:
            self.domain.prepare(side, top)

    def local(self, port: int | None) -> LocalServer:
        """Its server as a subprocess of this process (natively, or one arm's interleaved)."""
        return LocalServer(port=port, ready_timeout_s=self.ready_timeout_s)

    def launch(self, side: ServerSide, argv: Callable[[int], list[str]], files: Path | None
               ) -> ServerHandle:
        """Its server started on `side`; a failed start as start_failed tells it."""
        try:
            return side.start(argv, self.tool)
        except WorkloadError as exc:
            told = self.start_failed(exc, files)
            if told is exc:
                raise
            raise told from exc

    def side(self, target: Target) -> ServerSide:
        """Where this trial's server runs: a user's domain runs its own daemon (the client
        beside it there); else the side given (hugelab's own guest), else this host."""
        if in_domain(target):
            refuse_process_thp(self.kind, self.process_thp)
            d = self.domain
            return DomainServers(target, self.port or d.port, d.argv,  # type: ignore[arg-type]
                                 owner=d.owner, prepare=self.prepare_domain, log=d.log,
                                 ready_s=d.ready_s)
        side = default_server(self.server, target, self.tool, self.port)
        return side if side is self.server else self.local(self.port)

    def argv_for(self, target: Target | None, files: Path | None, watched: bool
                 ) -> Callable[[int], list[str]]:
        """The server's argv for a port: under the arm's process_thp, and kept (its
        in_place, else the plain keeper) where this process cannot read its memory; a kind
        with an in_place is kept here too, the keeper under process_thp with it, and quiet
        (serverkeep.keep: its memory and report read at the stop only, so that no smaps walk
        nor report program runs beside the load on the server's CPUs; Varnish's request-level
        A/A spread fell from 2.1% to 0.8% a block that way, docs/benchmarks.md)."""
        def argv(port: int) -> list[str]:
            out, hooks = self.server_argv(port, files), self.in_place(port)
            if watched:
                return keep_argv(hooks or InPlace(), wrap(out, self.process_thp, target),
                                 sys.executable)
            if hooks is not None:
                out = keep_argv(hooks, out, sys.executable, quiet=True)
            return wrap(out, self.process_thp, target)
        return argv
