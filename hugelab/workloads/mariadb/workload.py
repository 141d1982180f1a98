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
from pathlib import Path
from typing import Any

import numpy as np

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.proc import which
from hugelab.units import parse_size
from hugelab.workloads import interleave
from hugelab.workloads.base import Place, Target, WorkloadResult, place_of
from hugelab.workloads.command import LOOPBACK, check_exit, first_version, server_memory
from hugelab.workloads.guestside import in_domain
from hugelab.workloads.interleave import server_problem
from hugelab.workloads.kind import Key, Kind, Tool
from hugelab.workloads.mariadb import (
    datadir,
    evidence,
    indomain,
    oltp,
    rules,
    server,
    template,
    userdata,
)
from hugelab.workloads.mariadb.evidence import check
from hugelab.workloads.mariadb.server import Server
from hugelab.workloads.reqmix import mysql_server


@dataclass(frozen=True)
class Mariadb:
    """MariaDB + sysbench OLTP; metrics tps, qps, latency_avg_ms, p50_ms, p95_ms, p99_ms."""

    script: str = "oltp_read_only"
    tables: int = 2
    table_size: int = 10000
    threads: int = 4
    duration_s: float = 10.0
    warmup_s: float = 1.0
    window_s: float = 2.0  # design "interleaved": each arm's sysbench window
    window_ops: int | None = None  # design "interleaved": windows of this many transactions
    warm_ops: int = 2      # per window and connection, untimed (the other arm's caches)
    buffer_pool: str = "128M"
    timeout_s: float | None = None
    dump: str | None = None      # a user's SQL dump: loaded once, cached, then copied
    datadir: str | None = None   # a user's datadir: copied per trial, never opened in place
    database: str = oltp.DATABASE  # the database the load connects to
    app: tuple[tuple[str, Any], ...] = ()
    arm_backing: str | None = None  # set by for_arm: the arm's backing decides large_pages
    domain_arm: bool = False  # set by for_arm: a user's domain runs its own MariaDB
    kind: str = field(default="mariadb", init=False)

    def __post_init__(self) -> None:
        rules.validate(self)

    def buffer_pool_bytes(self) -> int:
        value = dict(self.app).get("innodb_buffer_pool_size", self.buffer_pool)
        try:
            return parse_size(str(value))
        except ValueError as exc:
            raise ExperimentError(f"mariadb: buffer pool: {exc}") from None

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
        return server.large_pages_bytes(self.buffer_pool_bytes(), parse_size(size))

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

    # -- one server: start, warm, windows of load, finish (evidence), stop ----------------
    def start(self, backing: str) -> Server:
        """A private datadir copied from the template, its server up with the arm's setting;
        the caller stops it (stop)."""
        rules.check_backing(self, backing)
        template = self.template()
        top = datadir.new_dir("trial")
        try:
            settings = self.settings()
            if self.datadir:
                userdata.copy_datadir(template, top)
                settings += (("init_file", top / userdata.INIT_FILE),
                             ("skip_slave_start", True))
            else:
                datadir.copy_template(template, top)
            large, pool = self.large_pages(), self.buffer_pool_bytes()
            return Server(top, server.start(top, str(pool), large, settings), large, pool)
        except BaseException:
            shutil.rmtree(top, ignore_errors=True)
            raise

    def template(self) -> Path:
        return template.source(self)

    def warm(self, target: Target, srv: Server) -> None:
        if self.warmup_s >= 1:
            self.window(target, srv, self.warmup_s)

    def window(self, target: Target, srv: Server, seconds: float
               ) -> tuple[dict[str, float], np.ndarray]:
        """One sysbench run of `seconds` against `srv`: its summary, and its latencies in µs
        (from sysbench's histogram: each bucket's value, as often as it counted)."""
        res = target.exec(oltp.argv(self.script, srv.handle.client_port, self.tables,
                                    self.table_size, self.threads, seconds,
                                    database=self.database),
                          timeout=self.exec_timeout())
        check_exit(res, "sysbench")
        srv.sysbench_version = first_version(res.stdout, r"sysbench (\S+)")
        return oltp.parse(res.stdout), oltp.latencies_ms(res.stdout) * 1000.0

    def finish(self, srv: Server, windows: list[dict[str, float]], latencies: np.ndarray,
               backing: str) -> WorkloadResult:
        """The trial's result from its windows (one, in a paired trial) and the server's own
        evidence, read now, with the server still up."""
        metrics = dict(windows[0]) if len(windows) == 1 else \
            {"tps": interleave.geomean([w["tps"] for w in windows])}
        if len(windows) > 1 and latencies.size:
            for p in oltp.PERCENTILES:
                metrics[f"p{p:g}_ms"] = float(np.percentile(latencies, p)) / 1000.0
        return self.request_result(srv, metrics, backing, "tps")

    # -- request-level interleaving (hugelab.workloads.requests) ----------------------------
    @property
    def clients(self) -> int:
        return self.threads

    def request_server(self, srv: Server) -> str:
        return mysql_server(self.database, host=LOOPBACK, port=srv.handle.client_port,
                            user=oltp.USER)

    def request_load(self) -> dict[str, Any]:
        """oltp_read_only's transaction over the datadir's tables (each op one transaction)."""
        return {"tables": self.tables, "table_size": self.table_size}

    def server_pid(self, srv: Server) -> int:
        return srv.pid

    def request_result(self, srv: Server, metrics: dict[str, float], backing: str,
                       primary: str = "ops_per_s") -> WorkloadResult:
        """The arm's result: `metrics`, and its own server's evidence, read now."""
        result = WorkloadResult(metrics=metrics, primary=primary, unit="transactions/s",
                                better="higher")
        log = srv.log()  # its own tree alone: an interleaved trial's tree holds every arm's
        evidence.record(result, srv.large, srv.pool, log, server.mappings(srv.pid),
                        server_memory(srv.handle))
        result.info.update({"tool": "sysbench", "script": self.script, "backing": backing,
                            "server_version": evidence.server_version(log),
                            "sysbench_version": srv.sysbench_version})
        if self.dump or self.datadir:
            result.info["user_data"] = {"dump": self.dump} if self.dump else \
                {"datadir": self.datadir}
        return result

    def stop(self, srv: Server) -> None:
        try:
            srv.handle.stop()
        finally:
            shutil.rmtree(srv.top, ignore_errors=True)

    def run(self, target: Target, backing: str) -> WorkloadResult:
        if in_domain(target):
            rules.check_backing(self, backing)
            return indomain.DomainTrial(self, target, backing).run()  # type: ignore[arg-type]
        if place_of(target) is not Place.NATIVE:
            raise WorkloadError("mariadb runs on the host and in a user's domain")
        srv = self.start(backing)
        try:
            self.warm(target, srv)
            summary, lat = self.window(target, srv, self.duration_s)
            result = self.finish(srv, [summary], lat, backing)
            result.evidence.pop("tree", None)  # a paired trial's tree is the whole trial's
            return result
        finally:
            self.stop(srv)


def leftovers() -> list[str]:
    return datadir.remove_leftovers()


KEYS = (  # the [workload] keys, for docs/kinds.md
    Key('script', '', 'the sysbench OLTP script ("oltp_read_only", ...)'),
    Key('tables', '', "sysbench --tables: the template's tables"),
    Key('table_size', 'rows', 'sysbench --table-size'),
    Key('threads', '', 'sysbench --threads'),
    Key('duration_s', 's', 'sysbench --time: how long the load runs'),
    Key('warmup_s', 's', 'untimed load before the measured one'),
    Key('window_s', 's', 'design "interleaved": each arm\'s sysbench window'),
    Key('window_ops', 'transactions', 'design "interleaved": windows of this many instead'),
    Key('warm_ops', 'transactions', "per window and connection, untimed (the other arm's caches)"),
    Key('buffer_pool', 'bytes', 'innodb_buffer_pool_size'),
    Key('timeout_s', 's', "the longest a trial may take (none: hugelab's)"),
    Key('dump', '', 'your SQL dump: loaded once into a cached template'),
    Key('datadir', '', "your stopped server's datadir: copied per trial, never opened in place"),
    Key('database', '', 'the database the load connects to'),
    Key('app', '', 'server settings for the arm; large_pages follows the backing'),
)


KIND = Kind(
    keys=KEYS,
    name="mariadb", workload=Mariadb,
    summary="MariaDB loaded by sysbench's OLTP scripts, with --large-pages per arm",
    role="server", where=frozenset({"host", "domain", "interleaved"}),
    interleave=server_problem,
    tools=(Tool("sysbench", "sysbench"), Tool("mariadb-install-db", "mariadb-server"),
           Tool("mariadbd", "mariadb-server"), Tool("mariadb", "mariadb-client")),
    duration=("duration_s", 10.0), judge=check, leftovers=leftovers,
    refusals={"guest": "mariadb runs on the host and in a user's domain (hugelab's own "
                       "guests do not have its datadir cache yet)"})
