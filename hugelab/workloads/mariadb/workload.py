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
import math
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hugelab.checks import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.errors import ExperimentError, WorkloadError
from hugelab.proc import run, which
from hugelab.units import amount, parse_size
from hugelab.workloads import interleave
from hugelab.workloads.base import Place, Target, WorkloadResult, place_of
from hugelab.workloads.command import (
    LOOPBACK,
    LocalServer,
    ServerHandle,
    check_exit,
    first_version,
    server_memory,
)
from hugelab.workloads.guestside import in_domain
from hugelab.workloads.interleave import server_problem
from hugelab.workloads.kind import Key, Kind, Tool
from hugelab.workloads.mariadb import datadir, indomain, oltp, server, userdata
from hugelab.workloads.reqmix import mysql_server
from hugelab.workloads.servermem import server_tree

BACKINGS = ("4k", "hugetlb-2M")
LOG_BUFFERS = 2 * (16 << 20)  # innodb_log_buffer_size (16 MiB), double-buffered
SMALL_CACHES = 2 * (8 << 20)  # key buffer and Aria page cache, as server.FIXED sets them
_TEMPLATES: dict[str, Path] = {}


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
        if self.script not in oltp.SCRIPTS and not self.script.endswith(".lua"):
            raise ExperimentError(f"mariadb: script {self.script!r}: one of "
                                  f"{', '.join(oltp.SCRIPTS)}, or a .lua file")
        for name in ("tables", "table_size", "threads"):
            if getattr(self, name) < 1:
                raise ExperimentError(f"mariadb: {name} must be at least 1")
        if self.duration_s < 1 or self.window_s < 1 or self.warmup_s < 0:
            raise ExperimentError("mariadb: duration_s and window_s are whole seconds, at "
                                  "least 1; warmup_s at least 0")
        if self.window_ops is not None and (self.window_ops < 1 or self.warm_ops < 0):
            raise ExperimentError("mariadb: window_ops is at least 1 and warm_ops at least 0")
        object.__setattr__(self, "app", tuple(self.app))
        for key, value in self.app:
            if key.replace("_", "-") in server.RESERVED - {"large-pages"}:
                raise ExperimentError(f"mariadb: app sets {key}, which hugelab sets itself")
            if key == "large_pages" and not isinstance(value, bool):
                raise ExperimentError(f"mariadb: app large_pages must be true or false, "
                                      f"got {value!r}")
        self.buffer_pool_bytes()
        for key in ("dump", "datadir"):
            if getattr(self, key):
                object.__setattr__(self, key, os.path.abspath(getattr(self, key)))
        userdata.check(self.dump, self.datadir, self.script, self.database, self.tables,
                       self.script in oltp.SCRIPTS or self.window_ops is not None)
        if self.arm_backing is not None:
            self._check_backing(self.arm_backing)

    def buffer_pool_bytes(self) -> int:
        value = dict(self.app).get("innodb_buffer_pool_size", self.buffer_pool)
        try:
            return parse_size(str(value))
        except ValueError as exc:
            raise ExperimentError(f"mariadb: buffer pool: {exc}") from None

    def large_pages(self) -> bool:
        given = dict(self.app).get("large_pages")
        return bool(given) if given is not None else self.arm_backing == "hugetlb-2M"

    def _check_backing(self, backing: str) -> None:
        if backing not in BACKINGS:
            raise ExperimentError(f"mariadb: backing {backing!r} is not one the server's "
                                  f"memory can be given; use {', '.join(BACKINGS)}",
                                  hint="4k without large pages, hugetlb-2M with them")
        if self.large_pages() != (backing == "hugetlb-2M"):
            raise ExperimentError(f"mariadb: large_pages = {self.large_pages()} does not go "
                                  f"with backing {backing}",
                                  hint="leave large_pages unset: it follows the backing")

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
        page_size = parse_size(size)
        pool = self.buffer_pool_bytes()
        parts = (pool, math.ceil(pool * 0.03), LOG_BUFFERS, SMALL_CACHES, 4 << 20)
        return sum(math.ceil(p / page_size) * page_size for p in parts)

    def settings(self) -> tuple[tuple[str, Any], ...]:
        return tuple((k, v) for k, v in self.app
                     if k not in ("large_pages", "innodb_buffer_pool_size"))

    def preflight(self, backing: str) -> None:
        if self.domain_arm:  # the guest's own programs, checked in the trial
            self._check_backing(backing)
            return
        for tool in ("sysbench", "mariadb-install-db", "mariadb"):
            which(tool)
        if not Path(server.SERVER).exists():
            raise WorkloadError(f"mariadb: {server.SERVER} is missing",
                                hint=f"apt-get install {datadir.PACKAGE}")
        self._check_backing(backing)

    def exec_timeout(self) -> float:
        return self.timeout_s or self.duration_s + self.warmup_s + 120.0

    # -- one server: start, warm, windows of load, finish (evidence), stop ----------------
    def start(self, backing: str) -> Server:
        """A private datadir copied from the template, its server up with the arm's setting;
        the caller stops it (stop)."""
        self._check_backing(backing)
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
            return Server(top, start(top, str(pool), large, settings), large, pool)
        except BaseException:
            shutil.rmtree(top, ignore_errors=True)
            raise

    def template(self) -> Path:
        """What each trial's datadir is copied from: the user's datadir, the one loaded from
        their dump, or sysbench's tables (both cached)."""
        if self.datadir:
            return Path(self.datadir)
        if self.dump:
            return ensure_dump_template(self.dump, self.database)
        return ensure_template(self.tables, self.table_size)

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
        rows = oltp.histogram(res.stdout)
        lat = np.repeat([v * 1000.0 for v, _ in rows], [c for _, c in rows]) if rows \
            else np.empty(0)
        return oltp.parse(res.stdout), lat

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
        log, maps, memory = srv.log(), server.mappings(srv.pid), server_memory(srv.handle)
        result.evidence["mariadb"] = {"large_pages": srv.large, "buffer_pool_kb": srv.pool // 1024,
                                      "mappings": maps, **server.report(log)}
        result.evidence["server"] = memory
        if memory:  # its own server alone: an interleaved trial's tree holds every arm's
            hugetlb: dict[int, int] = {}
            for m in maps:
                hugetlb[m["page_kb"]] = hugetlb.get(m["page_kb"], 0) + m["size_kb"]
            result.evidence["tree"] = {**server_tree("mariadbd", memory),
                                       "hugetlb_by_page_kb": hugetlb}
        result.info.update({"tool": "sysbench", "script": self.script, "backing": backing,
                            "server_version": first_version(log, r"Version: '([^']+)'"),
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
            self._check_backing(backing)
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


@dataclass
class Server:
    """One trial's running mariadbd: its private directory, handle and settings."""

    top: Path
    handle: ServerHandle
    large: bool
    pool: int
    sysbench_version: str | None = None

    @property
    def pid(self) -> int:
        return int(getattr(getattr(self.handle, "proc", None), "pid", 0))

    def log(self) -> str:
        path = self.top / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


def start(top: Path, pool: str, large: bool, settings: tuple[tuple[str, Any], ...]
          ) -> ServerHandle:
    """mariadbd on a free loopback port; a failure leads with the server's own error log."""
    try:
        return LocalServer(ready_timeout_s=120.0).start(
            lambda port: server.argv(top, port, pool, large, settings), "mariadbd")
    except WorkloadError as exc:
        log = top / "error.log"
        said = server.report(log.read_text(errors="replace"))["errors"] if log.exists() else []
        if not said:
            raise
        raise WorkloadError("mariadbd did not start: " + "; ".join(said)) from exc


def ensure_template(tables: int, table_size: int) -> Path:
    """The cached datadir for (server version, tables, table size), built once (minutes for
    large tables) and copied per trial."""
    version = run([server.SERVER, "--version"]).stdout.strip()
    key = datadir.template_key(version, tables, table_size)
    dest = _cached(key, lambda top: _build(top, tables, table_size))
    datadir.check_template(dest)
    return dest


def ensure_dump_template(dump: str, database: str) -> Path:
    """The cached datadir a user's SQL dump was loaded into once, by its sha256 and the
    server's version; the dump is only read."""
    path = Path(dump)
    st = path.stat()
    memo = f"{path}:{st.st_size}:{st.st_mtime_ns}:{database}"
    if memo not in _TEMPLATES:
        version = run([server.SERVER, "--version"]).stdout.strip()
        key = userdata.dump_key(version, userdata.sha256(path), database)
        _TEMPLATES[memo] = _cached(key, lambda top: _load_dump(top, path, database))
    return _TEMPLATES[memo]


def _cached(key: str, build: Callable[[Path], None]) -> Path:
    """The template `key` from the cache, built once by `build` in a private directory of
    its own (hugelab.owned.TemplateCache: under a lock, so two runs build it once)."""
    if key not in _TEMPLATES:
        _TEMPLATES[key] = datadir.templates().ensure(key, lambda tmp: _built(tmp, build))
    return _TEMPLATES[key]


def _built(tmp: Path, build: Callable[[Path], None]) -> None:
    with datadir.private_dir("template") as top:
        build(top)
        run(["cp", "-a", "--", str(top / "data"), str(tmp)])


def _load_dump(top: Path, dump: Path, database: str) -> None:
    """A fresh datadir with the dump loaded (into `database` unless it says otherwise) and
    the load's user, shut down cleanly."""
    datadir.install(top / "data")
    handle = start(top, "64M", False, (("innodb_fast_shutdown", 0),))
    try:
        sock = f"--socket={top / 'sock'}"
        run(["mariadb", sock, "-uroot", "-e", f"CREATE DATABASE IF NOT EXISTS `{database}`; "
             + userdata.GRANT], timeout=60)
        run(userdata.load_argv(top / "sock", database, dump), timeout=3600)
        run(["mariadb-admin", sock, "-uroot", "shutdown"], timeout=300)
    finally:
        handle.stop()


def _build(top: Path, tables: int, table_size: int) -> None:
    datadir.install(top / "data")
    settings = (("innodb_fast_shutdown", 0),)
    handle = start(top, "64M", False, settings)
    try:
        run(["mariadb", f"--socket={top / 'sock'}", "-uroot", "-e",
             f"CREATE DATABASE {datadir.DATABASE}; CREATE USER '{oltp.USER}'@'%'; "
             f"GRANT ALL ON {datadir.DATABASE}.* TO '{oltp.USER}'@'%'"], timeout=60)
        run(oltp.argv("oltp_read_only", handle.client_port, tables, table_size, 2, 0,
                      step="prepare"), timeout=3600)
        run(["mariadb-admin", f"--socket={top / 'sock'}", "-uroot", "shutdown"], timeout=300)
    finally:
        handle.stop()


def check(evidence: Mapping[str, Any]) -> Check | None:
    """The app layer: --large-pages got the buffer pool into huge pages (mysqld's mapping of the
    pool's size in pages larger than 4 KiB), or the server fell back and said so; without it,
    no mapping of the server is in huge pages."""
    m = evidence.get("mariadb")
    if not isinstance(m, dict):
        return None
    maps = m.get("mappings") or []
    huge_kb = sum(int(x["size_kb"]) for x in maps)
    failed = m.get("large_page_failures") or []
    said = f" (the server: couldn't allocate {failed[0]['bytes']} bytes in huge pages)" \
        if failed else ""
    if not m.get("large_pages"):
        if huge_kb:
            return Check(CONTRADICTED, f"mariadbd without --large-pages, yet "
                                       f"{amount(huge_kb)} of its memory is in huge pages", "app")
        return Check(VERIFIED, "mariadbd without --large-pages: none of its memory in huge "
                               "pages", "app")
    if not maps and not failed:
        return Check(NOT_APPLICABLE, "mariadbd's mappings were not read (it ended first)", "app")
    pool = int(m.get("buffer_pool_kb") or 0)
    if not any(int(x["size_kb"]) >= pool for x in maps):
        return Check(CONTRADICTED, f"asked for --large-pages, but the {amount(pool)} buffer "
                                   f"pool is not in huge pages{said}", "app")
    return Check(VERIFIED, f"--large-pages: the {amount(pool)} buffer pool in "
                           f"{maps[0]['page_kb'] // 1024} MiB pages, {amount(huge_kb)} of "
                           f"mysqld in huge pages{said}", "app")


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
