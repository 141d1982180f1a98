"""`kind = "mariadb"`: a MariaDB server per trial with the arm's `--large-pages`, loaded by
sysbench's OLTP scripts (read-only by default).

    [workload]
    kind = "mariadb"
    script = "oltp_read_only"     # or oltp_point_select, oltp_read_write, ... or a .lua path
    tables = 2
    table_size = 10000
    threads = 4
    duration_s = 10
    buffer_pool = "128M"          # innodb_buffer_pool_size

    [[arms]]
    name = "off"
    backing = "4k"                # app large_pages = false by default
    [[arms]]
    name = "on"
    backing = "hugetlb-2M"        # app large_pages = true by default

An arm's `app` takes `large_pages` (hugelab owns it: it follows the backing unless set), and
any other server option as `name = value` (e.g. `innodb_buffer_pool_size`), passed as
`--name=value`, except those hugelab sets itself (datadir, socket, port, ...). The pool an arm
needs is the server's own: its buffer pool, its two redo log buffers and its small caches, each
in whole pages. Evidence: the tree's hugetlb pages (every arm), and the application's own:
mysqld's mappings read just before it stops (the buffer pool's mapping in 2 MiB pages) and its
error log, where it says which allocations it could not get in huge pages (a fallback)."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.proc import which
from hugelab.units import parse_size
from hugelab.workloads import interleave
from hugelab.workloads.base import ExecResult, Place, Target, WorkloadResult, place_of
from hugelab.workloads.guestside import DomainHandle, LayerBuild, in_domain
from hugelab.workloads.interleave import server_problem
from hugelab.workloads.kind import (
    CLIENT_APART,
    Kind,
    Tool,
    interleaved,
    key,
    keys_of,
    timeout,
    warm_ops,
)
from hugelab.workloads.mariadb import datadir, evidence, indomain, oltp, rules, server, template
from hugelab.workloads.mariadb.evidence import check
from hugelab.workloads.mariadb.guestcost import guest_build as in_guest
from hugelab.workloads.mariadb.userdata import INIT_FILE
from hugelab.workloads.preview import GuestBuild
from hugelab.workloads.reqmix import mysql_server
from hugelab.workloads.serverkind import Running, ServerKind
from hugelab.workloads.serverplace import InDomain
from hugelab.workloads.serverside import ServerHandle
from hugelab.workloads.toolrun import check_exit, first_version

# its own daemon in a user's domain, over a datadir the guest makes first (indomain)
DOMAIN = InDomain(indomain.PORT, indomain.daemon_argv, owner=datadir.USER, log=indomain.LOG,
                  prepare=indomain.install)


@dataclass(frozen=True)
class Mariadb(ServerKind):
    """MariaDB + sysbench OLTP; metrics tps, qps, latency_avg_ms, p50_ms, p95_ms, p99_ms."""

    script: str = key("oltp_read_only", 'the sysbench OLTP script ("oltp_read_only", ...)')
    tables: int = key(2, "sysbench --tables: the template's tables")
    table_size: int = key(10000, "sysbench --table-size", unit="rows")
    threads: int = key(4, "sysbench --threads")
    duration_s: float = key(10.0, "sysbench --time: how long the load runs", unit="s")
    warmup_s: float = key(1.0, "untimed load before the measured one", unit="s")
    client_apart: bool = key(False, CLIENT_APART)
    window_s: float = key(2.0, interleaved("window_s", "s", "each arm's sysbench window"))
    window_ops: int | None = key(None, interleaved("window_ops", "transactions",
                                                   "windows of this many instead"))
    warm_ops: int = key(2, warm_ops("transactions"))
    buffer_pool: str = key("128M", "innodb_buffer_pool_size", unit="bytes")
    timeout_s: float | None = key(None, timeout("a trial", "hugelab's"))
    # a user's dump is loaded once, cached, then copied
    dump: str | None = key(None, "your SQL dump: loaded once into a cached template")
    datadir: str | None = key(None, "your stopped server's datadir: copied per trial, never "
                                    "opened in place")
    database: str = key(oltp.DATABASE, "the database the load connects to")
    app: tuple[tuple[str, Any], ...] = key((), "server settings for the arm; large_pages "
                                               "follows the backing")
    arm_backing: str | None = None  # set by for_arm: the arm's backing decides large_pages
    domain_arm: bool = False  # set by for_arm: a user's domain runs its own MariaDB
    kind: str = field(default="mariadb", init=False)

    # the base's (hugelab.workloads.serverkind): on the host, a free port, no process_thp
    port = None
    process_thp = None
    server = None
    tool: ClassVar[str] = "mariadbd"
    domain: ClassVar[InDomain] = DOMAIN
    unit: ClassVar[str] = "transactions/s"
    output_evidence: ClassVar[bool] = False  # its error log is its own report
    ready_timeout_s: ClassVar[float] = 120.0  # InnoDB's start

    def __post_init__(self) -> None:
        rules.validate(self)

    def large_pages(self) -> bool:
        given = dict(self.app).get("large_pages")
        return bool(given) if given is not None else self.arm_backing == "hugetlb-2M"

    def for_arm(self, arm: Any) -> Mariadb:
        """This workload as `arm` runs it: its backing decides large_pages."""
        vm = getattr(arm, "vm", None)
        domain = vm is not None and vm.domain is not None
        try:
            return dataclasses.replace(self, arm_backing=arm.backing, domain_arm=domain)
        except ExperimentError as exc:
            raise ExperimentError(f"arm '{arm.name}': {exc.message}", hint=exc.hint) from None

    def hugetlb_bytes_for(self, size: str | None) -> int | None:
        """Pool bytes the server maps with --large-pages in pages of `size` ("2M"): its buffer
        pool (and its block descriptors, about 3%), two redo log buffers and two small caches,
        each in whole pages; None without a page size (an arm with no hugetlb pool)."""
        if not size:
            return None
        if not self.large_pages():
            return 0
        return server.large_pages_bytes(rules.buffer_pool_bytes(self), parse_size(size))

    def settings(self) -> tuple[tuple[str, Any], ...]:
        return tuple((k, v) for k, v in self.app
                     if k not in ("large_pages", "innodb_buffer_pool_size"))

    def preflight(self, backing: str) -> None:
        if self.domain_arm:  # the guest's own programs, checked in the trial
            rules.check_backing(self, backing)
            return
        for tool in ("sysbench", "mariadb-install-db", "mariadb"):
            which(tool)
        if not Path(server.SERVER).exists():
            raise WorkloadError(f"mariadb: {server.SERVER} is missing",
                                hint=f"apt-get install {datadir.PACKAGE}")
        rules.check_backing(self, backing)

    def exec_timeout(self) -> float:
        return self.timeout_s or self.duration_s + self.warmup_s + 120.0

    # -- its server, over the base (hugelab.workloads.serverkind.ServerKind) ----------------
    def admit(self, backing: str) -> None:
        rules.check_backing(self, backing)

    def own_files(self, target: Target | None) -> Path | None:
        """Its datadir copied from the template; None in a user's domain (the guest's own)."""
        return None if in_domain(target) else template.trial_dir(self)

    def guest_build(self) -> LayerBuild | None:
        """Its datadir and tables in a user's domain, made once (indomain.guest_build)."""
        return indomain.guest_build(self)

    def drop_files(self, files: Path | None) -> None:
        if files is not None:
            shutil.rmtree(files, ignore_errors=True)

    def server_argv(self, port: int, files: Path | None = None) -> list[str]:
        """mariadbd over the datadir in `files` with the arm's setting (pure); a user's
        datadir's copy gives the load its user through --init-file; no `files`: a user's
        domain, its directory the guest's (indomain.TOP)."""
        settings = self.settings()
        if self.datadir and files is not None:
            settings += (("init_file", files / INIT_FILE), ("skip_slave_start", True))
        return server.argv(files or indomain.TOP, port, str(rules.buffer_pool_bytes(self)),
                           self.large_pages(), settings)

    def start_failed(self, exc: WorkloadError, files: Path | None) -> WorkloadError:
        return server.start_failed(exc, files)

    def sysbench(self, client: Target, port: int, seconds: float) -> ExecResult:
        res = client.exec(oltp.argv(self.script, port, self.tables, self.table_size,
                                    self.threads, seconds, database=self.database),
                          timeout=self.exec_timeout())
        check_exit(res, "sysbench")
        return res

    def load(self, client: Target, port: int, files: Path | None) -> ExecResult:
        if in_domain(client):  # the guest's server is empty: its tables made there first
            indomain.build(self, client, port)  # type: ignore[arg-type]
        if self.warmup_s >= 1:
            self.sysbench(client, port, self.warmup_s)
        return self.sysbench(client, port, self.duration_s)

    def last_look(self, load: ExecResult, handle: ServerHandle, files: Path | None
                  ) -> tuple[ExecResult, str, list[dict[str, int]], str | None]:
        """Its error log and its mappings in huge pages, read while it still runs; in a user's
        domain, where its data came from."""
        if isinstance(handle, DomainHandle):
            return load, *indomain.look(handle)
        return load, server.error_log(files), server.mappings(server.pid_of(handle)), None

    def loaded(self, load: tuple[ExecResult, str, list[dict[str, int]], str | None],
               output: str, client: Target) -> WorkloadResult:
        res, log, maps, data = load
        result = WorkloadResult(metrics=oltp.parse(res.stdout), primary="tps", unit=self.unit,
                                better="higher")
        # its memory (evidence["server"]) is the base's; a paired trial's tree is the trial's
        evidence.record(result, self.large_pages(), rules.buffer_pool_bytes(self), log, maps, {})
        evidence.tell(self, result, log, first_version(res.stdout, r"sysbench (\S+)"))
        if in_domain(client):
            result.info.update({"where": "domain", "client": f"guest {client.name}",
                                "data": data or "made in the trial"})
        return result

    def describe(self, result: WorkloadResult, backing: str) -> None:
        result.info["backing"] = backing
        evidence.tree_pages(result)  # a user's domain: the base's tree is its server's

    # -- interleaved: windows of sysbench runs (interleave) or of requests (requests) -------
    def warm(self, target: Target, srv: Running) -> None:
        if self.warmup_s >= 1:
            self.window(target, srv, self.warmup_s)

    def window(self, target: Target, srv: Running, seconds: float
               ) -> tuple[dict[str, float], np.ndarray]:
        """One sysbench run of `seconds` against `srv`: its summary, and its latencies in µs
        (from sysbench's histogram: each bucket's value, as often as it counted)."""
        res = self.sysbench(target, srv.port, seconds)
        srv.client_version = first_version(res.stdout, r"sysbench (\S+)")
        return oltp.parse(res.stdout), oltp.latencies_ms(res.stdout) * 1000.0

    def finish(self, srv: Running, windows: list[dict[str, float]], latencies: np.ndarray,
               backing: str) -> WorkloadResult:
        """The trial's result from its windows and the server's own evidence, read now."""
        metrics = dict(windows[0]) if len(windows) == 1 else \
            {"tps": interleave.geomean([w["tps"] for w in windows])}
        if len(windows) > 1 and latencies.size:
            for p in oltp.PERCENTILES:
                metrics[f"p{p:g}_ms"] = float(np.percentile(latencies, p)) / 1000.0
        return self.request_result(srv, metrics, backing, "tps")

    def served(self, result: WorkloadResult, srv: Running) -> None:
        """Its own evidence beside the base's memory: its tree alone (every arm's server is
        in an interleaved trial's tree) with its huge-page mappings, and its info."""
        log = server.error_log(srv.files)
        evidence.record(result, self.large_pages(), rules.buffer_pool_bytes(self), log,
                        server.mappings(self.server_pid(srv)), result.evidence["server"])
        evidence.tell(self, result, log, srv.client_version)

    @property
    def clients(self) -> int:
        return self.threads

    def reqmix_server(self, host: str, port: int) -> str:
        return mysql_server(self.database, host=host, port=port, user=oltp.USER)

    def request_load(self) -> dict[str, Any]:
        """oltp_read_only's transaction over the datadir's tables (each op one transaction)."""
        return {"tables": self.tables, "table_size": self.table_size}

    def run(self, target: Target, backing: str) -> WorkloadResult:
        if place_of(target) is Place.GUEST:
            raise WorkloadError("mariadb runs on the host and in a user's domain")
        return super().run(target, backing)


def leftovers() -> list[str]:
    return datadir.remove_leftovers()


def guest_build(table: dict[str, Any]) -> GuestBuild:
    """What a trial in a user's domain builds in the guest (hugelab.workloads.mariadb.guestcost)."""
    get = partial(Mariadb.setting, table)
    return in_guest(int(get("tables")), int(get("table_size")), get("dump"),
                    float(get("warmup_s") or 0.0))


KIND = Kind(
    keys=keys_of(Mariadb),
    name="mariadb", workload=Mariadb,
    summary="MariaDB loaded by sysbench's OLTP scripts, with --large-pages per arm",
    role="server", where=frozenset({"host", "domain", "interleaved"}),
    interleave=server_problem,
    tools=(Tool("sysbench", "sysbench"), Tool("mariadb-install-db", "mariadb-server"),
           Tool("mariadbd", "mariadb-server"), Tool("mariadb", "mariadb-client")),
    duration=("duration_s", 10.0), judge=check, leftovers=leftovers, guest_build=guest_build,
    refusals={"guest": "mariadb runs on the host and in a user's domain (hugelab's own "
                       "guests do not have its datadir cache yet)"})
